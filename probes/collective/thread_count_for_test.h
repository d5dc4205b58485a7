// Test helper: how many threads this process has (entries in /proc/self/task), to check that a
// probe leaves none behind.
#pragma once

#include <cstddef>
#include <filesystem>

namespace fw::collective::testing {

inline size_t ThreadCount() {
  size_t n = 0;
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/task")) {
    (void)e;
    ++n;
  }
  return n;
}

}  // namespace fw::collective::testing
