// The hand-over of deferred acks from the threads that store batches to the one thread that makes
// them durable (group commit, docs/durability.md).
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "common/mutex.h"

namespace fw::aggregator {

// Producers Push items; one committer thread loops on TakeAll (blocks until there is work),
// commits, then SleepUntil its next commit may start. A Push wakes the committer only when it is
// blocked in TakeAll: while it commits or sleeps out its interval an item simply waits for the next
// TakeAll. So thousands of pushes a second cost about one wakeup per commit, not one per push (a
// wakeup per batch was a futex wake and a lock handoff on the ingest path, and a context switch on
// the committer that found nothing to do yet). Thread-safe.
template <typename T>
class GroupCommitQueue {
 public:
  // Adds `item` for the next commit; false once Stop() was called (the caller must then deal
  // with the item itself).
  bool Push(T item) FW_EXCLUDES(mu_) {
    bool wake = false;
    {
      MutexLock lock(mu_);
      if (stopped_) return false;
      items_.push_back(std::move(item));
      if (waiting_) {
        waiting_ = false;  // one wakeup per wait, however many pushes arrive before it runs
        wake = true;
        ++wakeups_;
      }
    }
    if (wake) cv_.NotifyOne();
    return true;
  }

  // Committer: blocks until an item is pending or Stop() was called, then moves every pending item
  // into `out` (its previous contents are dropped). Returns whether Stop() was called.
  bool TakeAll(std::vector<T>& out) FW_EXCLUDES(mu_) {
    return TakeAll(out, std::optional<std::chrono::steady_clock::time_point>());
  }

  // The same, but also returns at `deadline` (when set), with `out` possibly empty: the committer
  // has other work due then (held acks).
  bool TakeAll(std::vector<T>& out, std::optional<std::chrono::steady_clock::time_point> deadline)
      FW_EXCLUDES(mu_) {
    out.clear();
    MutexLock lock(mu_);
    while (!stopped_ && items_.empty()) {
      waiting_ = true;
      if (!deadline) {
        cv_.Wait(mu_);
      } else if (!cv_.WaitUntil(mu_, *deadline)) {
        break;
      }
    }
    waiting_ = false;
    out.swap(items_);
    return stopped_;
  }

  // Committer: sleeps until `deadline` or Stop(), whichever comes first; pushes do not end it.
  // Returns whether Stop() was called.
  template <typename Clock, typename Duration>
  bool SleepUntil(std::chrono::time_point<Clock, Duration> deadline) FW_EXCLUDES(mu_) {
    MutexLock lock(mu_);
    while (!stopped_) {
      if (!cv_.WaitUntil(mu_, deadline)) break;
    }
    return stopped_;
  }

  bool Empty() const FW_EXCLUDES(mu_) {
    MutexLock lock(mu_);
    return items_.empty();
  }

  bool Stopped() const FW_EXCLUDES(mu_) {
    MutexLock lock(mu_);
    return stopped_;
  }

  // Refuses later pushes and ends every wait; items already pushed stay for TakeAll.
  void Stop() FW_EXCLUDES(mu_) {
    {
      MutexLock lock(mu_);
      stopped_ = true;
    }
    cv_.NotifyAll();
  }

  // Whether the committer is blocked in TakeAll (for tests).
  bool CommitterWaiting() const FW_EXCLUDES(mu_) {
    MutexLock lock(mu_);
    return waiting_;
  }

  // How many times Push woke the committer.
  uint64_t wakeups() const FW_EXCLUDES(mu_) {
    MutexLock lock(mu_);
    return wakeups_;
  }

 private:
  mutable Mutex mu_;
  CondVar cv_;
  std::vector<T> items_ FW_GUARDED_BY(mu_);
  bool waiting_ FW_GUARDED_BY(mu_) = false;  // the committer is blocked in TakeAll
  bool stopped_ FW_GUARDED_BY(mu_) = false;
  uint64_t wakeups_ FW_GUARDED_BY(mu_) = 0;
};

}  // namespace fw::aggregator
