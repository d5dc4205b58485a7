// Slot rotation and window snapshots for PairWindows.
#include "daemon/aggregator/core/pair_windows.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace fw::aggregator {
namespace {
constexpr uint32_t kCountBits = 20;
constexpr uint32_t kCountMask = (1u << kCountBits) - 1;
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// Slot epochs start at 1 so that 0 means "never used"; monotonic time may start near zero.
uint32_t EpochOf(int64_t now_ns, int slot_seconds) {
  const int64_t s = std::max<int64_t>(now_ns, 0) / 1'000'000'000;
  return static_cast<uint32_t>(s / slot_seconds) + 1;
}
}  // namespace

std::string_view WindowName(Window w) {
  switch (w) {
    case Window::k10s:
      return "10s";
    case Window::k60s:
      return "60s";
    case Window::k600s:
      return "600s";
  }
  return "unknown";
}

void SparseBuckets::Add(int bucket) {
  const uint32_t key = static_cast<uint32_t>(bucket) << kCountBits;
  auto it = std::lower_bound(entries_.begin(), entries_.end(), key);
  for (; it != entries_.end() && (*it >> kCountBits) == static_cast<uint32_t>(bucket); ++it) {
    if ((*it & kCountMask) != kCountMask) {
      ++*it;
      return;
    }
  }
  entries_.insert(it, key | 1u);
}

void SparseBuckets::AddTo(LogHistogram& h) const {
  for (uint32_t e : entries_) {
    const int bucket = static_cast<int>(e >> kCountBits);
    h.RecordBucket(bucket, static_cast<int64_t>(LogHistogram::BucketValueNanos(bucket)),
                   e & kCountMask);
  }
}

void PairWindows::Record(int64_t now_ns, const ProbeSample& sample) {
  const int bucket =
      (!sample.lost && sample.rtt_ns > 0) ? LogHistogram::BucketFor(sample.rtt_ns) : -1;
  for (const TierSpec& tier : kTiers) {
    const uint32_t epoch = EpochOf(now_ns, tier.slot_seconds);
    Slot& slot = slots_[tier.offset + static_cast<int>(epoch % tier.slots)];
    if (slot.epoch != epoch) {
      slot.epoch = epoch;
      slot.probes = slot.lost = slot.bw_samples = 0;
      slot.bw_sum_bps = 0.0;
      slot.rtt.Clear();
    }
    ++slot.probes;
    if (sample.lost) {
      ++slot.lost;
      continue;
    }
    if (bucket >= 0) slot.rtt.Add(bucket);
    if (sample.goodput_bps > 0.0 && std::isfinite(sample.goodput_bps)) {
      ++slot.bw_samples;
      slot.bw_sum_bps += sample.goodput_bps;
    }
  }
  last_record_s_ = now_ns / 1'000'000'000;
}

template <typename Fn>
void PairWindows::ForEachSlot(int64_t now_ns, Window w, Fn&& fn) const {
  const TierSpec& tier = kTiers[static_cast<int>(w)];
  const uint32_t now_epoch = EpochOf(now_ns, tier.slot_seconds);
  for (int i = 0; i < tier.slots; ++i) {
    const Slot& slot = slots_[tier.offset + i];
    // Inside the window: one of the `slots` most recent epochs. Future epochs (a clock that went
    // backwards cannot happen on CLOCK_MONOTONIC, but a test clock may) are excluded too.
    if (slot.epoch != 0 && slot.epoch <= now_epoch &&
        now_epoch - slot.epoch < static_cast<uint32_t>(tier.slots)) {
      fn(slot);
    }
  }
}

void PairWindows::MergeInto(int64_t now_ns, Window w, LogHistogram& h, uint64_t* probes,
                            uint64_t* lost) const {
  ForEachSlot(now_ns, w, [&](const Slot& s) {
    s.rtt.AddTo(h);
    *probes += s.probes;
    *lost += s.lost;
  });
}

WindowStats PairWindows::Snapshot(int64_t now_ns, Window w) const {
  WindowStats st;
  LogHistogram h;
  double bw_sum = 0.0;
  ForEachSlot(now_ns, w, [&](const Slot& s) {
    s.rtt.AddTo(h);
    st.probes += s.probes;
    st.lost += s.lost;
    st.bandwidth_samples += s.bw_samples;
    bw_sum += s.bw_sum_bps;
  });
  st.loss_ratio = st.probes ? static_cast<double>(st.lost) / static_cast<double>(st.probes) : 0.0;
  st.rtt_samples = h.Count();
  st.rtt_p50_s = h.QuantileSeconds(0.5);
  st.rtt_p99_s = h.QuantileSeconds(0.99);
  st.rtt_p999_s = h.QuantileSeconds(0.999);
  st.bandwidth_bps = st.bandwidth_samples ? bw_sum / st.bandwidth_samples : kNaN;
  return st;
}

size_t PairWindows::HeapBytes() const {
  size_t total = 0;
  for (const Slot& s : slots_) total += s.rtt.HeapBytes();
  return total;
}

}  // namespace fw::aggregator
