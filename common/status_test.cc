#include "common/status.h"

#include <gtest/gtest.h>

#include "common/clock.h"
#include "common/log.h"

namespace fw {
namespace {

StatusOr<int> Parse(bool good) {
  if (good) return 42;
  return Status::InvalidArgument("bad value 'x'");
}

TEST(StatusTest, OkAndErrorValues) {
  EXPECT_TRUE(Status::Ok().ok());
  Status s = Status::NotFound("no such file /sys/x");
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.ToString(), "NOT_FOUND: no such file /sys/x");
  auto good = Parse(true);
  ASSERT_TRUE(good.ok());
  EXPECT_EQ(*good, 42);
  auto bad = Parse(false);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
}

TEST(ClockTest, FakeClockAdvancesBothClocks) {
  FakeClock clock(0, 0);
  clock.Advance(std::chrono::seconds(3));
  EXPECT_EQ(clock.MonotonicNanos(), 3'000'000'000);
  EXPECT_EQ(FormatRfc3339(clock.WallNanos()), "1970-01-01T00:00:03Z");
}

TEST(LogTest, QuotesValuesThatNeedIt) {
  EXPECT_EQ(LogQuote("plain"), "plain");
  EXPECT_EQ(LogQuote("two words"), "\"two words\"");
  EXPECT_EQ(LogQuote("a\"b"), "\"a\\\"b\"");
  EXPECT_EQ(LogQuote(""), "\"\"");
}

}  // namespace
}  // namespace fw
