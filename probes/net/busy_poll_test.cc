// Busy-poll window arithmetic: median of recent round trips, the cap, the spin credit, disabling.
#include "probes/net/busy_poll.h"

#include <gtest/gtest.h>

namespace fw::net {
namespace {

constexpr int64_t kUs = 1000;
constexpr int64_t kT0 = 1'000'000'000;

BusyPollOptions Options(int64_t max_window_ns, double cpu_share = 0.003) {
  BusyPollOptions o;
  o.max_window_ns = max_window_ns;
  o.rtt_multiple = 2.0;
  o.cpu_share = cpu_share;
  return o;
}

TEST(BusyPollPolicyTest, SpinsTheLongestWindowUntilARoundTripIsKnown) {
  BusyPollPolicy p(Options(300 * kUs), kT0);
  EXPECT_TRUE(p.enabled());
  EXPECT_EQ(p.Window(), 300 * kUs);
  EXPECT_EQ(p.Admit(kT0), 300 * kUs);
}

TEST(BusyPollPolicyTest, WindowIsTwiceTheMedianOfRecentRoundTrips) {
  BusyPollPolicy p(Options(300 * kUs), kT0);
  for (int64_t rtt : {40 * kUs, 10 * kUs, 900 * kUs, 50 * kUs, 45 * kUs}) p.RecordRtt(rtt);
  // Median of {10, 40, 45, 50, 900} is 45 us: one slow reply does not stretch the window.
  EXPECT_EQ(p.Window(), 90 * kUs);
}

TEST(BusyPollPolicyTest, WindowIsCappedAtTheMaximum) {
  BusyPollPolicy p(Options(300 * kUs), kT0);
  p.RecordRtt(200 * kUs);
  EXPECT_EQ(p.Window(), 300 * kUs);
}

TEST(BusyPollPolicyTest, OldRoundTripsAgeOut) {
  BusyPollPolicy p(Options(300 * kUs), kT0);
  for (size_t i = 0; i < BusyPollPolicy::kRecentRtts; ++i) p.RecordRtt(1000 * kUs);
  for (size_t i = 0; i < BusyPollPolicy::kRecentRtts; ++i) p.RecordRtt(20 * kUs);
  EXPECT_EQ(p.Window(), 40 * kUs);
}

TEST(BusyPollPolicyTest, NonPositiveRoundTripsAreIgnored) {
  BusyPollPolicy p(Options(300 * kUs), kT0);
  p.RecordRtt(0);
  p.RecordRtt(-5);
  EXPECT_EQ(p.Window(), 300 * kUs);
}

TEST(BusyPollPolicyTest, ZeroMaximumDisablesBusyPolling) {
  BusyPollPolicy p(Options(0), kT0);
  p.RecordRtt(50 * kUs);
  EXPECT_FALSE(p.enabled());
  EXPECT_EQ(p.Window(), 0);
  EXPECT_EQ(p.Admit(kT0), 0);
}

TEST(BusyPollPolicyTest, SpinCreditHoldsTheAverageToTheCpuShare) {
  // 0.1% of a core: 1 ms of credit, refilled at 1 ms per second.
  BusyPollPolicy p(Options(300 * kUs, 0.001), kT0);
  int64_t now = kT0;
  for (int i = 0; i < 3; ++i) {
    ASSERT_EQ(p.Admit(now), 300 * kUs) << i;
    p.Charge(300 * kUs);
  }
  EXPECT_EQ(p.Admit(now), 0) << "100 us of credit left cannot pay a 300 us window";
  now += 200'000'000;  // +200 us of credit: 300 us now
  EXPECT_EQ(p.Admit(now), 300 * kUs);

  // Over a long run of 100 windows/s, each spinning its whole window, the total spun stays within
  // the share of the elapsed time plus the one-second burst.
  int64_t spun = 0;
  const int64_t start = now;
  for (int i = 0; i < 10'000; ++i) {
    now += 10'000'000;
    if (int64_t w = p.Admit(now); w > 0) {
      p.Charge(w);
      spun += w;
    }
  }
  const double elapsed = static_cast<double>(now - start);
  EXPECT_LE(static_cast<double>(spun), 0.001 * elapsed + 1e6);
  EXPECT_GE(static_cast<double>(spun), 0.001 * elapsed - 300 * kUs);
}

TEST(BusyPollPolicyTest, ZeroCpuShareDisablesBusyPolling) {
  BusyPollPolicy p(Options(300 * kUs, 0), kT0);
  EXPECT_FALSE(p.enabled());
  EXPECT_EQ(p.Admit(kT0 + 1'000'000'000), 0);
}

}  // namespace
}  // namespace fw::net
