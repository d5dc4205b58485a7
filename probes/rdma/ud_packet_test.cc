// The UD message format and the six-timestamp arithmetic.
#include "probes/rdma/ud_packet.h"

#include <gtest/gtest.h>

#include "probes/rdma/rtt_split.h"

namespace fw::rdma {
namespace {

TEST(UdMessage, RoundTrips) {
  UdMessage m;
  m.type = UdType::kReport;
  m.seq = 0x0102030405060708;
  m.flow = 0x00070003;
  m.src_qpn = 0x123456;
  m.src_lid = 0x0bcd;
  m.ts_source = TsSource::kNicRaw;
  m.src_qkey = kProbeQkey;
  m.src_gid.raw[15] = 9;
  m.turnaround_ns = 12345;
  uint8_t buf[kUdMessageBytes];
  WriteUdMessage(m, buf);
  UdMessage out;
  UdDrop why;
  ASSERT_TRUE(ParseUdMessage(buf, sizeof(buf), out, why));
  EXPECT_EQ(out.seq, m.seq);
  EXPECT_EQ(out.flow, m.flow);
  EXPECT_EQ(out.src_qpn, m.src_qpn);
  EXPECT_EQ(out.src_lid, m.src_lid);
  EXPECT_EQ(out.ts_source, TsSource::kNicRaw);
  EXPECT_EQ(out.src_gid, m.src_gid);
  EXPECT_EQ(out.turnaround_ns, 12345);
}

// Flags bit 0, on a report only: the responder's turnaround holds a wait on its own other work.
TEST(UdMessage, AReportMayFlagItsTurnaroundBusyAndNothingElseMay) {
  UdMessage m;
  m.type = UdType::kReport;
  m.turnaround_ns = 777;
  m.turnaround_busy = true;
  uint8_t b[kUdMessageBytes];
  WriteUdMessage(m, b);
  EXPECT_EQ(b[6], 0);
  EXPECT_EQ(b[7], 1);
  UdMessage out;
  UdDrop why;
  ASSERT_TRUE(ParseUdMessage(b, sizeof(b), out, why));
  EXPECT_TRUE(out.turnaround_busy);
  EXPECT_EQ(out.turnaround_ns, 777);
  b[7] = 2;  // no other bit
  EXPECT_FALSE(ParseUdMessage(b, sizeof(b), out, why));
  EXPECT_EQ(why, UdDrop::kBadFlags);
  m.turnaround_busy = false;
  WriteUdMessage(m, b);
  ASSERT_TRUE(ParseUdMessage(b, sizeof(b), out, why));
  EXPECT_FALSE(out.turnaround_busy);
  for (UdType t : {UdType::kProbe, UdType::kAck}) {
    m.type = t;
    m.turnaround_ns = 0;
    m.turnaround_busy = true;  // not written: the flag is a report's
    WriteUdMessage(m, b);
    EXPECT_EQ(b[7], 0);
    b[7] = 1;
    EXPECT_FALSE(ParseUdMessage(b, sizeof(b), out, why));
    EXPECT_EQ(why, UdDrop::kBadFlags);
  }
}

TEST(UdMessage, RejectsEachMalformation) {
  UdMessage m;
  uint8_t good[kUdMessageBytes];
  WriteUdMessage(m, good);
  UdMessage out;
  UdDrop why;
  auto parse = [&](void (*mutate)(uint8_t*), size_t len = kUdMessageBytes) {
    uint8_t b[kUdMessageBytes];
    std::copy(good, good + kUdMessageBytes, b);
    mutate(b);
    return ParseUdMessage(b, len, out, why) ? UdDrop::kCount : why;
  };
  EXPECT_EQ(parse([](uint8_t*) {}, 63), UdDrop::kTruncated);
  EXPECT_EQ(parse([](uint8_t* b) { b[0] ^= 1; }), UdDrop::kBadMagic);
  EXPECT_EQ(parse([](uint8_t* b) { b[4] = 2; }), UdDrop::kBadVersion);
  EXPECT_EQ(parse([](uint8_t* b) { b[5] = 4; }), UdDrop::kBadType);
  EXPECT_EQ(parse([](uint8_t* b) { b[7] = 1; }), UdDrop::kBadFlags);
  EXPECT_EQ(parse([](uint8_t* b) { b[26] = 3; }), UdDrop::kBadField);
  EXPECT_EQ(parse([](uint8_t* b) { b[63] = 1; }), UdDrop::kBadField);
  EXPECT_EQ(parse([](uint8_t* b) { b[55] = 1; }), UdDrop::kBadField) << "turnaround in a probe";
  EXPECT_EQ(parse([](uint8_t* b) {
              b[5] = 3;
              b[48] = 0x80;  // negative turnaround
            }),
            UdDrop::kBadField);
  EXPECT_EQ(parse([](uint8_t*) {}), UdDrop::kCount) << "the unmodified message parses";
}

TEST(RttSplit, NetworkRttIsTheNicSpanMinusTheTurnaround) {
  // T1 = 1000 (sw), T2 = 1500 (NIC), responder turnaround 30 us, T5 = T2 + 40 us, T6 = T1 + 60 us.
  ProberStamps s{
      .t1_sw_ns = 1000, .t6_sw_ns = 61'000, .nic_span_ns = 40'000, .turnaround_ns = 30'000};
  RttSplit r = SplitRtt(s);
  ASSERT_TRUE(r.valid);
  EXPECT_EQ(r.network_rtt_ns, 10'000);
  EXPECT_EQ(r.prober_host_ns, 20'000);
  EXPECT_EQ(r.responder_host_ns, 30'000);
}

TEST(RttSplit, NegativeDifferencesAreInvalid) {
  EXPECT_FALSE(
      SplitRtt({.t1_sw_ns = 0, .t6_sw_ns = 50, .nic_span_ns = 40, .turnaround_ns = 41}).valid)
      << "turnaround longer than the whole span";
  EXPECT_FALSE(
      SplitRtt({.t1_sw_ns = 0, .t6_sw_ns = 30, .nic_span_ns = 40, .turnaround_ns = 1}).valid)
      << "the NIC span longer than the software span around it";
  EXPECT_FALSE(
      SplitRtt({.t1_sw_ns = 0, .t6_sw_ns = 50, .nic_span_ns = -5, .turnaround_ns = 0}).valid);
  EXPECT_TRUE(
      SplitRtt({.t1_sw_ns = 0, .t6_sw_ns = 50, .nic_span_ns = 40, .turnaround_ns = 40}).valid)
      << "zero is a value, not an error";
}

TEST(RttSplit, RawTicksConvertAtTheCoreClockAcrossAWrap) {
  const uint64_t mask = (1ull << 48) - 1;
  // 156.25 MHz: 6.4 ns per tick; 15625 ticks = 100 us.
  EXPECT_EQ(RawTicksToNs(1000, 1000 + 15625, mask, 156'250), 100'000);
  EXPECT_EQ(RawTicksToNs(mask - 5, 15619, mask, 156'250), 100'000) << "through the wrap";
  EXPECT_EQ(RawTicksToNs(0, 1000, mask, 1'000'000), 1000);
  EXPECT_EQ(RawTicksToNs(0, 1000, mask, 0), -1) << "no core clock: no conversion";
}

}  // namespace
}  // namespace fw::rdma
