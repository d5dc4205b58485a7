// When, and for how long, the UDP prober spins for replies after a send slot instead of sleeping.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

namespace fw::net {

struct BusyPollOptions {
  // The window to ask for when turning busy polling on: about 3 loopback round trips on a VM.
  static constexpr int64_t kSuggestedWindowNs = 300'000;
  // Longest window, and the window before any round trip is known. 0 (the default) disables busy
  // polling: the prober then sleeps right after each send slot, as `sockperf ping-pong` sleeps in
  // recvfrom, so the reported round trip includes one wakeup of the prober, like sockperf's.
  int64_t max_window_ns = 0;
  // The window is this multiple of the median of the recent user-space round trips (capped).
  double rtt_multiple = 2.0;
  // Spinning is held to this share of one core on average, whatever the plan's rate and slots:
  // spin time is paid from a credit that refills at cpu_share seconds per second and holds at most
  // one second's worth. A slot the credit cannot pay a whole window for is not busy-polled.
  double cpu_share = 0.003;
};

// The window arithmetic of busy polling, kept apart from the sockets so that it can be tested
// exactly. Times are CLOCK_MONOTONIC nanoseconds passed in by the caller. Not thread-safe: the
// prober thread owns it.
class BusyPollPolicy {
 public:
  static constexpr size_t kRecentRtts = 32;

  explicit BusyPollPolicy(const BusyPollOptions& options, int64_t now_ns);

  bool enabled() const { return options_.max_window_ns > 0 && options_.cpu_share > 0; }
  // Records one user-space round trip (probe handed to the kernel -> reply read by the prober).
  void RecordRtt(int64_t rtt_ns);
  // rtt_multiple x the median of the last kRecentRtts round trips, at most max_window_ns; the
  // maximum while none is known. 0 when disabled.
  int64_t Window() const;
  // The window to spin for a slot starting at `now_ns`, or 0 when the spin credit cannot pay the
  // whole window (or busy polling is disabled). Charge() the time actually spun afterwards.
  int64_t Admit(int64_t now_ns);
  void Charge(int64_t spun_ns);
  // Spin credit left, in nanoseconds (for tests and stats).
  double credit_ns() const { return credit_ns_; }

 private:
  void Refill(int64_t now_ns);

  const BusyPollOptions options_;
  const double max_credit_ns_;
  double credit_ns_;
  int64_t last_refill_ns_;
  std::array<int64_t, kRecentRtts> recent_{};
  size_t recent_count_ = 0;
  size_t recent_next_ = 0;
};

}  // namespace fw::net
