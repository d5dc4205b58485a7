// Busy-poll window arithmetic: a median of recent round trips and a spin-time credit.
#include "probes/net/busy_poll.h"

#include <algorithm>

namespace fw::net {

BusyPollPolicy::BusyPollPolicy(const BusyPollOptions& options, int64_t now_ns)
    : options_(options),
      max_credit_ns_(std::max(0.0, options.cpu_share) * 1e9),
      credit_ns_(max_credit_ns_),
      last_refill_ns_(now_ns) {}

void BusyPollPolicy::RecordRtt(int64_t rtt_ns) {
  if (rtt_ns <= 0) return;
  recent_[recent_next_] = rtt_ns;
  recent_next_ = (recent_next_ + 1) % kRecentRtts;
  recent_count_ = std::min(recent_count_ + 1, kRecentRtts);
}

int64_t BusyPollPolicy::Window() const {
  if (!enabled()) return 0;
  if (recent_count_ == 0) return options_.max_window_ns;
  std::array<int64_t, kRecentRtts> sorted = recent_;
  auto mid = sorted.begin() + recent_count_ / 2;
  std::nth_element(sorted.begin(), mid, sorted.begin() + recent_count_);
  const double window = options_.rtt_multiple * static_cast<double>(*mid);
  return std::clamp<int64_t>(static_cast<int64_t>(window), 1, options_.max_window_ns);
}

void BusyPollPolicy::Refill(int64_t now_ns) {
  if (now_ns <= last_refill_ns_) return;
  credit_ns_ =
      std::min(max_credit_ns_,
               credit_ns_ + options_.cpu_share * static_cast<double>(now_ns - last_refill_ns_));
  last_refill_ns_ = now_ns;
}

int64_t BusyPollPolicy::Admit(int64_t now_ns) {
  const int64_t window = Window();
  if (window == 0) return 0;
  Refill(now_ns);
  return credit_ns_ >= static_cast<double>(window) ? window : 0;
}

void BusyPollPolicy::Charge(int64_t spun_ns) {
  credit_ns_ -= static_cast<double>(std::max<int64_t>(0, spun_ns));
}

}  // namespace fw::net
