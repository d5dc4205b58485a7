// Walks a batch of probe results source by source, for tables sharded by source node that
// remember where each position of a source's previous batch went.
#pragma once

#include <algorithm>
#include <cstddef>
#include <span>
#include <string_view>
#include <vector>

#include "common/mutex.h"
#include "daemon/aggregator/model/name_interner.h"
#include "daemon/aggregator/model/reported_probe.h"

namespace fw::aggregator {

// `Shard` has `fw::Mutex mu` and `recent`, a map from source NodeId to a std::vector of entries:
// entry k says where result k of the source's previous batch went. Agents send the same rows in
// the same order every second, so checking entry k usually replaces a hash lookup.
//
// Across one batch this holds one shard lock at a time (`recent` is guarded by `mu`),
// gives each result's nodes as ids (interning the names of a result that carries only names),
// and counts the position k in the current source's run. When a run ends, the source's list is
// cut to the run's length. Lives on the stack of one ingest call. The lock is held across calls,
// which Clang's analysis cannot follow: after Enter() the caller states it with
// `shard().mu.AssertHeld()`.
template <typename Shard>
class SourceRuns {
 public:
  using Entry = typename decltype(Shard::recent)::mapped_type::value_type;
  static constexpr size_t kMaxRecentPerSource = 4096;  // results of one batch worth remembering

  SourceRuns(NameInterner& names, std::span<Shard> shards) : names_(names), shards_(shards) {}
  ~SourceRuns() FW_NO_THREAD_SAFETY_ANALYSIS {  // releases the lock Enter() took
    EndRun();
    if (shard_ != nullptr) shard_->mu.Unlock();
  }
  SourceRuns(const SourceRuns&) = delete;
  SourceRuns& operator=(const SourceRuns&) = delete;

  // Moves to result `r`, locking its source's shard if it is another one.
  void Enter(const ReportedProbe& r) FW_NO_THREAD_SAFETY_ANALYSIS {  // keeps a lock: see above
    const bool by_id = r.src_id != kNoNode;
    if (shard_ == nullptr || (by_id ? r.src_id != src_ : r.src_node != last_src_)) {
      EndRun();
      src_ = by_id ? r.src_id : names_.Intern(r.src_node);
      last_src_ = r.src_node;
      Shard& s = shards_[src_ % shards_.size()];
      if (&s != shard_) {
        if (shard_ != nullptr) shard_->mu.Unlock();
        s.mu.Lock();
        shard_ = &s;
      }
      recent_ = &s.recent[src_];
      k_ = 0;
    }
    dst_ = r.dst_id != kNoNode ? r.dst_id : names_.Intern(r.dst_node);
  }
  NodeId src() const { return src_; }
  NodeId dst() const { return dst_; }
  Shard& shard() const { return *shard_; }
  // Where this position went last time, or null; the caller checks that it still fits.
  const Entry* Cached() const { return k_ < recent_->size() ? &(*recent_)[k_] : nullptr; }
  // Where the position `d` ahead of this one went last time, or null: for prefetching only (the
  // current batch may differ there).
  const Entry* Ahead(size_t d) const {
    return k_ + d < recent_->size() ? &(*recent_)[k_ + d] : nullptr;
  }
  // Records where this position went this time.
  void Remember(const Entry& e) {
    if (k_ >= kMaxRecentPerSource) return;
    if (k_ >= recent_->size()) recent_->resize(k_ + 1);
    (*recent_)[k_] = e;
  }
  // The result was recorded: the next one is the next position.
  void Advance() { ++k_; }

 private:
  void EndRun() {
    if (recent_) recent_->resize(std::min(k_, recent_->size()));
  }

  NameInterner& names_;
  std::span<Shard> shards_;
  Shard* shard_ = nullptr;  // its `mu` is held
  std::vector<Entry>* recent_ = nullptr;
  std::string_view last_src_;
  NodeId src_ = kNoNode;
  NodeId dst_ = kNoNode;
  size_t k_ = 0;
};

}  // namespace fw::aggregator
