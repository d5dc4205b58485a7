// GroupCommitQueue: a push wakes the committer only while it waits for work; nothing pushed is
// lost across waits, sleeps and Stop().
#include "daemon/aggregator/ingest/group_commit_queue.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

namespace fw::aggregator {
namespace {

using Clock = std::chrono::steady_clock;

TEST(GroupCommitQueueTest, PushesDuringTheIntervalWakeNobodyAndWaitForTheNextTake) {
  GroupCommitQueue<int> q;
  std::vector<int> taken;
  std::atomic<bool> took_first{false};
  std::atomic<bool> sleeping{false};
  std::atomic<bool> pushed_all{false};
  std::vector<int> second;
  std::thread committer([&] {
    EXPECT_FALSE(q.TakeAll(taken));  // blocks: nothing pushed yet
    took_first = true;
    sleeping = true;
    // Its interval between commits, stretched until every push is in (a loaded host may take long).
    while (!pushed_all) EXPECT_FALSE(q.SleepUntil(Clock::now() + std::chrono::milliseconds(20)));
    EXPECT_FALSE(q.TakeAll(second));  // what arrived during the sleep: returns at once
  });
  // The committer blocks in TakeAll: that wait is what a push must end.
  while (!q.CommitterWaiting()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  ASSERT_TRUE(q.Push(1));
  while (!took_first) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_EQ(q.wakeups(), 1u);
  while (!sleeping) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  for (int i = 0; i < 1000; ++i) EXPECT_TRUE(q.Push(100 + i));
  pushed_all = true;
  committer.join();
  // One wakeup for the first take; the thousand pushes during the sleep woke nobody.
  EXPECT_EQ(q.wakeups(), 1u);
  EXPECT_EQ(taken, std::vector<int>{1});
  ASSERT_EQ(second.size(), 1000u);
  for (int i = 0; i < 1000; ++i) EXPECT_EQ(second[static_cast<size_t>(i)], 100 + i);
  EXPECT_TRUE(q.Empty());
}

TEST(GroupCommitQueueTest, StopEndsTheWaitsKeepsWhatWasPushedAndRefusesMore) {
  GroupCommitQueue<int> q;
  std::vector<int> out;
  std::thread sleeper([&] {
    const auto t0 = Clock::now();
    EXPECT_TRUE(q.SleepUntil(t0 + std::chrono::seconds(30)));
    EXPECT_LT(Clock::now() - t0, std::chrono::seconds(10));
  });
  ASSERT_TRUE(q.Push(7));
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  q.Stop();
  sleeper.join();
  EXPECT_TRUE(q.Stopped());
  EXPECT_FALSE(q.Push(8));      // the caller answers it itself
  EXPECT_TRUE(q.TakeAll(out));  // stopped: does not block, and hands over what was pushed before
  EXPECT_EQ(out, std::vector<int>{7});
  EXPECT_TRUE(q.TakeAll(out));
  EXPECT_TRUE(out.empty());

  GroupCommitQueue<int> idle;
  std::thread taker([&] {
    std::vector<int> none;
    EXPECT_TRUE(idle.TakeAll(none));  // a blocked take ends with Stop
    EXPECT_TRUE(none.empty());
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  idle.Stop();
  taker.join();
}

}  // namespace
}  // namespace fw::aggregator
