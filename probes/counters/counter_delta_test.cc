// Delta rules: wrap, reset, saturation.
#include "probes/counters/counter_delta.h"

#include <gtest/gtest.h>

namespace fw::counters {
namespace {

TEST(CounterDelta, KnownWidthSaturation) {
  const CounterSpec link_downed = SpecFor(CounterGroup::kCounters, "link_downed");
  EXPECT_EQ(link_downed.width, 8);
  EXPECT_TRUE(IsSaturated(link_downed, 255, std::nullopt));  // first sight is enough
  EXPECT_FALSE(IsSaturated(link_downed, 254, std::nullopt));
  EXPECT_EQ(ComputeDelta(link_downed, 200, 255).kind, DeltaKind::kSaturated);
  const CounterSpec overrun = SpecFor(CounterGroup::kCounters, "excessive_buffer_overrun_errors");
  EXPECT_EQ(overrun.width, 4);
  EXPECT_TRUE(IsSaturated(overrun, 15, std::nullopt));
  EXPECT_TRUE(IsSaturated(SpecFor(CounterGroup::kCounters, "symbol_error"), 65535, std::nullopt));
  EXPECT_TRUE(
      IsSaturated(SpecFor(CounterGroup::kCounters, "port_xmit_wait"), 4294967295u, std::nullopt));
  EXPECT_FALSE(
      IsSaturated(SpecFor(CounterGroup::kCounters, "port_xmit_wait"), 2489603687u, std::nullopt));
}

TEST(CounterDelta, UnknownWidthSaturatesOnlyWhenStuck) {
  const CounterSpec hw = SpecFor(CounterGroup::kHwCounters, "out_of_buffer");
  EXPECT_FALSE(IsSaturated(hw, 65535, std::nullopt));
  EXPECT_FALSE(IsSaturated(hw, 65535, 65000));
  EXPECT_TRUE(IsSaturated(hw, 65535, 65535));
  EXPECT_TRUE(IsSaturated(hw, 4294967295u, 4294967295u));
  EXPECT_FALSE(IsSaturated(hw, 1000, 1000));
}

TEST(CounterDelta, Wrap32) {
  const CounterSpec hw = SpecFor(CounterGroup::kHwCounters, "out_of_sequence");
  const Delta d = ComputeDelta(hw, 4294967000u, 200);
  EXPECT_EQ(d.kind, DeltaKind::kWrapped);
  EXPECT_EQ(d.raw, 496u);
  EXPECT_TRUE(d.known());
}

TEST(CounterDelta, ResetWhenWrapImplausibleOrCounterSaturates) {
  const CounterSpec hw = SpecFor(CounterGroup::kHwCounters, "out_of_sequence");
  EXPECT_EQ(ComputeDelta(hw, 1000, 10).kind, DeltaKind::kReset);
  EXPECT_EQ(ComputeDelta(hw, uint64_t{1} << 40, 10).kind, DeltaKind::kReset);  // above 32 bits
  const CounterSpec sym = SpecFor(CounterGroup::kCounters, "symbol_error");
  EXPECT_EQ(ComputeDelta(sym, 65000, 3).kind, DeltaKind::kReset);  // PMA counters never wrap
  EXPECT_FALSE(ComputeDelta(sym, 65000, 3).known());
}

TEST(CounterDelta, PlainIncreaseAndFirst) {
  const CounterSpec data = SpecFor(CounterGroup::kCounters, "port_xmit_data");
  EXPECT_EQ(data.scale, 4.0);
  EXPECT_EQ(ComputeDelta(data, std::nullopt, 10).kind, DeltaKind::kFirst);
  const Delta d = ComputeDelta(data, 230442669431839u, 230442669431849u);
  EXPECT_EQ(d.kind, DeltaKind::kOk);
  EXPECT_EQ(d.raw, 10u);
  EXPECT_STREQ(DeltaKindName(DeltaKind::kSaturated), "saturated");
}

}  // namespace
}  // namespace fw::counters
