// The reconnect schedule, driven on a fake clock the way the uplink drives it.
#include "common/backoff.h"

#include <gtest/gtest.h>

#include "common/clock.h"

namespace fw {
namespace {

TEST(BackoffTest, GrowsExponentiallyWithinJitterAndCaps) {
  Backoff b(0.5, 30, 42);
  double ceiling = 0.5;
  for (int i = 0; i < 12; ++i) {
    double d = b.Next();
    EXPECT_GE(d, ceiling / 2) << "attempt " << i;
    EXPECT_LE(d, ceiling) << "attempt " << i;
    ceiling = std::min(30.0, ceiling * 2);
  }
  EXPECT_LE(b.Next(), 30);
  b.Reset();
  EXPECT_LE(b.Next(), 0.5);
}

TEST(BackoffTest, JitterSpreadsAFleet) {
  // 100 agents that lose the aggregator at once must not retry in lockstep.
  std::vector<double> third;
  for (uint64_t seed = 0; seed < 100; ++seed) {
    Backoff b(1, 60, seed);
    b.Next();
    b.Next();
    third.push_back(b.Next());
  }
  auto [lo, hi] = std::minmax_element(third.begin(), third.end());
  EXPECT_GE(*lo, 2.0);
  EXPECT_LE(*hi, 4.0);
  EXPECT_GT(*hi - *lo, 1.0);
}

TEST(BackoffTest, ReconnectTimesOnFakeClock) {
  // The uplink sleeps Next() on its clock between attempts; after 6 failures with base 1 s and cap 8 s
  // the total wait is bounded by 1+2+4+8+8+8 = 31 s and at least half of that.
  FakeClock clock(0, 0);
  Backoff b(1, 8, 7);
  for (int i = 0; i < 6; ++i) clock.Advance(std::chrono::nanoseconds(int64_t(b.Next() * 1e9)));
  EXPECT_LE(clock.MonotonicSeconds(), 31.0);
  EXPECT_GE(clock.MonotonicSeconds(), 15.5);
}

}  // namespace
}  // namespace fw
