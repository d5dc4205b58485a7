// Real clock implementation.
#include "common/clock.h"

#include <time.h>

#include <string>

namespace fw {

namespace {
int64_t Read(clockid_t id) {
  timespec ts{};
  clock_gettime(id, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}
}  // namespace

int64_t RealClock::MonotonicNanos() const { return Read(CLOCK_MONOTONIC); }
int64_t RealClock::WallNanos() const { return Read(CLOCK_REALTIME); }

RealClock& RealClock::Get() {
  static RealClock clock;
  return clock;
}

std::string FormatRfc3339(int64_t wall_ns) {
  time_t secs = static_cast<time_t>(wall_ns / 1'000'000'000);
  tm utc{};
  gmtime_r(&secs, &utc);
  char buf[32];
  strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &utc);
  return buf;
}

}  // namespace fw
