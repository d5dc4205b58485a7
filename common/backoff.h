// Jittered, bounded exponential backoff for reconnects.
#pragma once

#include <cstdint>
#include <random>

namespace fw {

// Delay n (from 0) is drawn uniformly from [base*2^n / 2, base*2^n], capped at `max` ("equal jitter"),
// so a fleet that lost its aggregator at once does not reconnect in lockstep, yet each agent still
// retries within a known bound. Reset() after a connection that stayed up.
class Backoff {
 public:
  Backoff(double base_s, double max_s, uint64_t seed) : base_(base_s), max_(max_s), rng_(seed) {}
  // The next delay in seconds.
  double Next();
  void Reset() { attempt_ = 0; }
  int attempt() const { return attempt_; }

 private:
  double base_;
  double max_;
  int attempt_ = 0;
  std::mt19937_64 rng_;
};

}  // namespace fw
