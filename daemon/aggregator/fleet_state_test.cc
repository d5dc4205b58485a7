// Fleet state: sessions, heartbeat timeouts on a fake clock, dedup and gaps, state round trip.
#include "daemon/aggregator/fleet_state.h"

#include <gtest/gtest.h>

namespace fw::aggregator {
namespace {

namespace v1 = fabricwatch::v1;

v1::Hello MakeHello(const std::string& node, uint64_t session) {
  v1::Hello h;
  h.set_node(node);
  h.set_session_id(session);
  return h;
}

v1::ProbeBatch Batch(uint64_t seq, int results = 2) {
  v1::ProbeBatch b;
  b.set_seq(seq);
  b.set_test_id(seq);
  for (int i = 0; i < results; ++i) b.add_results()->set_transport(v1::TRANSPORT_UDP);
  return b;
}

TEST(FleetStateTest, ConnectDisconnectAndMetrics) {
  FakeClock clock;
  metrics::Registry reg;
  FleetState fleet(clock, reg, {});
  fleet.OnHello(1, MakeHello("a", 10));
  fleet.OnHello(2, MakeHello("b", 20));
  EXPECT_EQ(fleet.connected(), 2u);
  std::string text = reg.RenderToString();
  EXPECT_NE(text.find("fabricwatch_agents_connected 2\n"), std::string::npos);
  EXPECT_NE(text.find("fabricwatch_agent_up{node=\"a\"} 1\n"), std::string::npos);
  fleet.OnDisconnect("a", 1);
  EXPECT_EQ(fleet.connected(), 1u);
  EXPECT_NE(reg.RenderToString().find("fabricwatch_agent_up{node=\"a\"} 0\n"), std::string::npos);
}

TEST(FleetStateTest, StaleStreamEndingDoesNotDisconnectNewerOne) {
  FakeClock clock;
  metrics::Registry reg;
  FleetState fleet(clock, reg, {});
  fleet.OnHello(1, MakeHello("a", 10));
  fleet.OnHello(2, MakeHello("a", 10));  // reconnected before the old stream was torn down
  fleet.OnDisconnect("a", 1);
  EXPECT_EQ(fleet.connected(), 1u);
}

TEST(FleetStateTest, HeartbeatTimeoutMarksDownAndHeartbeatRevives) {
  FakeClock clock;
  metrics::Registry reg;
  FleetState fleet(clock, reg, {.heartbeat_timeout_s = 15});
  fleet.OnHello(1, MakeHello("a", 10));
  clock.Advance(std::chrono::seconds(14));
  fleet.Sweep();
  EXPECT_EQ(fleet.connected(), 1u);
  clock.Advance(std::chrono::seconds(2));
  fleet.Sweep();
  EXPECT_EQ(fleet.connected(), 0u);
  EXPECT_NE(reg.RenderToString().find("fabricwatch_agent_up{node=\"a\"} 0\n"), std::string::npos);
  fleet.OnHeartbeat("a");
  EXPECT_EQ(fleet.connected(), 1u);
}

TEST(FleetStateTest, DuplicatesAndGapsAreCountedNotStored) {
  FakeClock clock;
  metrics::Registry reg;
  FleetState fleet(clock, reg, {.record_test_batches = true});
  fleet.OnHello(1, MakeHello("a", 10));
  uint64_t ack = 0;
  EXPECT_EQ(fleet.OnProbeBatch("a", Batch(1), &ack), BatchVerdict::kAccepted);
  EXPECT_EQ(fleet.OnProbeBatch("a", Batch(2), &ack), BatchVerdict::kAccepted);
  EXPECT_EQ(fleet.OnProbeBatch("a", Batch(2), &ack), BatchVerdict::kDuplicate);
  EXPECT_EQ(ack, 2u);
  EXPECT_EQ(fleet.OnProbeBatch("a", Batch(5), &ack), BatchVerdict::kGap);
  auto nodes = fleet.Nodes();
  ASSERT_EQ(nodes.size(), 1u);
  EXPECT_EQ(nodes[0].ingest.batches, 3u);
  EXPECT_EQ(nodes[0].ingest.duplicates, 1u);
  EXPECT_EQ(nodes[0].ingest.gaps, 2u);
  EXPECT_EQ(nodes[0].ingest.results, 6u);
  EXPECT_NE(reg.RenderToString().find(
                "fabricwatch_probe_results_received_total{transport=\"udp\"} 6\n"),
            std::string::npos);
  // A reconnect of the same agent session resumes from the stored seq.
  EXPECT_EQ(fleet.OnHello(2, MakeHello("a", 10)), 5u);
  // A restarted agent (new session) starts again at 0.
  EXPECT_EQ(fleet.OnHello(3, MakeHello("a", 11)), 0u);
}

TEST(FleetStateTest, IngestStateSurvivesRoundTripAndRejectsGarbage) {
  FakeClock clock;
  metrics::Registry reg1, reg2;
  FleetState a(clock, reg1, {.record_test_batches = true});
  a.OnHello(1, MakeHello("n1", 7));
  uint64_t ack;
  a.OnProbeBatch("n1", Batch(1), &ack);
  a.OnProbeBatch("n1", Batch(2), &ack);
  FleetState b(clock, reg2, {.record_test_batches = true});
  ASSERT_TRUE(b.ImportIngestJson(a.ExportIngestJson()).ok());
  EXPECT_EQ(b.OnHello(9, MakeHello("n1", 7)), 2u);
  EXPECT_EQ(b.OnProbeBatch("n1", Batch(2), &ack), BatchVerdict::kDuplicate);
  EXPECT_FALSE(b.ImportIngestJson("{not json").ok());
  EXPECT_FALSE(b.ImportIngestJson("{\"n\": {\"session_id\": \"x\"}}").ok());
}

}  // namespace
}  // namespace fw::aggregator
