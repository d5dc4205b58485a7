// How long a UDP probe waits for its echo before it is reported lost, when that follows the flow's
// own round trip: RFC 6298's retransmission timer applied to probes. Shared by the agent's prober
// and the fleet simulator's model of it, so both expire a flow's probes at the same moments.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace fw::net {

// One flow's round-trip estimate (RFC 6298, section 2): srtt and rttvar from every echo, late
// ones included. Unlike a TCP segment, a probe's echo names its sequence number, so an echo that
// arrives after its probe was reported lost is still an unambiguous sample (Karn's rule is not
// needed), and a queue that builds faster than the timeout shrinks is learnt from its first late
// echo. Each loss doubles the next timeout until an echo comes back (section 5.5), so a flow
// whose echoes stopped altogether waits longer and longer, up to the fixed timeout.
class ProbeTimeout {
 public:
  // An echo `rtt_ns` after its probe was sent, in time or late. Non-positive values are ignored.
  void OnEcho(int64_t rtt_ns) {
    if (rtt_ns <= 0) return;
    const double r = static_cast<double>(rtt_ns);
    if (!sampled_) {
      srtt_ = r;
      rttvar_ = r / 2;
      sampled_ = true;
    } else {
      rttvar_ = 0.75 * rttvar_ + 0.25 * std::abs(srtt_ - r);
      srtt_ = 0.875 * srtt_ + 0.125 * r;
    }
    backoff_ = 0;
  }
  // A probe of the flow was reported lost.
  void OnLoss() { backoff_ = static_cast<uint8_t>(std::min<int>(backoff_ + 1, kMaxBackoff)); }

  // The timeout for the flow's next probe: srtt + 4·rttvar, and at least 1.5·srtt (a standing
  // queue whose round trip hardly varies would otherwise leave the timeout within its jitter),
  // at least `floor_ns`, doubled per loss since the last echo, at most `cap_ns` (the flow's fixed
  // timeout). Before its first echo a flow waits `cap_ns`: nothing is known of its round trip.
  // `floor_ns` <= 0 or >= `cap_ns`: `cap_ns`.
  int64_t Next(int64_t floor_ns, int64_t cap_ns) const {
    if (floor_ns <= 0 || floor_ns >= cap_ns || !sampled_) return cap_ns;
    const double rto = std::max(static_cast<double>(floor_ns),
                                srtt_ + std::max(4 * rttvar_, srtt_ / 2)) *
                       static_cast<double>(1u << backoff_);
    return rto >= static_cast<double>(cap_ns) ? cap_ns : static_cast<int64_t>(rto);
  }

  bool sampled() const { return sampled_; }
  double srtt_ns() const { return srtt_; }
  double rttvar_ns() const { return rttvar_; }
  int backoff() const { return backoff_; }

 private:
  static constexpr int kMaxBackoff = 6;  // 64x: past any cap over a floor of 1 ms
  double srtt_ = 0;
  double rttvar_ = 0;
  bool sampled_ = false;
  uint8_t backoff_ = 0;
};

}  // namespace fw::net
