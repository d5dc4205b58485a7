// PathTraceReport -> WireTrace: what is accepted, how silent TTLs are filled, what is refused.
#include "daemon/aggregator/ingest/path_trace_wire.h"

#include <gtest/gtest.h>

namespace fw::aggregator {
namespace {
namespace v1 = fabricwatch::v1;

v1::PathTrace Good() {
  v1::PathTrace t;
  t.set_src_address("198.18.0.1");
  t.set_dst_address("198.18.2.1");
  t.set_src_port(40001);
  t.set_dst_port(9753);
  t.set_transport(v1::TRANSPORT_UDP);
  t.set_dst_node("node-b");
  t.set_status(v1::TRACE_STATUS_REACHED_PEER);
  for (auto [ttl, addr] : {std::pair{1u, "198.19.1.1"}, {2u, "198.19.1.6"}, {3u, "fd00::3"}}) {
    v1::TraceHop* h = t.add_hops();
    h->set_ttl(ttl);
    h->set_address(addr);
    h->set_rtt_ns(1000 * ttl);
  }
  return t;
}

size_t Refused(const WireTraces& w, TraceRefusal r) { return w.refused[static_cast<size_t>(r)]; }

TEST(PathTraceWire, AcceptsAGoodTraceWithItsHopsByTtl) {
  v1::PathTraceReport r;
  *r.add_traces() = Good();
  const WireTraces w = TracesFromWire(r);
  ASSERT_EQ(w.traces.size(), 1u);
  EXPECT_EQ(w.traces[0].dst_node, "node-b");
  EXPECT_EQ(w.traces[0].src_port, 40001);
  EXPECT_TRUE(w.traces[0].reached_peer);
  EXPECT_EQ(w.traces[0].hops, (std::vector<std::string>{"198.19.1.1", "198.19.1.6", "fd00::3"}));
  EXPECT_FALSE(w.traces[0].echo);
}

// An echo's trace names the prober's flow by its destination port.
TEST(PathTraceWire, AnEchoTraceKeepsThePeersSourcePort) {
  v1::PathTraceReport r;
  v1::PathTrace t = Good();
  t.set_src_port(9753);
  t.set_dst_port(40001);
  t.set_echo(true);
  *r.add_traces() = t;
  const WireTraces w = TracesFromWire(r);
  ASSERT_EQ(w.traces.size(), 1u);
  EXPECT_TRUE(w.traces[0].echo);
  EXPECT_EQ(w.traces[0].src_port, 9753);
  EXPECT_EQ(w.traces[0].dst_port, 40001);
  EXPECT_EQ(w.traces[0].dst_address, t.dst_address());
}

// A responder may not know the name of a node that probes it: its echo trace may leave the name
// out (the intake names the prober by address); a forward trace may not.
TEST(PathTraceWire, OnlyAnEchoMayComeWithoutThePeersName) {
  v1::PathTraceReport r;
  v1::PathTrace t = Good();
  t.clear_dst_node();
  *r.add_traces() = t;
  t.set_echo(true);
  *r.add_traces() = t;
  const WireTraces w = TracesFromWire(r);
  ASSERT_EQ(w.traces.size(), 1u);
  EXPECT_TRUE(w.traces[0].echo);
  EXPECT_EQ(w.traces[0].dst_node, "");
  EXPECT_EQ(Refused(w, TraceRefusal::kPeer), 1u);
}

TEST(PathTraceWire, MissingTtlsAreSilentHops) {
  v1::PathTraceReport r;
  v1::PathTrace t = Good();
  t.clear_hops();
  t.add_hops()->set_ttl(2);
  t.mutable_hops(0)->set_address("198.19.1.6");
  t.add_hops()->set_ttl(4);  // answered with no address: silent too
  *r.add_traces() = t;
  const WireTraces w = TracesFromWire(r);
  ASSERT_EQ(w.traces.size(), 1u);
  EXPECT_EQ(w.traces[0].hops, (std::vector<std::string>{"", "198.19.1.6", "", ""}));
}

TEST(PathTraceWire, RefusesBadTracesOneByOneAndKeepsTheRest) {
  v1::PathTraceReport r;
  auto add = [&](auto edit) {
    v1::PathTrace t = Good();
    edit(t);
    *r.add_traces() = t;
  };
  add([](v1::PathTrace& t) { t.set_transport(v1::TRANSPORT_TCP_CONNECT); });
  add([](v1::PathTrace& t) { t.clear_dst_node(); });
  add([](v1::PathTrace& t) { t.set_dst_node(std::string(300, 'n')); });
  add([](v1::PathTrace& t) { t.set_src_port(0); });
  add([](v1::PathTrace& t) { t.set_dst_port(70000); });
  add([](v1::PathTrace& t) { t.set_dst_address("node-b.example"); });
  add([](v1::PathTrace& t) { t.set_src_address("999.1.1.1"); });
  add([](v1::PathTrace& t) { t.mutable_hops(1)->set_address("spine1"); });
  add([](v1::PathTrace& t) { t.mutable_hops(1)->set_ttl(1); });  // not increasing
  add([](v1::PathTrace& t) { t.mutable_hops(0)->set_ttl(0); });
  add([](v1::PathTrace& t) { t.mutable_hops(2)->set_ttl(33); });
  add([](v1::PathTrace& t) {
    t.clear_hops();
    for (uint32_t i = 1; i <= 33; ++i) t.add_hops()->set_ttl(i);
  });
  add([](v1::PathTrace&) {});  // the good one
  const WireTraces w = TracesFromWire(r);
  ASSERT_EQ(w.traces.size(), 1u);
  EXPECT_EQ(w.traces[0].dst_node, "node-b");
  EXPECT_EQ(Refused(w, TraceRefusal::kTransport), 1u);
  EXPECT_EQ(Refused(w, TraceRefusal::kPeer), 2u);
  EXPECT_EQ(Refused(w, TraceRefusal::kPort), 2u);
  EXPECT_EQ(Refused(w, TraceRefusal::kAddress), 3u);
  EXPECT_EQ(Refused(w, TraceRefusal::kHops), 4u);
}

TEST(PathTraceWire, RefusesTracesPastTheReportLimit) {
  v1::PathTraceReport r;
  for (size_t i = 0; i < kWireMaxTracesPerReport + 5; ++i) *r.add_traces() = Good();
  const WireTraces w = TracesFromWire(r);
  EXPECT_EQ(w.traces.size(), kWireMaxTracesPerReport);
  EXPECT_EQ(Refused(w, TraceRefusal::kTooMany), 5u);
}

TEST(PathTraceWire, RefusalNamesAreStable) {
  EXPECT_EQ(TraceRefusalName(TraceRefusal::kAddress), "address");
  EXPECT_EQ(TraceRefusalName(TraceRefusal::kHops), "hops");
  EXPECT_EQ(TraceRefusalName(TraceRefusal::kTooMany), "too_many");
}

}  // namespace
}  // namespace fw::aggregator
