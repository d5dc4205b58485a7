// Sliding windows of one pair under a fake clock: counts, loss, quantiles, bandwidth, expiry.
#include "daemon/aggregator/ingest/pair_windows.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

namespace fw::aggregator {
namespace {

constexpr int64_t kSec = 1'000'000'000;

TEST(PairWindowsTest, EmptyWindowsReportNothing) {
  PairWindows w;
  const WindowStats s = w.Snapshot(100 * kSec, Window::k60s);
  EXPECT_EQ(s.probes, 0u);
  EXPECT_EQ(s.loss_ratio, 0.0);
  EXPECT_TRUE(std::isnan(s.rtt_p50_s));
  EXPECT_TRUE(std::isnan(s.bandwidth_bps));
}

TEST(PairWindowsTest, WindowsCountTheRightSpanAtOneProbePerSecond) {
  PairWindows w;
  // One probe per second at t = 1000 s .. 1999 s, every 10th lost.
  for (int t = 1000; t < 2000; ++t) {
    w.Record(t * kSec + 5, ProbeSample{t % 10 == 0, 50'000, 0.0});
  }
  const int64_t now = 1999 * kSec + 500'000'000;  // mid-second after the last probe
  // 10 s: the current 1 s slot plus the 9 before: t = 1990..1999.
  const WindowStats s10 = w.Snapshot(now, Window::k10s);
  EXPECT_EQ(s10.probes, 10u);
  EXPECT_EQ(s10.lost, 1u);
  EXPECT_DOUBLE_EQ(s10.loss_ratio, 0.1);
  // 60 s: the current 10 s slot (1990..1999) plus 5 before: t = 1940..1999.
  EXPECT_EQ(w.Snapshot(now, Window::k60s).probes, 60u);
  // 600 s: 60 s slots aligned on multiples of 60: the current one starts at 1980, so the window
  // holds t = 1440..1999.
  const WindowStats s600 = w.Snapshot(now, Window::k600s);
  EXPECT_EQ(s600.probes, 560u);
  EXPECT_EQ(s600.lost, 56u);
  EXPECT_EQ(s600.rtt_samples, 504u);  // lost probes carry no RTT
  EXPECT_NEAR(s600.rtt_p50_s, 50e-6, 50e-6 * LogHistogram::kMaxRelativeError);
}

TEST(PairWindowsTest, OldDataLeavesTheWindows) {
  PairWindows w;
  w.Record(100 * kSec, ProbeSample{false, 30'000, 0.0});
  EXPECT_EQ(w.Snapshot(109 * kSec, Window::k10s).probes, 1u);
  EXPECT_EQ(w.Snapshot(110 * kSec, Window::k10s).probes, 0u);
  EXPECT_EQ(w.Snapshot(159 * kSec, Window::k60s).probes, 1u);
  EXPECT_EQ(w.Snapshot(160 * kSec, Window::k60s).probes, 0u);
  EXPECT_EQ(w.Snapshot(659 * kSec, Window::k600s).probes, 1u);
  EXPECT_EQ(w.Snapshot(660 * kSec, Window::k600s).probes, 0u);
  // A slot reused after a long gap starts clean.
  w.Record(1000 * kSec, ProbeSample{true, 0, 0.0});
  const WindowStats s = w.Snapshot(1000 * kSec, Window::k600s);
  EXPECT_EQ(s.probes, 1u);
  EXPECT_EQ(s.rtt_samples, 0u);
  EXPECT_DOUBLE_EQ(s.loss_ratio, 1.0);
}

TEST(PairWindowsTest, TailQuantilesMatchExactOnesWithinTheHistogramError) {
  PairWindows w;
  std::mt19937_64 rng(3);
  std::lognormal_distribution<double> body(std::log(25'000.0), 0.3);
  std::uniform_real_distribution<double> u(0, 1);
  std::vector<int64_t> in_window;
  // 20 probes per second for 60 s; 1% are 1–5 ms outliers (queueing on a congested link).
  for (int t = 0; t < 60; ++t) {
    for (int i = 0; i < 20; ++i) {
      const int64_t rtt = u(rng) < 0.01 ? static_cast<int64_t>(1e6 + 4e6 * u(rng))
                                        : static_cast<int64_t>(body(rng));
      w.Record((5000 + t) * kSec + i, ProbeSample{false, rtt, 0.0});
      in_window.push_back(rtt);
    }
  }
  std::sort(in_window.begin(), in_window.end());
  const WindowStats s = w.Snapshot(5059 * kSec, Window::k60s);
  ASSERT_EQ(s.rtt_samples, in_window.size());
  auto exact = [&](double q) {
    const auto rank = static_cast<size_t>(std::ceil(q * static_cast<double>(in_window.size())));
    return static_cast<double>(in_window[rank - 1]) * 1e-9;
  };
  const double bound = LogHistogram::kMaxRelativeError + 1e-9;
  EXPECT_LE(std::abs(s.rtt_p50_s - exact(0.5)) / exact(0.5), bound);
  EXPECT_LE(std::abs(s.rtt_p99_s - exact(0.99)) / exact(0.99), bound);
  EXPECT_LE(std::abs(s.rtt_p999_s - exact(0.999)) / exact(0.999), bound);
  EXPECT_GT(s.rtt_p999_s, 1e-3);  // the outliers show in the tail
}

TEST(PairWindowsTest, BandwidthIsTheMeanGoodputOfTheWindow) {
  PairWindows w;
  w.Record(300 * kSec, ProbeSample{false, 40'000'000, 9.0e9});
  w.Record(420 * kSec, ProbeSample{false, 80'000'000, 5.0e9});
  w.Record(421 * kSec, ProbeSample{true, 0, 0.0});  // a failed burst counts as lost
  EXPECT_DOUBLE_EQ(w.Snapshot(421 * kSec, Window::k600s).bandwidth_bps, 7.0e9);
  EXPECT_DOUBLE_EQ(w.Snapshot(421 * kSec, Window::k60s).bandwidth_bps, 5.0e9);
  EXPECT_DOUBLE_EQ(w.Snapshot(421 * kSec, Window::k600s).loss_ratio, 1.0 / 3.0);
}

TEST(PairWindowsTest, AGapClearsExactlyTheSkippedSlots) {
  PairWindows w;
  for (int t = 200; t <= 204; ++t) w.Record(t * kSec, ProbeSample{false, 30'000, 0.0});
  // Nothing at 205..207; the record at 208 clears the slots of 205..208 and nothing else.
  w.Record(208 * kSec, ProbeSample{true, 0, 0.0});
  const WindowStats s = w.Snapshot(208 * kSec, Window::k10s);
  EXPECT_EQ(s.probes, 6u);  // 200..204 and 208
  EXPECT_EQ(s.lost, 1u);
  // At 213 the window is 204..213: one probe of the first run is left, and the lost one.
  EXPECT_EQ(w.Snapshot(213 * kSec, Window::k10s).probes, 2u);
  // A gap longer than the whole tier: every slot of it starts clean.
  w.Record(500 * kSec, ProbeSample{false, 30'000, 0.0});
  EXPECT_EQ(w.Snapshot(500 * kSec, Window::k10s).probes, 1u);
  EXPECT_EQ(w.Snapshot(500 * kSec, Window::k60s).probes, 1u);
  EXPECT_EQ(w.LastRecordSecond(), 500);
}

TEST(PairWindowsTest, AClockThatGoesBackwardsCountsOnlyWhereTheSlotIsStillKept) {
  PairWindows w;
  w.Record(1000 * kSec, ProbeSample{false, 30'000, 0.0});
  w.Record(995 * kSec, ProbeSample{false, 30'000, 0.0});  // 5 s back: kept by every tier
  w.Record(980 * kSec, ProbeSample{false, 30'000, 0.0});  // 20 s back: not by the 10 s tier
  EXPECT_EQ(w.Snapshot(1000 * kSec, Window::k10s).probes, 2u);
  EXPECT_EQ(w.Snapshot(1000 * kSec, Window::k60s).probes, 3u);
  EXPECT_EQ(w.Snapshot(1000 * kSec, Window::k600s).probes, 3u);
  EXPECT_EQ(w.LastRecordSecond(), 1000);
  // Asked about an earlier moment, a window leaves out the slots after it.
  EXPECT_EQ(w.Snapshot(996 * kSec, Window::k10s).probes, 1u);
}

TEST(PairWindowsTest, ASlotStopsCountingAt65535Results) {
  PairWindows w;
  for (int i = 0; i < 70'000; ++i) w.Record(50 * kSec, ProbeSample{i % 2 == 0, 30'000, 0.0});
  const WindowStats s = w.Snapshot(50 * kSec, Window::k10s);
  EXPECT_EQ(s.probes, 65'535u);
  EXPECT_EQ(s.lost, 32'768u);  // the first 65,535 results, every other one lost
  EXPECT_EQ(s.rtt_samples, 32'767u);
  EXPECT_NEAR(s.loss_ratio, 0.5, 1e-4);
}

TEST(PairWindowsTest, SparseBucketHeapBlocksFillWholeMallocChunks) {
  SparseBuckets b;
  size_t last = 0;
  for (int bucket = 1; bucket < 400; ++bucket) {
    b.Add(bucket);
    if (b.HeapBytes() == last) continue;
    last = b.HeapBytes();
    // 8k + 4 entries of 2 bytes: with glibc's 8-byte header, a multiple of 16 bytes.
    EXPECT_EQ((last + 8) % 16, 0u) << "capacity " << last / 2;
  }
  EXPECT_EQ(b.EntryCount(), 399u);
}

TEST(PairWindowsTest, SparseBucketsSplitSaturatedCountsAndGrowPastInline) {
  SparseBuckets b;
  for (int i = 0; i < 127 * 3 + 5; ++i) b.Add(100);  // four entries: 5, 127, 127, 127
  b.Add(50);
  b.Add(412);
  b.Add(0);
  EXPECT_EQ(b.EntryCount(), 7u);  // past the six inline entries
  EXPECT_GT(b.HeapBytes(), 0u);
  LogHistogram h;
  b.AddTo(h);
  EXPECT_EQ(h.Count(), 127u * 3 + 5 + 3);
  EXPECT_EQ(h.BucketCount(100), 127u * 3 + 5);
  EXPECT_EQ(h.BucketCount(412), 1u);
  EXPECT_EQ(h.BucketCount(0), 1u);
  SparseBuckets moved(std::move(b));
  EXPECT_EQ(moved.EntryCount(), 7u);
  EXPECT_EQ(b.EntryCount(), 0u);  // NOLINT: moved-from is empty by contract
  moved.Clear();
  EXPECT_EQ(moved.EntryCount(), 0u);
  EXPECT_GT(moved.HeapBytes(), 0u);  // the block is kept for reuse
}

TEST(PairWindowsTest, ManyDistinctBucketsInOneSlotStayExact) {
  PairWindows w;
  // Every bucket from 1 µs to 10 s once, in one second: the slot holds 411+ entries.
  for (int b = 1; b <= LogHistogram::kLogBuckets; ++b) {
    w.Record(50 * kSec,
             ProbeSample{false, static_cast<int64_t>(LogHistogram::BucketValueNanos(b)), 0});
  }
  EXPECT_EQ(w.Snapshot(50 * kSec, Window::k10s).rtt_samples,
            static_cast<uint64_t>(LogHistogram::kLogBuckets));
}

}  // namespace
}  // namespace fw::aggregator
