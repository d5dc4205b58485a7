// Mutexes the compiler can check: std::mutex and std::shared_mutex with Clang thread-safety
// annotations (common/thread_annotations.h), their scoped locks, and a condition variable.
//
// std::lock_guard and std::unique_lock carry no annotations, so state guarded by an fw::Mutex is
// locked with fw::MutexLock (or the reader/writer locks of fw::SharedMutex). Waits take the mutex
// itself and are written as `while (!ready_) cv_.Wait(mu_);`: a predicate lambda would be checked
// as a separate function that holds no lock.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <shared_mutex>

#include "common/thread_annotations.h"

namespace fw {

class FW_CAPABILITY("mutex") Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void Lock() FW_ACQUIRE() { mu_.lock(); }
  void Unlock() FW_RELEASE() { mu_.unlock(); }
  bool TryLock() FW_TRY_ACQUIRE(true) { return mu_.try_lock(); }
  // Tells the analysis the caller holds this mutex where it cannot see it (e.g. a callback that
  // runs under the lock); checks nothing at run time.
  void AssertHeld() const FW_ASSERT_CAPABILITY(this) {}

 private:
  friend class CondVar;
  std::mutex mu_;
};

// Holds a Mutex for its scope. Unlock()/Lock() release and retake it inside the scope, for a
// section that must run unlocked (a callback, I/O); the destructor releases only if held.
class FW_SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex& mu) FW_ACQUIRE(mu) : mu_(mu) { mu_.Lock(); }
  ~MutexLock() FW_RELEASE() {
    if (held_) mu_.Unlock();
  }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

  void Unlock() FW_RELEASE() {
    mu_.Unlock();
    held_ = false;
  }
  void Lock() FW_ACQUIRE() {
    mu_.Lock();
    held_ = true;
  }

 private:
  Mutex& mu_;
  bool held_ = true;
};

class FW_CAPABILITY("shared mutex") SharedMutex {
 public:
  SharedMutex() = default;
  SharedMutex(const SharedMutex&) = delete;
  SharedMutex& operator=(const SharedMutex&) = delete;

  void Lock() FW_ACQUIRE() { mu_.lock(); }
  void Unlock() FW_RELEASE() { mu_.unlock(); }
  bool TryLock() FW_TRY_ACQUIRE(true) { return mu_.try_lock(); }
  void LockShared() FW_ACQUIRE_SHARED() { mu_.lock_shared(); }
  void UnlockShared() FW_RELEASE_SHARED() { mu_.unlock_shared(); }

 private:
  std::shared_mutex mu_;
};

// Holds a SharedMutex exclusively for its scope.
class FW_SCOPED_CAPABILITY WriterLock {
 public:
  explicit WriterLock(SharedMutex& mu) FW_ACQUIRE(mu) : mu_(mu) { mu_.Lock(); }
  ~WriterLock() FW_RELEASE() { mu_.Unlock(); }
  WriterLock(const WriterLock&) = delete;
  WriterLock& operator=(const WriterLock&) = delete;

 private:
  SharedMutex& mu_;
};

// Holds a SharedMutex shared for its scope.
class FW_SCOPED_CAPABILITY ReaderLock {
 public:
  explicit ReaderLock(SharedMutex& mu) FW_ACQUIRE_SHARED(mu) : mu_(mu) { mu_.LockShared(); }
  ~ReaderLock() FW_RELEASE() { mu_.UnlockShared(); }
  ReaderLock(const ReaderLock&) = delete;
  ReaderLock& operator=(const ReaderLock&) = delete;

 private:
  SharedMutex& mu_;
};

// A condition variable over fw::Mutex. Every wait may wake spuriously: loop on the condition.
class CondVar {
 public:
  // Releases `mu` while blocked and holds it again on return.
  void Wait(Mutex& mu) FW_REQUIRES(mu) {
    std::unique_lock<std::mutex> lock(mu.mu_, std::adopt_lock);
    cv_.wait(lock);
    lock.release();
  }
  // As Wait, up to `timeout`; false when it timed out.
  template <class Rep, class Period>
  bool WaitFor(Mutex& mu, std::chrono::duration<Rep, Period> timeout) FW_REQUIRES(mu) {
    std::unique_lock<std::mutex> lock(mu.mu_, std::adopt_lock);
    const bool woken = cv_.wait_for(lock, timeout) == std::cv_status::no_timeout;
    lock.release();
    return woken;
  }
  // As Wait, until `deadline`; false when it passed.
  template <class ClockT, class Duration>
  bool WaitUntil(Mutex& mu, std::chrono::time_point<ClockT, Duration> deadline) FW_REQUIRES(mu) {
    std::unique_lock<std::mutex> lock(mu.mu_, std::adopt_lock);
    const bool woken = cv_.wait_until(lock, deadline) == std::cv_status::no_timeout;
    lock.release();
    return woken;
  }
  void NotifyOne() { cv_.notify_one(); }
  void NotifyAll() { cv_.notify_all(); }

 private:
  std::condition_variable cv_;
};

}  // namespace fw
