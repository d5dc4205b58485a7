// Fleet state: sessions, heartbeat timeouts on a fake clock, dedup and gaps, state round trip.
#include "daemon/aggregator/ingest/fleet_state.h"

#include <gtest/gtest.h>

#include <cstdio>

#include "exporter/registry.h"

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
  EXPECT_NE(
      reg.RenderToString().find("fabricwatch_probe_results_received_total{transport=\"udp\"} 6\n"),
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

// A fleet of `n` agents "n000".."n{n-1}", all connected.
void Connect(FleetState& fleet, int n) {
  for (int i = 0; i < n; ++i) {
    char name[16];
    std::snprintf(name, sizeof name, "n%03d", i);
    fleet.OnHello(static_cast<uint64_t>(i + 1), MakeHello(name, 100 + static_cast<uint64_t>(i)));
  }
}

// Every agent from `from` on heartbeats, each read `lag_s` after it was sent.
void HeartbeatFrom(FleetState& fleet, const FakeClock& clock, int from, int n, double lag_s) {
  for (int i = from; i < n; ++i) {
    char name[16];
    std::snprintf(name, sizeof name, "n%03d", i);
    fleet.OnHeartbeat(name, clock.WallNanos() - static_cast<int64_t>(lag_s * 1e9));
  }
}

TEST(FleetStateTest, IngestLagStretchesTheTimeout) {
  FakeClock clock;
  metrics::Registry reg;
  FleetState fleet(clock, reg, {.heartbeat_timeout_s = 15});
  Connect(fleet, 100);
  // The aggregator reads every heartbeat 20 s late; n000 then falls silent for good.
  for (int s = 0; s < 34; ++s) {
    HeartbeatFrom(fleet, clock, 1, 100, 20);
    clock.Advance(std::chrono::seconds(1));
    fleet.Sweep();
    ASSERT_EQ(fleet.connected(), 100u) << "after " << s + 1 << " s";
  }
  EXPECT_DOUBLE_EQ(fleet.ingest_lag_s(), 20);
  EXPECT_NE(reg.RenderToString().find("fabricwatch_ingest_lag_seconds 20\n"), std::string::npos);
  clock.Advance(std::chrono::seconds(2));  // 36 s > 15 s + 20 s of lag
  HeartbeatFrom(fleet, clock, 1, 100, 20);
  fleet.Sweep();
  EXPECT_EQ(fleet.connected(), 99u);
}

// The timeout stretches by at most --heartbeat-grace-max; the analyzer's persistence rules read
// how far behind the data is past that cap too.
TEST(FleetStateTest, DataLagIsNotCappedByTheGrace) {
  FakeClock clock;
  metrics::Registry reg;
  FleetState fleet(clock, reg, {.heartbeat_timeout_s = 15, .heartbeat_grace_max_s = 105});
  Connect(fleet, 100);
  HeartbeatFrom(fleet, clock, 0, 100, 300);
  fleet.Sweep();
  EXPECT_DOUBLE_EQ(fleet.ingest_lag_s(), 105);
  EXPECT_DOUBLE_EQ(fleet.data_lag_s(), 300);
}

TEST(FleetStateTest, OneAgentsWrongClockDoesNotStretchTheTimeout) {
  FakeClock clock;
  metrics::Registry reg;
  FleetState fleet(clock, reg, {.heartbeat_timeout_s = 15});
  Connect(fleet, 100);
  fleet.OnHeartbeat("n099", clock.WallNanos() - 3'000'000'000'000);  // an hour behind
  HeartbeatFrom(fleet, clock, 1, 99, 0.001);
  fleet.Sweep();
  EXPECT_LT(fleet.ingest_lag_s(), 0.01);
  clock.Advance(std::chrono::seconds(16));
  HeartbeatFrom(fleet, clock, 1, 100, 0.001);
  fleet.Sweep();
  EXPECT_EQ(fleet.connected(), 99u);  // n000, silent 16 s, is down on time
}

TEST(FleetStateTest, MassTimeoutIsDeferredUpToTheCap) {
  FakeClock clock;
  metrics::Registry reg;
  FleetState fleet(clock, reg,
                   {.heartbeat_timeout_s = 15,
                    .heartbeat_grace_max_s = 45,
                    .mass_timeout_min = 10,
                    .mass_timeout_fraction = 0.05});
  Connect(fleet, 100);
  // 30 of 100 agents fall silent together, streams open: the aggregator, not they, is suspect.
  for (int s = 0; s < 59; ++s) {
    clock.Advance(std::chrono::seconds(1));
    HeartbeatFrom(fleet, clock, 30, 100, 0);
    fleet.Sweep();
    ASSERT_EQ(fleet.connected(), 100u) << "after " << s + 1 << " s";
  }
  std::string text = reg.RenderToString();
  EXPECT_NE(text.find("fabricwatch_heartbeat_timeouts_deferred 30\n"), std::string::npos);
  EXPECT_NE(text.find("fabricwatch_heartbeat_mass_timeouts_total 1\n"), std::string::npos);
  // A stream that ends is down at once, deferral or not.
  fleet.OnDisconnect("n000", 1);
  EXPECT_EQ(fleet.connected(), 99u);
  // Past timeout + grace cap (60 s), the rest go down too.
  clock.Advance(std::chrono::seconds(2));
  HeartbeatFrom(fleet, clock, 30, 100, 0);
  fleet.Sweep();
  EXPECT_EQ(fleet.connected(), 70u);
  text = reg.RenderToString();
  EXPECT_NE(text.find("fabricwatch_heartbeat_timeouts_deferred 0\n"), std::string::npos);
}

TEST(FleetStateTest, AFewSilentAgentsAreNotAMassTimeout) {
  FakeClock clock;
  metrics::Registry reg;
  FleetState fleet(
      clock, reg,
      {.heartbeat_timeout_s = 15, .mass_timeout_min = 10, .mass_timeout_fraction = 0.05});
  Connect(fleet, 100);
  clock.Advance(std::chrono::seconds(16));
  HeartbeatFrom(fleet, clock, 3, 100, 0);  // n000..n002 silent: 3 < 10
  fleet.Sweep();
  EXPECT_EQ(fleet.connected(), 97u);
  EXPECT_NE(reg.RenderToString().find("fabricwatch_heartbeat_mass_timeouts_total 0\n"),
            std::string::npos);
}

TEST(FleetStateTest, ANewSessionForANodeTakesOverAndTheOldStreamsBatchesAreRefused) {
  FakeClock clock;
  metrics::Registry reg;
  FleetState fleet(clock, reg, {});
  uint64_t ack = 0;
  HelloResult a = fleet.Admit(1, MakeHello("dup", 10));
  EXPECT_EQ(a.replaced_conn, 0u);
  EXPECT_EQ(fleet.OnProbeBatch("dup", 1, Batch(1), &ack), BatchVerdict::kAccepted);
  EXPECT_EQ(fleet.OnProbeBatch("dup", 1, Batch(2), &ack), BatchVerdict::kAccepted);
  // A second agent under the same name (another process: another session id).
  HelloResult b = fleet.Admit(2, MakeHello("dup", 20));
  EXPECT_EQ(b.replaced_conn, 1u);
  EXPECT_EQ(b.ack, 0u);
  // The first stream is no longer the node's: its batches are neither stored nor acked.
  EXPECT_EQ(fleet.OnProbeBatch("dup", 1, Batch(3), &ack), BatchVerdict::kSuperseded);
  EXPECT_EQ(fleet.OnProbeBatch("dup", 2, Batch(1), &ack), BatchVerdict::kAccepted);
  EXPECT_EQ(ack, 1u);
  // The first agent comes back: it resumes its own sequence space, no gap and no duplicate.
  HelloResult a2 = fleet.Admit(3, MakeHello("dup", 10));
  EXPECT_EQ(a2.replaced_conn, 2u);
  EXPECT_EQ(a2.ack, 2u);
  EXPECT_EQ(fleet.OnProbeBatch("dup", 3, Batch(3), &ack), BatchVerdict::kAccepted);
  // And the second one too.
  EXPECT_EQ(fleet.Admit(4, MakeHello("dup", 20)).ack, 1u);
  EXPECT_EQ(fleet.OnProbeBatch("dup", 4, Batch(2), &ack), BatchVerdict::kAccepted);
  const NodeIngest in = fleet.Nodes()[0].ingest;
  EXPECT_EQ(in.batches, 5u);
  EXPECT_EQ(in.gaps, 0u);
  EXPECT_EQ(in.duplicates, 0u);
  const std::string text = reg.RenderToString();
  EXPECT_NE(text.find("fabricwatch_ingest_session_takeovers_total 3\n"), std::string::npos);
  EXPECT_NE(text.find("fabricwatch_ingest_superseded_batches_total 1\n"), std::string::npos);
  // A reconnect of the same stream's agent after its stream ended is no takeover.
  fleet.OnDisconnect("dup", 4);
  EXPECT_EQ(fleet.Admit(5, MakeHello("dup", 20)).replaced_conn, 0u);
}

TEST(FleetStateTest, NodeLimitRefusesNewNodesOnly) {
  FakeClock clock;
  metrics::Registry reg;
  FleetState fleet(clock, reg, {.max_nodes = 2});
  EXPECT_TRUE(fleet.Admit(1, MakeHello("a", 1)).admitted);
  EXPECT_TRUE(fleet.Admit(2, MakeHello("b", 2)).admitted);
  EXPECT_FALSE(fleet.Admit(3, MakeHello("c", 3)).admitted);
  EXPECT_TRUE(fleet.Admit(4, MakeHello("a", 1)).admitted);  // a known node reconnects
  EXPECT_EQ(fleet.size(), 2u);
  EXPECT_NE(
      reg.RenderToString().find("fabricwatch_ingest_refused_total{reason=\"node_limit\"} 1\n"),
      std::string::npos);
}

TEST(FleetStateTest, DevicesPerNodeAreBounded) {
  FakeClock clock;
  metrics::Registry reg;
  FleetState fleet(clock, reg, {.max_devices_per_node = 4});
  v1::Hello h = MakeHello("a", 1);
  for (int i = 0; i < 10; ++i)
    h.mutable_inventory()->add_nics()->set_device("nic" + std::to_string(i));
  fleet.Admit(1, h);
  EXPECT_EQ(fleet.Nodes()[0].inventory.nics_size(), 4);
  // Rotating port names: only the first four (device, port) pairs are ever passed on.
  size_t kept = 0;
  for (int round = 0; round < 100; ++round) {
    v1::CounterBatch b;
    for (int i = 0; i < 10; ++i) {
      auto* p = b.add_ports();
      p->set_device("dev" + std::to_string(round * 10 + i));
      p->set_port(1);
    }
    fleet.BoundCounterBatch("a", &b);
    kept += static_cast<size_t>(b.ports_size());
  }
  EXPECT_EQ(kept, 4u);
  EXPECT_NE(reg.RenderToString().find(
                "fabricwatch_ingest_refused_total{reason=\"inventory_devices\"} 1002\n"),
            std::string::npos);
}

TEST(FleetStateTest, DepartedNodesAreRetiredWithTheirSeries) {
  FakeClock clock;
  metrics::Registry reg;
  FleetState fleet(clock, reg, {.heartbeat_timeout_s = 15, .retire_after_s = 3600});
  fleet.TrackDirty();
  fleet.Admit(1, MakeHello("gone", 1));
  fleet.Admit(2, MakeHello("stays", 2));
  fleet.OnDisconnect("gone", 1);
  fleet.TakeDirtyRecords();
  EXPECT_NE(reg.RenderToString().find("fabricwatch_agent_up{node=\"gone\"} 0\n"),
            std::string::npos);
  for (int m = 0; m < 61; ++m) {
    clock.Advance(std::chrono::minutes(1));
    fleet.OnHeartbeat("stays");
    fleet.Sweep();
  }
  const std::string text = reg.RenderToString();
  EXPECT_EQ(text.find("node=\"gone\""), std::string::npos);
  EXPECT_NE(text.find("fabricwatch_agent_up{node=\"stays\"} 1\n"), std::string::npos);
  EXPECT_NE(text.find("fabricwatch_agents_retired_total 1\n"), std::string::npos);
  ASSERT_EQ(fleet.size(), 1u);
  // The journal learns to delete it.
  auto dirty = fleet.TakeDirtyRecords();
  ASSERT_EQ(dirty.size(), 1u);
  EXPECT_EQ(dirty[0].node, "gone");
  EXPECT_TRUE(dirty[0].retired);
}

TEST(FleetStateTest, DirtyRecordsCarryWhatAnAckPromises) {
  FakeClock clock;
  metrics::Registry reg;
  FleetState fleet(clock, reg, {});
  fleet.Admit(9, MakeHello("untracked", 1));
  fleet.TrackDirty();
  fleet.Admit(1, MakeHello("a", 7));
  uint64_t ack;
  fleet.OnProbeBatch("a", 1, Batch(1, 3), &ack);
  fleet.OnProbeBatch("a", 1, Batch(2, 3), &ack);
  auto recs = fleet.TakeDirtyRecords();
  ASSERT_EQ(recs.size(), 1u);  // "untracked" changed before a journal asked
  EXPECT_EQ(recs[0].session_id, 7u);
  EXPECT_EQ(recs[0].last_seq, 2u);
  EXPECT_EQ(recs[0].results, 6u);
  EXPECT_TRUE(fleet.TakeDirtyRecords().empty());
}

// A node's record is taken once however many batches changed it, a failed commit's records come
// back, and a node retired and admitted again before the commit gives its new record only.
TEST(FleetStateTest, DirtyRecordsOncePerNodeAndRetiredNamesThatCameBack) {
  FakeClock clock;
  metrics::Registry reg;
  FleetState fleet(clock, reg, {.heartbeat_timeout_s = 15, .retire_after_s = 60});
  fleet.TrackDirty();
  fleet.Admit(1, MakeHello("a", 1));
  fleet.Admit(2, MakeHello("b", 2));
  uint64_t ack;
  for (uint64_t seq = 1; seq <= 5; ++seq) fleet.OnProbeBatch("a", 1, Batch(seq, 2), &ack);
  auto recs = fleet.TakeDirtyRecords();
  ASSERT_EQ(recs.size(), 2u);
  EXPECT_EQ(recs[0].node, "a");
  EXPECT_EQ(recs[0].last_seq, 5u);
  EXPECT_EQ(recs[1].node, "b");
  // The commit failed: both come back, each once.
  fleet.RequeueDirty(recs);
  fleet.RequeueDirty(recs);
  EXPECT_EQ(fleet.TakeDirtyRecords().size(), 2u);
  EXPECT_TRUE(fleet.TakeDirtyRecords().empty());

  // "b" departs and is retired, with a batch of "a" pending.
  fleet.OnDisconnect("b", 2);
  fleet.OnProbeBatch("a", 1, Batch(6, 2), &ack);
  for (int m = 0; m < 3; ++m) {
    clock.Advance(std::chrono::minutes(1));
    fleet.OnHeartbeat("a");
    fleet.Sweep();
  }
  ASSERT_EQ(fleet.size(), 1u);
  recs = fleet.TakeDirtyRecords();
  ASSERT_EQ(recs.size(), 2u);
  EXPECT_EQ(recs[0].node, "b");
  EXPECT_TRUE(recs[0].retired);
  EXPECT_EQ(recs[1].node, "a");
  EXPECT_EQ(recs[1].last_seq, 6u);

  // Retired, then back before the next commit: one record, the new node's.
  fleet.OnDisconnect("a", 1);
  for (int m = 0; m < 3; ++m) {
    clock.Advance(std::chrono::minutes(1));
    fleet.Sweep();
  }
  ASSERT_EQ(fleet.size(), 0u);
  fleet.Admit(3, MakeHello("a", 9));
  recs = fleet.TakeDirtyRecords();
  ASSERT_EQ(recs.size(), 1u);
  EXPECT_EQ(recs[0].node, "a");
  EXPECT_FALSE(recs[0].retired);
  EXPECT_EQ(recs[0].session_id, 9u);
  EXPECT_EQ(recs[0].last_seq, 0u);
}

}  // namespace
}  // namespace fw::aggregator
