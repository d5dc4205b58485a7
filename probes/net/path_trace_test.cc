// Path tracing: the ICMP answer parser, trace probe encoding, hop assembly and the trace budget.
#include "probes/net/path_trace.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

namespace fw::net {
namespace {

constexpr uint32_t kPeer = 0xC6120205;    // 198.18.2.5
constexpr uint32_t kLeaf1 = 0xC6130101;   // 198.19.1.1
constexpr uint32_t kSpine2 = 0xC6130206;  // 198.19.2.6
constexpr uint32_t kLeaf3 = 0xC6130301;

void Put32(std::vector<uint8_t>& b, size_t at, uint32_t v) {
  b[at] = v >> 24;
  b[at + 1] = v >> 16;
  b[at + 2] = v >> 8;
  b[at + 3] = v;
}

// What a raw ICMP socket returns for a switch's answer to the trace probe of `ttl`.
std::vector<uint8_t> Answer(uint32_t from, uint8_t type, uint8_t ttl, uint16_t sport = 40001,
                            uint16_t dport = 9753, uint32_t dst = kPeer) {
  std::vector<uint8_t> b(20 + 8 + 20, 0);
  b[0] = 0x45;
  b[9] = 1;  // ICMP
  Put32(b, 12, from);
  b[20] = type;
  b[28] = 0x45;  // quoted IPv4 header
  b[28 + 9] = 17;
  Put32(b, 28 + 16, dst);
  std::vector<uint8_t> udp(64);
  size_t n = WriteTraceProbe(sport, dport, ttl, udp);
  EXPECT_GT(n, 0u);
  b.insert(b.end(), udp.begin(), udp.begin() + 8);  // RFC 792: 8 bytes of the datagram
  return b;
}

TEST(TraceParser, ReadsATimeExceededAnswer) {
  IcmpAnswer a;
  ASSERT_EQ(ParseIcmpAnswer(Answer(kSpine2, 11, 2), &a), TraceDrop::kNone);
  EXPECT_EQ(a.from, kSpine2);
  EXPECT_EQ(a.type, 11);
  EXPECT_EQ(a.probe_dst, kPeer);
  EXPECT_EQ(a.probe_src_port, 40001);
  EXPECT_EQ(a.probe_dst_port, 9753);
  EXPECT_EQ(a.probe_ttl, 2);
  EXPECT_EQ(Ipv4String(a.from), "198.19.2.6");
}

TEST(TraceParser, IpOptionsOnBothHeadersAreSkipped) {
  std::vector<uint8_t> b = Answer(kLeaf1, 11, 1);
  // Outer header with 4 bytes of options.
  b[0] = 0x46;
  b.insert(b.begin() + 20, {1, 1, 1, 1});
  IcmpAnswer a;
  ASSERT_EQ(ParseIcmpAnswer(b, &a), TraceDrop::kNone);
  EXPECT_EQ(a.probe_ttl, 1);
  EXPECT_EQ(a.from, kLeaf1);
}

TEST(TraceParser, RefusesEveryMalformedShape) {
  IcmpAnswer a;
  const std::vector<uint8_t> good = Answer(kLeaf1, 11, 1);
  for (size_t len = 0; len < good.size(); ++len) {
    std::vector<uint8_t> cut(good.begin(), good.begin() + len);
    EXPECT_NE(ParseIcmpAnswer(cut, &a), TraceDrop::kNone) << len;
  }
  std::vector<uint8_t> b = good;
  b[0] = 0x65;
  EXPECT_EQ(ParseIcmpAnswer(b, &a), TraceDrop::kNotIpv4);
  b = good;
  b[0] = 0x4f;  // IHL 60 bytes: more than there is
  EXPECT_EQ(ParseIcmpAnswer(std::span<const uint8_t>(b.data(), 40), &a), TraceDrop::kTruncated);
  b = good;
  b[9] = 6;
  EXPECT_EQ(ParseIcmpAnswer(b, &a), TraceDrop::kNotIcmp);
  b = good;
  b[20] = 8;  // echo request
  EXPECT_EQ(ParseIcmpAnswer(b, &a), TraceDrop::kOtherType);
  b = good;
  b[28 + 9] = 6;
  EXPECT_EQ(ParseIcmpAnswer(b, &a), TraceDrop::kNotUdp);
  b = good;
  b[28 + 20 + 4] = 0;
  b[28 + 20 + 5] = 200;  // an ordinary UDP datagram's length
  EXPECT_EQ(ParseIcmpAnswer(b, &a), TraceDrop::kNotTraceProbe);
  b = good;
  b[28] = 0x41;  // quoted IHL below 5
  EXPECT_EQ(ParseIcmpAnswer(b, &a), TraceDrop::kNotIpv4);
}

TEST(TraceProbe, EncodesTheTtlInTheLengthOnly) {
  std::vector<uint8_t> a(64), b(64);
  size_t na = WriteTraceProbe(40001, 9753, 1, a);
  size_t nb = WriteTraceProbe(40001, 9753, 5, b);
  EXPECT_EQ(nb, na + 4);
  // Same ports (the 5-tuple the fabric hashes); only the length differs.
  EXPECT_TRUE(std::equal(a.begin(), a.begin() + 4, b.begin()));
  EXPECT_EQ(WriteTraceProbe(1, 2, 0, a), 0u);
  EXPECT_EQ(WriteTraceProbe(1, 2, kTraceMaxTtl + 1, a), 0u);
  std::vector<uint8_t> small(10);
  EXPECT_EQ(WriteTraceProbe(1, 2, 1, small), 0u);
}

TraceFlow Flow(uint16_t sport = 40001) { return TraceFlow{"node-b", kPeer, 9753, sport, 7}; }

IcmpAnswer From(uint32_t from, uint8_t ttl, uint16_t sport = 40001) {
  IcmpAnswer a;
  EXPECT_EQ(ParseIcmpAnswer(Answer(from, from == kPeer ? 3 : 11, ttl, sport), &a),
            TraceDrop::kNone);
  return a;
}

TEST(HopAssembly, OrdersHopsByTtlWhateverTheArrivalOrder) {
  HopAssembler h(Flow(), 8);
  EXPECT_TRUE(h.Add(From(kLeaf3, 3), 3000));
  EXPECT_TRUE(h.Add(From(kLeaf1, 1), 1000));
  EXPECT_TRUE(h.Add(From(kSpine2, 2)));  // no send time known
  TracedPath p = h.Finish(5);
  EXPECT_FALSE(p.reached_peer);
  EXPECT_EQ(p.hops, (std::vector<std::string>{"198.19.1.1", "198.19.2.6", "198.19.3.1"}));
  EXPECT_EQ(p.hop_rtt_ns, (std::vector<int64_t>{1000, 0, 3000}));
  EXPECT_EQ(p.finished_ns, 5);
}

TEST(HopAssembly, ASilentSwitchLeavesAGapAndTrailingSilenceIsDropped) {
  HopAssembler h(Flow(), 8);
  EXPECT_TRUE(h.Add(From(kLeaf1, 1)));
  EXPECT_TRUE(h.Add(From(kLeaf3, 3)));
  TracedPath p = h.Finish(0);
  EXPECT_EQ(p.hops, (std::vector<std::string>{"198.19.1.1", "", "198.19.3.1"}));
}

TEST(HopAssembly, ThePeerEndsThePathAndIsNoHop) {
  HopAssembler h(Flow(), 8);
  EXPECT_TRUE(h.Add(From(kLeaf1, 1)));
  EXPECT_TRUE(h.Add(From(kPeer, 2)));
  EXPECT_TRUE(h.ReachedPeer());
  TracedPath p = h.Finish(0);
  EXPECT_TRUE(p.reached_peer);
  EXPECT_EQ(p.hops, (std::vector<std::string>{"198.19.1.1"}));
}

TEST(HopAssembly, IgnoresOtherFlowsDuplicatesAndTtlsNotSent) {
  HopAssembler h(Flow(), 3);
  EXPECT_FALSE(h.Add(From(kLeaf1, 1, 40002)));  // another source port: another flow
  EXPECT_TRUE(h.Add(From(kLeaf1, 1)));
  EXPECT_FALSE(h.Add(From(kSpine2, 1)));  // a second answer for ttl 1
  EXPECT_FALSE(h.Add(From(kSpine2, 4)));  // beyond max_ttl
  EXPECT_EQ(h.Finish(0).hops.size(), 1u);
}

TEST(TraceBudget, TracesNewFlowsOnceAndStaysWithinItsFraction) {
  TraceScheduler s(0.02, 8);  // 2 % of probe packets, 8 packets per trace
  std::vector<TraceFlow> flows;
  for (uint16_t i = 0; i < 10; ++i) flows.push_back(Flow(40000 + i));
  s.SetFlows(flows);
  EXPECT_EQ(s.queued(), 10u);
  // One trace's worth of credit to start.
  ASSERT_TRUE(s.Next().has_value());
  EXPECT_FALSE(s.Next().has_value());
  EXPECT_EQ(s.deferred(), 1u);
  uint64_t probes = 0, traced = 1;
  for (int i = 0; i < 1000; ++i) {
    s.AddProbePackets(10);
    probes += 10;
    while (s.Next()) ++traced;
  }
  EXPECT_EQ(traced, 10u);  // each flow once, however much budget is left
  EXPECT_EQ(s.queued(), 0u);
  // The same plan again traces nothing new.
  s.SetFlows(flows);
  EXPECT_EQ(s.queued(), 0u);
  // 9 traces x 8 packets after the first: within 2 % of 10,000 probe packets.
  EXPECT_LE((traced - 1) * 8.0, 0.02 * probes);
}

// What the tracer's loop publishes so that the agent's budget wakes it only when a trace can
// start: the probe packets still missing, exact at the boundary.
TEST(TraceBudget, PacketsUntilNextIsWhatNextStillLacks) {
  TraceScheduler s(0.02, 8);
  s.SetFlows({Flow(1), Flow(2)});
  EXPECT_EQ(s.PacketsUntilNext(), 0u);  // the starting credit
  ASSERT_TRUE(s.Next().has_value());
  EXPECT_EQ(s.PacketsUntilNext(), 400u);  // 8 packets of budget at 2 %
  s.AddProbePackets(399);
  EXPECT_EQ(s.PacketsUntilNext(), 1u);
  EXPECT_FALSE(s.Next().has_value());
  s.AddProbePackets(1);
  EXPECT_EQ(s.PacketsUntilNext(), 0u);
  EXPECT_TRUE(s.Next().has_value());
  EXPECT_EQ(TraceScheduler(0, 8).PacketsUntilNext(), 0u);  // the starting credit, then never
  TraceScheduler none(0, 8);
  none.SetFlows({Flow(1)});
  ASSERT_TRUE(none.Next().has_value());
  EXPECT_EQ(none.PacketsUntilNext(), UINT64_MAX);
}

TEST(TraceBudget, SuspectsGoFirstAndChangedFlowsAreTracedAgain) {
  TraceScheduler s(1.0, 4);
  std::vector<TraceFlow> flows = {Flow(1), Flow(2), Flow(3)};
  s.SetFlows(flows);
  s.Changed(Flow(3), /*suspect=*/true);  // queued as new, now first
  s.AddProbePackets(100);
  EXPECT_EQ(s.Next()->src_port, 3);
  EXPECT_EQ(s.Next()->src_port, 1);
  EXPECT_EQ(s.Next()->src_port, 2);
  EXPECT_FALSE(s.Next());
  s.Changed(Flow(1), false);
  s.Changed(Flow(2), true);
  s.Changed(Flow(1), false);  // queued once
  s.Changed(Flow(9), true);   // not planned: ignored
  s.AddProbePackets(100);
  EXPECT_EQ(s.Next()->src_port, 2);
  EXPECT_EQ(s.Next()->src_port, 1);
  EXPECT_FALSE(s.Next());
}

TEST(TraceBudget, AQuietSpellDoesNotBankABurst) {
  TraceScheduler s(0.5, 8);
  s.SetFlows({});
  s.AddProbePackets(1'000'000);
  EXPECT_LE(s.credit(), 32.0);
}

TEST(TraceBudget, FlowsLeavingThePlanLeaveTheQueue) {
  TraceScheduler s(0, 8);
  s.SetFlows({Flow(1), Flow(2)});
  s.SetFlows({Flow(2)});
  EXPECT_EQ(s.queued(), 1u);
  EXPECT_EQ(s.Next()->src_port, 2);
}

}  // namespace
}  // namespace fw::net
