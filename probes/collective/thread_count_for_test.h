// Test helper: how many threads this process has (entries in /proc/self/task), to check that a
// probe leaves none behind.
#pragma once

#include <chrono>
#include <cstddef>
#include <filesystem>
#include <thread>

namespace fw::collective::testing {

inline size_t ThreadCount() {
  size_t n = 0;
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/task")) {
    (void)e;
    ++n;
  }
  return n;
}

// The thread count once exiting threads are gone, waiting up to 2 s for it to reach `expected`.
// pthread_join returns when the kernel clears the thread's tid, which is before the task leaves
// /proc/self/task: right after a join the count can still include the joined thread. A thread
// that is really left behind keeps the count above `expected` for the whole wait.
inline size_t ThreadCountSettledAt(size_t expected) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  size_t n = ThreadCount();
  while (n > expected && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    n = ThreadCount();
  }
  return n;
}

}  // namespace fw::collective::testing
