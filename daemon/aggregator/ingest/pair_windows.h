// Sliding 10 s / 60 s / 600 s windows of one probe pair: RTT quantiles, loss and bandwidth.
#pragma once

#include <array>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string_view>
#include <utility>

#include "daemon/aggregator/model/log_histogram.h"

namespace fw::aggregator {

enum class Window : uint8_t { k10s = 0, k60s, k600s };
inline constexpr int kWindowCount = 3;
inline constexpr std::array<Window, kWindowCount> kAllWindows = {Window::k10s, Window::k60s,
                                                                 Window::k600s};
// "10s", "60s", "600s": the keys of /api/v1/pairs.
std::string_view WindowName(Window w);

// The part of a probe result that the windows keep. Compact, so the ingest path copies no strings.
struct ProbeSample {
  bool lost = false;
  int64_t rtt_ns = 0;        // ignored when lost, and for bandwidth-only pairs
  double goodput_bps = 0.0;  // > 0 only for bandwidth probes
  // Bursts: the prober host's CPU busy share (all CPUs, the busiest one) in thousandths; 0: not
  // measured (ReportedProbe).
  uint16_t cpu_busy_permille = 0;
  uint16_t cpu_peak_permille = 0;
  uint16_t cpu_pressure_permille = 0;  // CPU pressure over the burst (ReportedProbe); 0: none
  // The late echo of a probe recorded lost before (ReportedProbe::late): its round trip counts,
  // not another probe. The pair's windows keep the earlier loss (the flow windows the analyzer
  // reads take it back, PairTable).
  bool late = false;
};

struct WindowStats {
  uint64_t probes = 0;  // results in the window, lost ones included
  uint64_t lost = 0;
  double loss_ratio = 0.0;  // lost / probes; 0 when probes == 0
  uint64_t rtt_samples = 0;
  double rtt_p50_s = 0.0;  // the three quantiles are NaN when rtt_samples == 0
  double rtt_p99_s = 0.0;
  double rtt_p999_s = 0.0;
  uint32_t bandwidth_samples = 0;
  double bandwidth_bps = 0.0;  // mean goodput of the window's bandwidth probes; NaN when none
};

// RTT bucket counts of one slot, stored sparsely: a slot usually sees a few dozen distinct
// buckets, and a dense LogHistogram per slot would cost 3.3 KB. Each entry is 16 bits: the bucket
// (9 bits) and its count (7 bits, up to 127); a bucket with more samples gets more entries. Entries
// are sorted by bucket, the non-full entry of a bucket first. Up to six entries live inline in the
// object; more go to a heap block that Clear() keeps, so a pair in steady state records without
// allocating. 16 bytes plus the heap block.
class SparseBuckets {
 public:
  SparseBuckets() = default;
  SparseBuckets(const SparseBuckets&) = delete;
  SparseBuckets& operator=(const SparseBuckets&) = delete;
  SparseBuckets(SparseBuckets&& other) noexcept { *this = std::move(other); }
  SparseBuckets& operator=(SparseBuckets&& other) noexcept;
  ~SparseBuckets();

  // REQUIRES: 0 <= bucket < LogHistogram::kBucketCount.
  void Add(int bucket);
  // Adds every sample of `other`. The entries come out as `other`'s samples added one by one with
  // Add() would leave them (per bucket: one entry still counting and the full ones).
  void AddAll(const SparseBuckets& other);
  void Clear() { size_ = 0; }
  void AddTo(LogHistogram& h) const;
  size_t HeapBytes() const { return OnHeap() ? capacity_ * sizeof(uint16_t) : 0; }
  size_t EntryCount() const { return size_; }
  // Asks for the heap block ahead of an Add (nothing when the entries are inline).
  void Prefetch() const {
    if (OnHeap()) __builtin_prefetch(Heap(), 1);
  }

 private:
  static constexpr uint16_t kInline = 6;
  bool OnHeap() const { return capacity_ > kInline; }
  // The heap pointer shares the inline bytes (memcpy keeps it free of aliasing and alignment
  // trouble), so the object is 16 bytes instead of 24 with a union.
  uint16_t* Heap() const {
    uint16_t* p;
    std::memcpy(&p, storage_, sizeof(p));
    return p;
  }
  void SetHeap(uint16_t* p) { std::memcpy(storage_, &p, sizeof(p)); }
  uint16_t* data() { return OnHeap() ? Heap() : storage_; }
  const uint16_t* data() const { return OnHeap() ? Heap() : storage_; }
  // Adds `n` (> 0) samples of `bucket`.
  void AddCount(int bucket, int n);
  // Room for one more entry at `*it` (may move the entries to a larger block, updating `it`);
  // false when the block cannot grow.
  bool MakeRoom(uint16_t*& it);

  alignas(4) uint16_t storage_[kInline] = {};
  uint16_t size_ = 0;
  uint16_t capacity_ = kInline;
};
static_assert(sizeof(uint16_t*) <= sizeof(uint16_t) * 6, "the heap pointer must fit inline");
static_assert(LogHistogram::kBucketCount <= 512, "SparseBuckets packs the bucket into 9 bits");

// The windows of one (src, dst, transport) pair, built from three tiers of time slots:
//   10 s window: 10 slots of 1 s     60 s window: 6 slots of 10 s     600 s window: 10 slots of 60 s
// Each result is counted once in every tier. A window is the current (partial) slot plus the
// previous n-1 slots, so it spans between W - slot and W seconds of data. Each tier remembers only
// its newest epoch (monotonic seconds / slot length): a record in a newer epoch clears the slots
// of the epochs skipped since, so slot i of a tier always holds the epoch ≡ i (mod n) among the n
// newest, and idle pairs cost no work. A slot counts at most 65,535 results (over 1,000 results/s
// for one pair in a 60 s slot, far above any plan's rate); later results of that slot are not
// counted. A result more than n - 1 slots older than the tier's newest epoch (only a clock that
// goes backwards can send one) is not counted in that tier.
//
// The 600 s tier is written once per 10 s slot instead of once per result: the newest 10 s slot
// is "pending" and is added to its 60 s slot whole (a fold) when a newer 10 s slot starts, and
// the 600 s window reads a pending slot as if it had been folded. The figures are exactly those
// of writing each result to every tier:
// - a pending slot folds early when it would fill its 60 s slot (65,535 results), so the 60 s
//   slot counts exactly its first 65,535; later results of that 10 s slot go to both tiers;
// - a result for an older 10 s slot (a clock that went backwards) and a bandwidth result (whose
//   sum is floating point, so the order of additions matters) fold the pending slot first and go
//   to both tiers themselves, as does every later result of that 10 s slot.
class PairWindows {
 public:
  // `now_ns` is the aggregator's monotonic time when the result arrived (agents' clocks are never
  // compared with ours).
  void Record(int64_t now_ns, const ProbeSample& sample);
  WindowStats Snapshot(int64_t now_ns, Window w) const;
  // Adds the window's RTT samples to `h` (for per-node aggregates); returns probes and lost.
  void MergeInto(int64_t now_ns, Window w, LogHistogram& h, uint64_t* probes, uint64_t* lost) const;
  // The window's results and lost ones, without its RTT buckets: an upper bound on its RTT samples
  // (probes - lost) for a caller that needs a minimum before merging.
  void Counts(int64_t now_ns, Window w, uint64_t* probes, uint64_t* lost) const;
  // Monotonic seconds of the newest Record(), 0 if none.
  int64_t LastRecordSecond() const { return tier_epoch_[0] == 0 ? 0 : tier_epoch_[0] - 1; }
  // Heap bytes held by the sparse buckets and the bandwidth slots (the object itself is
  // sizeof(PairWindows)).
  size_t HeapBytes() const;
  // Ask for the memory a Record() at `now_ns` touches, so that a caller recording into many pairs
  // in turn overlaps their cache misses instead of waiting for each: Prefetch() the tiers' epochs
  // and the slots of `now_ns` first, PrefetchBuckets() (which reads those slots) some time later
  // for their heap blocks. Neither changes anything.
  void Prefetch(int64_t now_ns) const;
  void PrefetchBuckets(int64_t now_ns) const;

 private:
  // 20 bytes: at 16,000 nodes there are ~600,000 pairs of 26 slots each, so every byte here is
  // ~16 MB. The slot's epoch is implied by the tier's newest one (see the class comment).
  struct Slot {
    uint16_t probes = 0;  // saturating: see the class comment
    uint16_t lost = 0;
    SparseBuckets rtt;
  };
  // Bandwidth results of the slot with the same index. Most pairs only carry latency probes, so
  // these live in a block allocated on a pair's first bandwidth result; it is reset together with
  // its slot.
  struct BandwidthSlot {
    uint32_t samples = 0;
    double sum_bps = 0.0;
  };
  struct TierSpec {
    int slot_seconds;
    int slots;
    int offset;  // first index in slots_
  };
  static constexpr std::array<TierSpec, kWindowCount> kTiers = {
      TierSpec{1, 10, 0}, TierSpec{10, 6, 10}, TierSpec{60, 10, 16}};
  static constexpr int kTotalSlots = 26;

  // Calls fn(slot, bandwidth slot or null) for each slot inside window `w` at `now_ns` (for the
  // 600 s window, the pending 10 s slot too).
  template <typename Fn>
  void ForEachSlot(int64_t now_ns, Window w, Fn&& fn) const;
  // Counts the result in tier `t`'s slot of `now_ns` (the rules of the class comment).
  void RecordTier(int t, int64_t now_ns, const ProbeSample& sample, int bucket, bool bandwidth);
  // Clears the slots of tier `t` from its newest epoch + 1 to `epoch` (all of them after a long
  // gap) and makes `epoch` the newest. REQUIRES: epoch > the tier's newest.
  void Advance(int t, uint32_t epoch);
  // Adds the pending 10 s slot to its 60 s slot; nothing when none is pending.
  void FoldPending();
  // The index in slots_ of tier `t`'s slot for `now_ns`.
  static int SlotIndexOf(int t, int64_t now_ns);

  std::array<Slot, kTotalSlots> slots_{};
  std::unique_ptr<std::array<BandwidthSlot, kTotalSlots>> bandwidth_;  // null until needed
  std::array<uint32_t, kWindowCount> tier_epoch_{};  // newest epoch recorded per tier; 0: none
  // Whether the 10 s tier's newest slot holds results not yet in the 600 s tier (see the class
  // comment); then `pending_room_` is what its 60 s slot can still count (> 0).
  bool pending_ = false;
  uint16_t pending_room_ = 0;
};

}  // namespace fw::aggregator
