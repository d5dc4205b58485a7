// Slot rotation and window snapshots for PairWindows.
#include "daemon/aggregator/ingest/pair_windows.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace fw::aggregator {
namespace {
constexpr int kCountBits = 7;
constexpr uint16_t kCountMask = (1u << kCountBits) - 1;
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

SparseBuckets& SparseBuckets::operator=(SparseBuckets&& other) noexcept {
  if (this == &other) return *this;
  if (OnHeap()) delete[] Heap();
  std::memcpy(storage_, other.storage_, sizeof(storage_));  // inline entries or the heap pointer
  size_ = other.size_;
  capacity_ = other.capacity_;
  other.size_ = 0;
  other.capacity_ = kInline;
  return *this;
}

SparseBuckets::~SparseBuckets() {
  if (OnHeap()) delete[] Heap();
}

static_assert(sizeof(SparseBuckets) == 16);
static_assert(sizeof(PairWindows) <= 26 * 20 + 24, "a pair's windows: 26 slots of 20 bytes");

namespace {
// Heap capacities of the form 8k + 4 entries: 16k + 8 bytes, which with glibc's 8-byte chunk
// header fill a 16-byte-aligned chunk exactly (12 entries: a 32-byte chunk, 20: 48, 28: 64, ...).
uint16_t GrownCapacity(uint16_t capacity) {
  const int wanted = std::max<int>(12, capacity + capacity / 2);
  const int rounded = (wanted + 3) / 8 * 8 + 4;
  return static_cast<uint16_t>(std::min(rounded, 0xffff));
}
}  // namespace

void SparseBuckets::Add(int bucket) {
  const auto key = static_cast<uint16_t>(bucket << kCountBits);
  uint16_t* begin = data();
  uint16_t* it = std::lower_bound(begin, begin + size_, key);
  // The first entry of a bucket is the one still counting; full ones follow it.
  if (it != begin + size_ && (*it >> kCountBits) == bucket && (*it & kCountMask) != kCountMask) {
    ++*it;
    return;
  }
  if (size_ == capacity_) {
    // Grow by half: bounded waste, and a few reallocations until the slot reaches its steady size.
    const uint16_t grown = GrownCapacity(capacity_);
    if (grown == capacity_) return;  // 65535 entries: cannot happen below 8M samples per slot
    auto* block = new uint16_t[grown];
    const auto offset = it - begin;
    std::copy(begin, begin + size_, block);
    if (OnHeap()) delete[] Heap();
    SetHeap(block);
    capacity_ = grown;
    begin = block;
    it = begin + offset;
  }
  std::copy_backward(it, begin + size_, begin + size_ + 1);
  *it = static_cast<uint16_t>(key | 1u);
  ++size_;
}

void SparseBuckets::AddTo(LogHistogram& h) const {
  const uint16_t* d = data();
  for (uint16_t i = 0; i < size_; ++i) {
    const int bucket = d[i] >> kCountBits;
    h.RecordBucket(bucket, static_cast<int64_t>(LogHistogram::BucketValueNanos(bucket)),
                   d[i] & kCountMask);
  }
}

void PairWindows::Record(int64_t now_ns, const ProbeSample& sample) {
  const int bucket =
      (!sample.lost && sample.rtt_ns > 0) ? LogHistogram::BucketFor(sample.rtt_ns) : -1;
  const bool bandwidth =
      !sample.lost && sample.goodput_bps > 0.0 && std::isfinite(sample.goodput_bps);
  if (bandwidth && !bandwidth_) {
    bandwidth_ = std::make_unique<std::array<BandwidthSlot, kTotalSlots>>();
  }
  for (int t = 0; t < kWindowCount; ++t) {
    const TierSpec& tier = kTiers[t];
    const auto n = static_cast<uint32_t>(tier.slots);
    const uint32_t epoch = EpochOf(now_ns, tier.slot_seconds);
    uint32_t& newest = tier_epoch_[t];
    if (epoch > newest) {
      // Clear the slots of the epochs from newest + 1 to epoch (all n after a long gap).
      // Epochs start at 1; slots of epochs never written are still empty.
      const uint32_t oldest_kept = epoch >= n ? epoch - n + 1 : 1;
      const uint32_t first = std::max(newest + 1, oldest_kept);
      for (uint32_t e = first; e <= epoch; ++e) {
        const int index = tier.offset + static_cast<int>(e % n);
        Slot& slot = slots_[index];
        slot.probes = slot.lost = 0;
        slot.rtt.Clear();
        if (bandwidth_) (*bandwidth_)[index] = BandwidthSlot{};
      }
      newest = epoch;
    } else if (newest - epoch >= n) {
      continue;  // older than the tier keeps (a clock that went backwards)
    }
    const int index = tier.offset + static_cast<int>(epoch % n);
    Slot& slot = slots_[index];
    if (slot.probes == UINT16_MAX) continue;  // saturated: see the class comment
    ++slot.probes;
    if (sample.lost) {
      ++slot.lost;
      continue;
    }
    if (bucket >= 0) slot.rtt.Add(bucket);
    if (bandwidth) {
      BandwidthSlot& b = (*bandwidth_)[index];
      ++b.samples;
      b.sum_bps += sample.goodput_bps;
    }
  }
}

template <typename Fn>
void PairWindows::ForEachSlot(int64_t now_ns, Window w, Fn&& fn) const {
  const TierSpec& tier = kTiers[static_cast<int>(w)];
  const auto n = static_cast<uint32_t>(tier.slots);
  const uint32_t now_epoch = EpochOf(now_ns, tier.slot_seconds);
  const uint32_t newest = tier_epoch_[static_cast<int>(w)];
  if (newest == 0) return;
  // The slots hold the epochs newest - n + 1 .. newest; the window wants now_epoch - n + 1 ..
  // now_epoch. Epochs after now (a test clock that went backwards) are excluded too.
  const uint32_t hi = std::min(newest, now_epoch);
  const uint32_t lo_held = newest >= n ? newest - n + 1 : 1;
  const uint32_t lo_wanted = now_epoch >= n ? now_epoch - n + 1 : 1;
  for (uint32_t e = std::max(lo_held, lo_wanted); e <= hi; ++e) {
    fn(tier.offset + static_cast<int>(e % n));
  }
}

void PairWindows::MergeInto(int64_t now_ns, Window w, LogHistogram& h, uint64_t* probes,
                            uint64_t* lost) const {
  ForEachSlot(now_ns, w, [&](int index) {
    const Slot& s = slots_[index];
    s.rtt.AddTo(h);
    *probes += s.probes;
    *lost += s.lost;
  });
}

WindowStats PairWindows::Snapshot(int64_t now_ns, Window w) const {
  WindowStats st;
  LogHistogram h;
  double bw_sum = 0.0;
  ForEachSlot(now_ns, w, [&](int index) {
    const Slot& s = slots_[index];
    s.rtt.AddTo(h);
    st.probes += s.probes;
    st.lost += s.lost;
    if (bandwidth_) {
      st.bandwidth_samples += (*bandwidth_)[index].samples;
      bw_sum += (*bandwidth_)[index].sum_bps;
    }
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
  if (bandwidth_) total += sizeof(*bandwidth_);
  return total;
}

}  // namespace fw::aggregator
