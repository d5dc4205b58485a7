// Token bucket and probe budget on a FakeClock.
#include "probes/net/token_bucket.h"

#include <gtest/gtest.h>

#include <chrono>

namespace fw::net {
namespace {

using std::chrono::milliseconds;

TEST(TokenBucketTest, StartsFullThenRefillsAtRate) {
  FakeClock clock;
  TokenBucket b(clock, /*rate_per_s=*/10, /*burst=*/5);
  for (int i = 0; i < 5; ++i) EXPECT_TRUE(b.TryTake());
  EXPECT_FALSE(b.TryTake());
  clock.Advance(milliseconds(99));
  EXPECT_FALSE(b.TryTake());
  clock.Advance(milliseconds(1));
  EXPECT_TRUE(b.TryTake());
  EXPECT_FALSE(b.TryTake());
}

TEST(TokenBucketTest, NeverHoldsMoreThanBurst) {
  FakeClock clock;
  TokenBucket b(clock, 1000, 3);
  clock.Advance(std::chrono::seconds(60));
  EXPECT_DOUBLE_EQ(b.Available(), 3);
  EXPECT_TRUE(b.Full());
  EXPECT_FALSE(b.TryTake(4));  // more than the burst can never be paid
  EXPECT_EQ(b.NanosUntil(4), -1);
}

TEST(TokenBucketTest, FailedTakeTakesNothing) {
  FakeClock clock;
  TokenBucket b(clock, 1, 10);
  EXPECT_TRUE(b.TryTake(7));
  EXPECT_FALSE(b.TryTake(4));
  EXPECT_DOUBLE_EQ(b.Available(), 3);
  EXPECT_EQ(b.NanosUntil(4), 1'000'000'000);
}

TEST(TokenBucketTest, LongRunRateMatchesConfiguredRate) {
  FakeClock clock;
  TokenBucket b(clock, 100, 10);
  int taken = 0;
  for (int ms = 0; ms < 10'000; ++ms) {
    while (b.TryTake()) ++taken;
    clock.Advance(milliseconds(1));
  }
  EXPECT_NEAR(taken, 10 + 100 * 10, 2);  // the initial burst plus 10 s at 100/s
}

TEST(TokenBucketTest, ReconfigureClampsToNewBurst) {
  FakeClock clock;
  TokenBucket b(clock, 10, 100);
  b.Reconfigure(1, 2);
  EXPECT_DOUBLE_EQ(b.Available(), 2);
  EXPECT_EQ(b.rate_per_s(), 1);
}

TEST(ProbeBudgetTest, AdmitsOnlyWhenBothPacketsAndBytesCanPay) {
  FakeClock clock;
  ProbeBudget budget(clock, /*packets_per_s=*/10, /*bytes_per_s=*/1000, /*burst_seconds=*/1);
  EXPECT_TRUE(budget.TryConsume(1, 900));
  EXPECT_FALSE(budget.TryConsume(1, 200));  // bytes short
  EXPECT_TRUE(budget.TryConsume(9, 100));   // exactly what is left
  EXPECT_FALSE(budget.TryConsume(1, 0));    // packets short
  EXPECT_EQ(budget.rejected(), 2u);
  clock.Advance(milliseconds(500));
  EXPECT_TRUE(budget.TryConsume(5, 500));
  EXPECT_FALSE(budget.TryConsume(1, 1));
}

TEST(ProbeBudgetTest, RejectedProbeDoesNotSpendTheOtherBucket) {
  FakeClock clock;
  ProbeBudget budget(clock, 2, 1000, 1);
  EXPECT_FALSE(budget.TryConsume(1, 5000));  // bytes can never pay
  EXPECT_TRUE(budget.TryConsume(2, 10));     // the packets were not spent by the refusal
}

}  // namespace
}  // namespace fw::net
