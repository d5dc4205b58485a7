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

bool SparseBuckets::MakeRoom(uint16_t*& it) {
  if (size_ < capacity_) return true;
  // Grow by half: bounded waste, and a few reallocations until the slot reaches its steady size.
  const uint16_t grown = GrownCapacity(capacity_);
  if (grown == capacity_) return false;  // 65535 entries: cannot happen below 8M samples per slot
  uint16_t* begin = data();
  auto* block = new uint16_t[grown];
  const auto offset = it - begin;
  std::copy(begin, begin + size_, block);
  if (OnHeap()) delete[] Heap();
  SetHeap(block);
  capacity_ = grown;
  it = block + offset;
  return true;
}

void SparseBuckets::Add(int bucket) {
  const auto key = static_cast<uint16_t>(bucket << kCountBits);
  uint16_t* begin = data();
  uint16_t* it = std::lower_bound(begin, begin + size_, key);
  // The first entry of a bucket is the one still counting; full ones follow it.
  if (it != begin + size_ && (*it >> kCountBits) == bucket && (*it & kCountMask) != kCountMask) {
    ++*it;
    return;
  }
  if (!MakeRoom(it)) return;
  begin = data();
  std::copy_backward(it, begin + size_, begin + size_ + 1);
  *it = static_cast<uint16_t>(key | 1u);
  ++size_;
}

void SparseBuckets::AddCount(int bucket, int n) {
  const auto key = static_cast<uint16_t>(bucket << kCountBits);
  while (n > 0) {
    uint16_t* begin = data();
    uint16_t* it = std::lower_bound(begin, begin + size_, key);
    if (it != begin + size_ && (*it >> kCountBits) == bucket && (*it & kCountMask) != kCountMask) {
      // Fill the entry still counting; the remainder, if any, starts a new one below.
      const int take = std::min<int>(n, kCountMask - (*it & kCountMask));
      *it = static_cast<uint16_t>(*it + take);
      n -= take;
      continue;
    }
    // A new entry goes first among the bucket's (all full, if any), as the smallest count.
    if (!MakeRoom(it)) return;
    begin = data();
    const int take = std::min<int>(n, kCountMask);
    std::copy_backward(it, begin + size_, begin + size_ + 1);
    *it = static_cast<uint16_t>(key | take);
    ++size_;
    n -= take;
  }
}

void SparseBuckets::AddAll(const SparseBuckets& other) {
  const uint16_t* d = other.data();
  for (uint16_t i = 0; i < other.size_; ++i) AddCount(d[i] >> kCountBits, d[i] & kCountMask);
}

void SparseBuckets::AddTo(LogHistogram& h) const {
  const uint16_t* d = data();
  for (uint16_t i = 0; i < size_; ++i) {
    const int bucket = d[i] >> kCountBits;
    h.RecordBucket(bucket, static_cast<int64_t>(LogHistogram::BucketValueNanos(bucket)),
                   d[i] & kCountMask);
  }
}

void PairWindows::Advance(int t, uint32_t epoch) {
  const TierSpec& tier = kTiers[t];
  const auto n = static_cast<uint32_t>(tier.slots);
  uint32_t& newest = tier_epoch_[t];
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
}

void PairWindows::RecordTier(int t, int64_t now_ns, const ProbeSample& sample, int bucket,
                             bool bandwidth) {
  const TierSpec& tier = kTiers[t];
  const auto n = static_cast<uint32_t>(tier.slots);
  const uint32_t epoch = EpochOf(now_ns, tier.slot_seconds);
  if (epoch > tier_epoch_[t]) {
    Advance(t, epoch);
  } else if (tier_epoch_[t] - epoch >= n) {
    return;  // older than the tier keeps (a clock that went backwards)
  }
  const int index = tier.offset + static_cast<int>(epoch % n);
  Slot& slot = slots_[index];
  if (slot.probes == UINT16_MAX) return;  // saturated: see the class comment
  if (!sample.late) ++slot.probes;
  if (sample.lost) {
    ++slot.lost;
    return;
  }
  if (bucket >= 0) slot.rtt.Add(bucket);
  if (bandwidth) {
    BandwidthSlot& b = (*bandwidth_)[index];
    ++b.samples;
    b.sum_bps += sample.goodput_bps;
  }
}

namespace {
constexpr int kTier10s = 1;  // the tier of 10 s slots, whose newest slot may be pending
constexpr int kTier60s = 2;  // the tier of 60 s slots, which pending slots fold into
// The 60 s epoch of a 10 s epoch (both count from 1).
uint32_t MinuteEpochOf(uint32_t ten_second_epoch) { return (ten_second_epoch - 1) / 6 + 1; }
}  // namespace

void PairWindows::FoldPending() {
  if (!pending_) return;
  pending_ = false;
  const TierSpec& from_tier = kTiers[kTier10s];
  const TierSpec& to_tier = kTiers[kTier60s];
  const uint32_t from_epoch = tier_epoch_[kTier10s];
  const Slot& from = slots_[from_tier.offset + static_cast<int>(from_epoch % from_tier.slots)];
  // The 60 s tier's newest epoch is never past a pending slot's (records of later 10 s slots fold
  // it first), so this only moves it forward.
  const uint32_t to_epoch = MinuteEpochOf(from_epoch);
  if (to_epoch > tier_epoch_[kTier60s]) Advance(kTier60s, to_epoch);
  Slot& to = slots_[to_tier.offset + static_cast<int>(to_epoch % to_tier.slots)];
  // pending_room_ kept `from.probes` within what `to` can count.
  to.probes = static_cast<uint16_t>(to.probes + from.probes);
  to.lost = static_cast<uint16_t>(to.lost + from.lost);
  to.rtt.AddAll(from.rtt);
}

void PairWindows::Record(int64_t now_ns, const ProbeSample& sample) {
  const int bucket =
      (!sample.lost && sample.rtt_ns > 0) ? LogHistogram::BucketFor(sample.rtt_ns) : -1;
  const bool bandwidth =
      !sample.lost && sample.goodput_bps > 0.0 && std::isfinite(sample.goodput_bps);
  if (bandwidth && !bandwidth_) {
    bandwidth_ = std::make_unique<std::array<BandwidthSlot, kTotalSlots>>();
  }
  RecordTier(0, now_ns, sample, bucket, bandwidth);

  const TierSpec& tier = kTiers[kTier10s];
  const uint32_t epoch = EpochOf(now_ns, tier.slot_seconds);
  if (epoch > tier_epoch_[kTier10s]) {
    // A new 10 s slot: the previous one is complete. The new one starts pending unless its 60 s
    // slot is already full.
    FoldPending();
    Advance(kTier10s, epoch);
    const uint32_t minute = MinuteEpochOf(epoch);
    const TierSpec& to_tier = kTiers[kTier60s];
    const uint16_t counted =
        minute > tier_epoch_[kTier60s]
            ? 0  // that slot is cleared when the fold reaches it
            : slots_[to_tier.offset + static_cast<int>(minute % to_tier.slots)].probes;
    pending_room_ = static_cast<uint16_t>(UINT16_MAX - counted);
    pending_ = pending_room_ > 0;
  }
  if (pending_ && epoch == tier_epoch_[kTier10s] && !bandwidth) {
    Slot& slot = slots_[tier.offset + static_cast<int>(epoch % tier.slots)];
    if (!sample.late) ++slot.probes;  // below pending_room_ <= 65,535 until the fold just below
    if (sample.lost) {
      ++slot.lost;
    } else if (bucket >= 0) {
      slot.rtt.Add(bucket);
    }
    if (slot.probes == pending_room_) FoldPending();  // its 60 s slot is full now
    return;
  }
  FoldPending();
  RecordTier(kTier10s, now_ns, sample, bucket, bandwidth);
  RecordTier(kTier60s, now_ns, sample, bucket, bandwidth);
}

template <typename Fn>
void PairWindows::ForEachSlot(int64_t now_ns, Window w, Fn&& fn) const {
  const int t = static_cast<int>(w);
  const TierSpec& tier = kTiers[t];
  const auto n = static_cast<uint32_t>(tier.slots);
  const uint32_t now_epoch = EpochOf(now_ns, tier.slot_seconds);
  const uint32_t stored = tier_epoch_[t];
  // A pending 10 s slot belongs to the 60 s tier as if folded: its epoch there is the tier's
  // newest, and the slots a fold would clear (epochs stored + 1 up to it) read as empty.
  const uint32_t pending_epoch =
      (t == kTier60s && pending_) ? MinuteEpochOf(tier_epoch_[kTier10s]) : 0;
  const uint32_t newest = std::max(stored, pending_epoch);
  if (newest == 0) return;
  // The slots hold the epochs newest - n + 1 .. newest; the window wants now_epoch - n + 1 ..
  // now_epoch. Epochs after now (a test clock that went backwards) are excluded too.
  const uint32_t hi = std::min(newest, now_epoch);
  const uint32_t lo_held = newest >= n ? newest - n + 1 : 1;
  const uint32_t lo_wanted = now_epoch >= n ? now_epoch - n + 1 : 1;
  for (uint32_t e = std::max(lo_held, lo_wanted); e <= hi; ++e) {
    const int index = tier.offset + static_cast<int>(e % n);
    if (e <= stored) fn(slots_[index], bandwidth_ ? &(*bandwidth_)[index] : nullptr);
    if (e == pending_epoch) {
      const TierSpec& from = kTiers[kTier10s];
      // A pending slot holds no bandwidth result (one folds it first).
      fn(slots_[from.offset + static_cast<int>(tier_epoch_[kTier10s] % from.slots)], nullptr);
    }
  }
}

void PairWindows::MergeInto(int64_t now_ns, Window w, LogHistogram& h, uint64_t* probes,
                            uint64_t* lost) const {
  ForEachSlot(now_ns, w, [&](const Slot& s, const BandwidthSlot*) {
    s.rtt.AddTo(h);
    *probes += s.probes;
    *lost += s.lost;
  });
}

void PairWindows::Counts(int64_t now_ns, Window w, uint64_t* probes, uint64_t* lost) const {
  ForEachSlot(now_ns, w, [&](const Slot& s, const BandwidthSlot*) {
    *probes += s.probes;
    *lost += s.lost;
  });
}

WindowStats PairWindows::Snapshot(int64_t now_ns, Window w) const {
  WindowStats st;
  LogHistogram h;
  double bw_sum = 0.0;
  ForEachSlot(now_ns, w, [&](const Slot& s, const BandwidthSlot* b) {
    s.rtt.AddTo(h);
    st.probes += s.probes;
    st.lost += s.lost;
    if (b != nullptr) {
      st.bandwidth_samples += b->samples;
      bw_sum += b->sum_bps;
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

int PairWindows::SlotIndexOf(int t, int64_t now_ns) {
  const TierSpec& tier = kTiers[t];
  const uint32_t epoch = EpochOf(now_ns, tier.slot_seconds);
  return tier.offset + static_cast<int>(epoch % static_cast<uint32_t>(tier.slots));
}

void PairWindows::Prefetch(int64_t now_ns) const {
  __builtin_prefetch(tier_epoch_.data(), 1);
  for (int t : {0, kTier10s}) __builtin_prefetch(&slots_[SlotIndexOf(t, now_ns)], 1);
}

void PairWindows::PrefetchBuckets(int64_t now_ns) const {
  for (int t : {0, kTier10s}) slots_[SlotIndexOf(t, now_ns)].rtt.Prefetch();
}

size_t PairWindows::HeapBytes() const {
  size_t total = 0;
  for (const Slot& s : slots_) total += s.rtt.HeapBytes();
  if (bandwidth_) total += sizeof(*bandwidth_);
  return total;
}

}  // namespace fw::aggregator
