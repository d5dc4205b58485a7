// fw::Mutex, the scoped locks and CondVar behave as the std types they wrap.
#include "common/mutex.h"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

namespace fw {
namespace {

class Counter {
 public:
  void Add() FW_EXCLUDES(mu_) {
    MutexLock lock(mu_);
    ++value_;
    cv_.NotifyAll();
  }
  // Waits until the count reaches `n` or `timeout` passes; the count seen.
  int WaitFor(int n, std::chrono::milliseconds timeout) FW_EXCLUDES(mu_) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    MutexLock lock(mu_);
    while (value_ < n && cv_.WaitUntil(mu_, deadline)) {
    }
    return value_;
  }
  int ReadUnlockRelock() FW_EXCLUDES(mu_) {
    MutexLock lock(mu_);
    const int before = value_;
    lock.Unlock();
    Add();  // takes mu_ itself: proves Unlock released it
    lock.Lock();
    return value_ - before;
  }

 private:
  Mutex mu_;
  CondVar cv_;
  int value_ FW_GUARDED_BY(mu_) = 0;
};

TEST(MutexTest, ThreadsCountEveryIncrement) {
  Counter c;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 1000; ++i) c.Add();
    });
  }
  EXPECT_EQ(c.WaitFor(4000, std::chrono::seconds(60)), 4000);
  for (auto& t : threads) t.join();
}

TEST(MutexTest, WaitTimesOutWithoutNotify) {
  Counter c;
  EXPECT_EQ(c.WaitFor(1, std::chrono::milliseconds(20)), 0);
}

TEST(MutexTest, ScopedLockReleasesAndRetakes) {
  Counter c;
  EXPECT_EQ(c.ReadUnlockRelock(), 1);
}

TEST(MutexTest, SharedMutexAdmitsReadersTogether) {
  SharedMutex mu;
  ReaderLock a(mu);
  bool second_reader = false;
  bool writer = true;
  std::thread t([&] {
    ReaderLock b(mu);  // would block forever if readers excluded each other
    second_reader = true;
  });
  t.join();
  std::thread w([&] {
    if (mu.TryLock()) {
      mu.Unlock();
    } else {
      writer = false;
    }
  });
  w.join();
  EXPECT_TRUE(second_reader);
  EXPECT_FALSE(writer);
}

TEST(MutexTest, TryLockFailsWhileHeld) {
  Mutex mu;
  MutexLock lock(mu);
  bool got = true;
  std::thread t([&] {
    if (mu.TryLock()) {
      mu.Unlock();
    } else {
      got = false;
    }
  });
  t.join();
  EXPECT_FALSE(got);
}

}  // namespace
}  // namespace fw
