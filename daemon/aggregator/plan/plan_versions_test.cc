// Plan versions grow across restarts (agents ignore a plan that is not newer), even when the
// clock steps back, the epoch file is garbage, or the re-plan counter runs out.
#include "daemon/aggregator/plan/plan_versions.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "common/testing/temp_dir.h"

namespace fw::aggregator {
namespace {

constexpr int64_t kMs = 1'000'000;
constexpr int64_t kDec2026 = 1'796'000'000'000 * kMs;  // a wall clock in nanoseconds

using TempDir = ::fw::testing::TempDir;

TEST(PlanVersions, RestartAfterManyReplansStillIssuesNewerVersions) {
  // The bug: every process counted from 1, so agents holding version 40 ignored versions 1..40
  // of a restarted aggregator, and membership changes never reached them.
  auto first = PlanVersions::Start("", kDec2026);
  ASSERT_TRUE(first.ok());
  uint64_t last = 0;
  for (int i = 0; i < 40; ++i) {
    const uint64_t v = first->Next(kDec2026 + i * 1000 * kMs);
    EXPECT_GT(v, last);
    last = v;
  }
  auto second = PlanVersions::Start("", kDec2026 + 2 * kMs);  // restarted 2 ms later
  ASSERT_TRUE(second.ok());
  EXPECT_GT(second->Next(kDec2026 + 2 * kMs), last);
}

TEST(PlanVersions, StateDirKeepsVersionsGrowingWhenTheClockStepsBack) {
  TempDir dir;
  uint64_t last = 0;
  {
    auto v = PlanVersions::Start(dir.path(), kDec2026);
    ASSERT_TRUE(v.ok());
    last = v->Next(kDec2026);
  }
  // The next start's clock is an hour behind (an RTC before NTP, say).
  auto v = PlanVersions::Start(dir.path(), kDec2026 - 3600'000 * kMs);
  ASSERT_TRUE(v.ok());
  EXPECT_FALSE(v->quarantined().has_value());
  EXPECT_EQ(v->epoch_ms(), static_cast<uint64_t>(kDec2026 / kMs) + 1);
  EXPECT_GT(v->Next(kDec2026 - 3600'000 * kMs), last);
}

TEST(PlanVersions, GarbageEpochFileIsMovedAsideAndTheClockUsed) {
  TempDir dir;
  std::ofstream(dir.path() + "/plan_epoch") << "\x01\x02not a number";
  auto v = PlanVersions::Start(dir.path(), kDec2026);
  ASSERT_TRUE(v.ok());
  ASSERT_TRUE(v->quarantined().has_value());
  EXPECT_EQ(v->quarantined()->file, "plan_epoch");
  EXPECT_TRUE(std::filesystem::exists(v->quarantined()->to));
  EXPECT_EQ(v->epoch_ms(), static_cast<uint64_t>(kDec2026 / kMs));
  // A fresh, valid file replaces it.
  auto again = PlanVersions::Start(dir.path(), kDec2026 - kMs);
  ASSERT_TRUE(again.ok());
  EXPECT_FALSE(again->quarantined().has_value());
  EXPECT_EQ(again->epoch_ms(), static_cast<uint64_t>(kDec2026 / kMs) + 1);
}

TEST(PlanVersions, CounterOverflowMovesTheEpochOn) {
  auto v = PlanVersions::Start("", kDec2026);
  ASSERT_TRUE(v.ok());
  uint64_t last = 0;
  const uint64_t n = (uint64_t{1} << PlanVersions::kCounterBits) + 5;
  for (uint64_t i = 0; i < n; ++i) {
    const uint64_t next = v->Next(kDec2026);  // a stuck clock: the epoch still moves on
    ASSERT_GT(next, last) << i;
    last = next;
  }
  EXPECT_EQ(v->epoch_ms(), static_cast<uint64_t>(kDec2026 / kMs) + 1);
}

TEST(PlanVersions, ClockOutOfRangeIsAnError) {
  EXPECT_FALSE(PlanVersions::Start("", -1).ok());
  EXPECT_FALSE(PlanVersions::Start("", static_cast<int64_t>(PlanVersions::kMaxEpochMs) * kMs).ok());
}

}  // namespace
}  // namespace fw::aggregator
