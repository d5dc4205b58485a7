// One source node's pairs by (destination, transport), for the pair store's batch path.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "daemon/aggregator/model/name_interner.h"
#include "daemon/aggregator/model/reported_probe.h"

namespace fw::aggregator {

// An open-addressed table in one block: every result of a batch comes from one source, so its
// lookups touch this small array (a few KB) instead of the shard's map of every pair, whose nodes
// miss the cache at every lookup. It only remembers: a hit is a hint that the caller checks
// against the pair's generation, and an entry of a dropped pair stays until it is replaced or the
// table is cleared. Not thread-safe: the pair store's shard lock guards it.
class SourcePairIndex {
 public:
  struct Hit {
    uint32_t index = 0;
    uint32_t generation = 0;
  };

  // What Put() last remembered for (dst, t), or null.
  const Hit* Find(NodeId dst, Transport t) const {
    const size_t i = SlotOf(KeyOf(dst, t));
    return i == kNone ? nullptr : &slots_[i].hit;
  }

  // Remembers (dst, t) -> hit, replacing what it held. `live` is how many pairs the source has:
  // a table that would grow past four times what they need is cleared instead, so entries of
  // dropped pairs do not pile up.
  void Put(NodeId dst, Transport t, Hit hit, size_t live) {
    const uint64_t key = KeyOf(dst, t);
    if (const size_t i = SlotOf(key); i != kNone) {
      slots_[i].hit = hit;
      return;
    }
    if ((size_ + 1) * 2 > slots_.size()) {
      if (!slots_.empty() && slots_.size() >= 4 * 2 * (live + 1)) {
        Clear();
      } else {
        Grow();
      }
    }
    Insert(key, hit);
  }

  void Clear() {
    for (Slot& s : slots_) s = Slot{};
    size_ = 0;
  }
  size_t size() const { return size_; }
  size_t capacity() const { return slots_.size(); }

 private:
  struct Slot {
    uint64_t key = 0;  // 0: empty
    Hit hit;
  };
  static uint64_t KeyOf(NodeId dst, Transport t) {
    return ((static_cast<uint64_t>(dst) << 8) | static_cast<uint64_t>(t)) + 1;
  }
  size_t Home(uint64_t key) const {
    return static_cast<size_t>((key * 0x9E3779B97F4A7C15ULL) >> 32) & (slots_.size() - 1);
  }
  static constexpr size_t kNone = ~size_t{0};
  // The slot holding `key`, or kNone.
  size_t SlotOf(uint64_t key) const {
    if (slots_.empty()) return kNone;
    for (size_t i = Home(key);; i = (i + 1) & (slots_.size() - 1)) {
      if (slots_[i].key == key) return i;
      if (slots_[i].key == 0) return kNone;
    }
  }
  void Insert(uint64_t key, Hit hit) {
    for (size_t i = Home(key);; i = (i + 1) & (slots_.size() - 1)) {
      if (slots_[i].key == 0) {
        slots_[i] = Slot{key, hit};
        ++size_;
        return;
      }
    }
  }
  void Grow() {
    std::vector<Slot> old;
    old.swap(slots_);
    slots_.assign(old.empty() ? 16 : old.size() * 2, Slot{});
    size_ = 0;
    for (const Slot& s : old) {
      if (s.key != 0) Insert(s.key, s.hit);
    }
  }

  std::vector<Slot> slots_;  // a power of two in size, at most half full
  size_t size_ = 0;
};

}  // namespace fw::aggregator
