// The round-trip-following probe timeout: RFC 6298's estimator, its floor, cap and backoff, and
// the queue shapes of the namespace fabric tests (a tbf queue that grows 50 ms a second).
#include "probes/net/probe_timeout.h"

#include <gtest/gtest.h>

namespace fw::net {
namespace {

constexpr int64_t kMs = 1'000'000;
constexpr int64_t kFloor = 200 * kMs;
constexpr int64_t kCap = 1000 * kMs;

TEST(ProbeTimeoutTest, WaitsTheCapUntilTheFirstEcho) {
  ProbeTimeout t;
  EXPECT_EQ(t.Next(kFloor, kCap), kCap);
  t.OnLoss();
  EXPECT_EQ(t.Next(kFloor, kCap), kCap);
}

TEST(ProbeTimeoutTest, AFastFlowWaitsTheFloor) {
  ProbeTimeout t;
  for (int i = 0; i < 10; ++i) t.OnEcho(100'000);  // 100 µs
  EXPECT_EQ(t.Next(kFloor, kCap), kFloor);
}

TEST(ProbeTimeoutTest, NoFloorOrAFloorAtTheCapKeepsTheFixedTimeout) {
  ProbeTimeout t;
  t.OnEcho(100'000);
  EXPECT_EQ(t.Next(0, kCap), kCap);
  EXPECT_EQ(t.Next(kCap, kCap), kCap);
  EXPECT_EQ(t.Next(2 * kCap, kCap), kCap);
}

TEST(ProbeTimeoutTest, FollowsRfc6298) {
  ProbeTimeout t;
  t.OnEcho(100 * kMs);  // srtt 100, rttvar 50: 300 ms
  EXPECT_DOUBLE_EQ(t.srtt_ns(), 100.0 * kMs);
  EXPECT_DOUBLE_EQ(t.rttvar_ns(), 50.0 * kMs);
  EXPECT_EQ(t.Next(kFloor, kCap), 300 * kMs);
  t.OnEcho(200 * kMs);  // rttvar 0.75·50 + 0.25·100 = 62.5; srtt 0.875·100 + 0.125·200 = 112.5
  EXPECT_DOUBLE_EQ(t.rttvar_ns(), 62.5 * kMs);
  EXPECT_DOUBLE_EQ(t.srtt_ns(), 112.5 * kMs);
  EXPECT_EQ(t.Next(kFloor, kCap), 362'500'000);
  EXPECT_EQ(t.Next(kFloor, 300 * kMs), 300 * kMs);  // never past the cap
}

TEST(ProbeTimeoutTest, AStandingQueueKeepsHalfItsRoundTripAsMargin) {
  ProbeTimeout t;
  for (int i = 0; i < 100; ++i) t.OnEcho(400 * kMs);  // rttvar decays to nothing
  EXPECT_EQ(t.Next(kFloor, kCap), 600 * kMs);
}

TEST(ProbeTimeoutTest, EachLossDoublesUntilAnEcho) {
  ProbeTimeout t;
  t.OnEcho(100'000);
  t.OnLoss();
  EXPECT_EQ(t.Next(kFloor, kCap), 2 * kFloor);
  t.OnLoss();
  EXPECT_EQ(t.Next(kFloor, kCap), 4 * kFloor);
  t.OnLoss();
  EXPECT_EQ(t.Next(kFloor, kCap), kCap);
  for (int i = 0; i < 20; ++i) t.OnLoss();  // bounded, no overflow
  EXPECT_EQ(t.Next(kFloor, kCap), kCap);
  t.OnEcho(100'000);
  EXPECT_EQ(t.Next(kFloor, kCap), kFloor);
}

TEST(ProbeTimeoutTest, IgnoresNonPositiveRoundTrips) {
  ProbeTimeout t;
  t.OnEcho(0);
  t.OnEcho(-5);
  EXPECT_FALSE(t.sampled());
  EXPECT_EQ(t.Next(kFloor, kCap), kCap);
}

// The namespace congestion tests: 21 Mbit/s into a 20 Mbit/s tbf queue of up to 1 s, so a flow
// probed once a second sees its round trip grow by ~50 ms per probe. The timeout must stay ahead
// of every next round trip, or queued probes would read as lost.
TEST(ProbeTimeoutTest, AQueueGrowingFiftyMillisecondsASecondIsNeverReadAsLoss) {
  ProbeTimeout t;
  for (int i = 0; i < 30; ++i) t.OnEcho(100'000);
  for (int64_t rtt = 50 * kMs; rtt <= 1000 * kMs; rtt += 50 * kMs) {
    ASSERT_GT(t.Next(kFloor, 2 * kCap), rtt) << "at a round trip of " << rtt / kMs << " ms";
    t.OnEcho(rtt);
  }
}

// A queue that jumps at once (a bandwidth burst into a deep tbf): the first probe after the jump
// is reported lost, its late echo teaches the estimator, and the next probe waits long enough.
TEST(ProbeTimeoutTest, ALateEchoAfterAQueueJumpLiftsTheNextTimeout) {
  ProbeTimeout t;
  for (int i = 0; i < 30; ++i) t.OnEcho(100'000);
  EXPECT_LT(t.Next(kFloor, kCap), 600 * kMs);  // the probe that meets the jump is lost...
  t.OnLoss();
  t.OnEcho(600 * kMs);  // ...and its echo arrives late
  EXPECT_GT(t.Next(kFloor, kCap), 600 * kMs);
}

}  // namespace
}  // namespace fw::net
