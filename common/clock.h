// Time enters through this seam, so analysis and backoff run in simulated time in tests.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>

namespace fw {

class Clock {
 public:
  virtual ~Clock() = default;
  // CLOCK_MONOTONIC nanoseconds. Use for intervals and deadlines; never compare across hosts.
  virtual int64_t MonotonicNanos() const = 0;
  // Wall time in nanoseconds since the Unix epoch. Use only for timestamps shown to people.
  virtual int64_t WallNanos() const = 0;

  double MonotonicSeconds() const { return static_cast<double>(MonotonicNanos()) * 1e-9; }
};

// The real clock. Thread-safe.
class RealClock final : public Clock {
 public:
  int64_t MonotonicNanos() const override;
  int64_t WallNanos() const override;
  // A process-wide instance.
  static RealClock& Get();
};

// A clock that moves only when told. Thread-safe.
class FakeClock final : public Clock {
 public:
  explicit FakeClock(int64_t start_mono_ns = 1'000'000'000, int64_t start_wall_ns = 1'700'000'000'000'000'000)
      : mono_(start_mono_ns), wall_(start_wall_ns) {}
  int64_t MonotonicNanos() const override { return mono_.load(); }
  int64_t WallNanos() const override { return wall_.load(); }
  void Advance(std::chrono::nanoseconds d) {
    mono_ += d.count();
    wall_ += d.count();
  }

 private:
  std::atomic<int64_t> mono_;
  std::atomic<int64_t> wall_;
};

// RFC3339 with seconds precision, UTC: "2026-12-02T15:53:12Z".
std::string FormatRfc3339(int64_t wall_ns);

}  // namespace fw
