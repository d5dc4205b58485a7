// Sliding windows of one pair under a fake clock: counts, loss, quantiles, bandwidth, expiry.
#include "daemon/aggregator/ingest/pair_windows.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
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

// What PairWindows must report, written the plain way: every result counted in every tier at
// once, per tier a map from epoch to slot (the rules of PairWindows' class comment).
class ReferenceWindows {
 public:
  void Record(int64_t now_ns, const ProbeSample& sample) {
    for (int t = 0; t < kWindowCount; ++t) {
      const auto n = static_cast<uint32_t>(kSlots[t]);
      const uint32_t epoch = Epoch(now_ns, t);
      auto& tier = tiers_[t];
      if (epoch > newest_[t]) {
        newest_[t] = epoch;
        std::erase_if(tier, [&](const auto& kv) { return kv.first + n <= epoch; });
      } else if (newest_[t] - epoch >= n) {
        continue;
      }
      RefSlot& slot = tier[epoch];
      if (slot.probes == UINT16_MAX) continue;
      ++slot.probes;
      if (sample.lost) {
        ++slot.lost;
        continue;
      }
      if (sample.rtt_ns > 0) ++slot.buckets[LogHistogram::BucketFor(sample.rtt_ns)];
      if (sample.goodput_bps > 0.0) {
        ++slot.bw_samples;
        slot.bw_sum += sample.goodput_bps;
      }
    }
  }

  struct View {
    uint64_t probes = 0, lost = 0, bw_samples = 0;
    double bw_sum = 0.0;
    std::map<int, uint64_t> buckets;
  };
  View Window(int64_t now_ns, int t) const {
    View v;
    const auto n = static_cast<uint32_t>(kSlots[t]);
    const uint32_t now_epoch = Epoch(now_ns, t);
    for (const auto& [e, slot] : tiers_[t]) {  // ascending epochs, as PairWindows adds them
      if (e + n <= newest_[t] || e + n <= now_epoch || e > now_epoch) continue;
      v.probes += slot.probes;
      v.lost += slot.lost;
      v.bw_samples += slot.bw_samples;
      v.bw_sum += slot.bw_sum;
      for (const auto& [b, c] : slot.buckets) v.buckets[b] += c;
    }
    return v;
  }

 private:
  static constexpr int kSeconds[kWindowCount] = {1, 10, 60};
  static constexpr int kSlots[kWindowCount] = {10, 6, 10};
  struct RefSlot {
    uint64_t probes = 0, lost = 0, bw_samples = 0;
    double bw_sum = 0.0;
    std::map<int, uint64_t> buckets;
  };
  static uint32_t Epoch(int64_t now_ns, int t) {
    return static_cast<uint32_t>(std::max<int64_t>(now_ns, 0) / kSec / kSeconds[t]) + 1;
  }
  std::map<uint32_t, RefSlot> tiers_[kWindowCount];
  uint32_t newest_[kWindowCount] = {};
};

// Every window of `w` against the reference at `now_ns`: counts, each RTT bucket, bandwidth.
void ExpectSameWindows(const PairWindows& w, const ReferenceWindows& ref, int64_t now_ns) {
  for (int t = 0; t < kWindowCount; ++t) {
    const Window win = kAllWindows[static_cast<size_t>(t)];
    const ReferenceWindows::View want = ref.Window(now_ns, t);
    const WindowStats got = w.Snapshot(now_ns, win);
    SCOPED_TRACE(::testing::Message()
                 << "window " << WindowName(win) << " at " << now_ns / kSec << " s");
    ASSERT_EQ(got.probes, want.probes);
    ASSERT_EQ(got.lost, want.lost);
    ASSERT_EQ(got.bandwidth_samples, want.bw_samples);
    if (want.bw_samples > 0) {
      ASSERT_EQ(got.bandwidth_bps, want.bw_sum / static_cast<double>(want.bw_samples));
    }
    LogHistogram h;
    uint64_t probes = 0, lost = 0;
    w.MergeInto(now_ns, win, h, &probes, &lost);
    ASSERT_EQ(probes, want.probes);
    ASSERT_EQ(lost, want.lost);
    uint64_t samples = 0;
    for (const auto& [b, c] : want.buckets) {
      ASSERT_EQ(h.BucketCount(b), c) << "bucket " << b;
      samples += c;
    }
    ASSERT_EQ(h.Count(), samples);
    ASSERT_EQ(got.rtt_samples, samples);
  }
}

// The 600 s tier is written once per 10 s slot (folded): the same figures as a result written to
// every tier, with gaps, clocks that go backwards, bandwidth results and snapshots at any time.
TEST(PairWindowsTest, FoldedTiersReadExactlyAsEveryResultInEveryTier) {
  for (uint32_t seed = 1; seed <= 10; ++seed) {
    SCOPED_TRACE(::testing::Message() << "seed " << seed);
    std::mt19937 rng(seed);
    PairWindows w;
    ReferenceWindows ref;
    int64_t now = 1000 * kSec + static_cast<int64_t>(rng() % 1000) * kSec / 1000;
    for (int step = 0; step < 3000; ++step) {
      const uint32_t r = rng() % 1000;
      if (r < 700) {
        now += static_cast<int64_t>(rng() % 700) * kSec / 1000;  // a few results a second
      } else if (r < 720) {
        now += static_cast<int64_t>(rng() % 900) * kSec;  // a gap, up to longer than 600 s
      } else if (r < 740) {
        now -= static_cast<int64_t>(rng() % 700) * kSec;  // a clock that went backwards
      }
      ProbeSample sample;
      sample.lost = rng() % 10 == 0;
      sample.rtt_ns = rng() % 50 == 0 ? 0 : 2'000 + static_cast<int64_t>(rng() % 5'000'000);
      if (rng() % 40 == 0) sample.goodput_bps = 1e9 + static_cast<double>(rng() % 1000) * 1.37e6;
      w.Record(now, sample);
      ref.Record(now, sample);
      ExpectSameWindows(w, ref, now);
      if (step % 7 == 0) {
        ExpectSameWindows(w, ref, now + static_cast<int64_t>(rng() % 800) * kSec);
        ExpectSameWindows(w, ref, now - static_cast<int64_t>(rng() % 800) * kSec);
      }
      if (::testing::Test::HasFatalFailure()) return;
    }
  }
}

// A 60 s slot full before its 10 s slots end: the pending slot folds when it fills the 60 s slot,
// which then holds exactly its first 65,535 results (lost ones and RTTs in their order).
TEST(PairWindowsTest, AFoldedSlotSaturatesAtExactlyTheSameResult) {
  PairWindows w;
  ReferenceWindows ref;
  // 30,000 results in each of three 10 s slots of one minute, then a few in the next minute.
  int64_t now = 600 * kSec;
  for (int slot = 0; slot < 3; ++slot) {
    for (int i = 0; i < 30'000; ++i) {
      const ProbeSample s{(i + slot) % 3 == 0, 10'000 + (i % 7) * 40'000, 0.0};
      w.Record(now, s);
      ref.Record(now, s);
    }
    ExpectSameWindows(w, ref, now);
    now += 10 * kSec;
  }
  EXPECT_EQ(w.Snapshot(now - 10 * kSec, Window::k600s).probes, 65'535u);
  for (int i = 0; i < 100; ++i) {
    const ProbeSample s{false, 50'000, 0.0};
    w.Record(now + 60 * kSec, s);
    ref.Record(now + 60 * kSec, s);
  }
  ExpectSameWindows(w, ref, now + 60 * kSec);
  // A 10 s slot alone over 65,535: its own tier and the minute's stop at the same result.
  PairWindows big;
  ReferenceWindows big_ref;
  for (int i = 0; i < 70'000; ++i) {
    const ProbeSample s{i % 5 == 0, 20'000 + (i % 11) * 1'000, 0.0};
    const int64_t at = 3000 * kSec + static_cast<int64_t>(i) * 100'000;  // 7 s of results
    big.Record(at, s);
    big_ref.Record(at, s);
  }
  ExpectSameWindows(big, big_ref, 3007 * kSec);
  EXPECT_EQ(big.Snapshot(3007 * kSec, Window::k600s).probes, 65'535u);
}

TEST(PairWindowsTest, SparseBucketsAddAllLeavesWhatAddingOneByOneLeaves) {
  SparseBuckets from;
  SparseBuckets one_by_one;
  SparseBuckets folded;
  std::mt19937 rng(7);
  for (int round = 0; round < 5; ++round) {
    from.Clear();
    for (int i = 0; i < 400; ++i) {
      const int bucket = static_cast<int>(rng() % 3 == 0 ? 100 : rng() % 60 + 200);
      from.Add(bucket);
      one_by_one.Add(bucket);
    }
    folded.AddAll(from);
    EXPECT_EQ(folded.EntryCount(), one_by_one.EntryCount());
    LogHistogram a, b;
    folded.AddTo(a);
    one_by_one.AddTo(b);
    ASSERT_EQ(a.Count(), b.Count());
    for (int k = 0; k < LogHistogram::kBucketCount; ++k) {
      ASSERT_EQ(a.BucketCount(k), b.BucketCount(k)) << k;
    }
  }
}

}  // namespace
}  // namespace fw::aggregator
