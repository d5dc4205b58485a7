// Token buckets on the injected Clock: responder rate limits and the agent's probe budget.
#pragma once

#include <cstdint>

#include "common/clock.h"
#include "common/mutex.h"

namespace fw::net {

// Tokens refill continuously at `rate_per_s` up to `burst`; a bucket starts full.
// Not thread-safe (the owner serializes); cheap enough to keep one per source address.
class TokenBucket {
 public:
  TokenBucket(const Clock& clock, double rate_per_s, double burst);

  // Takes `n` tokens if all are available now; otherwise takes nothing and returns false.
  bool TryTake(double n = 1.0);
  // Tokens available now.
  double Available();
  // Nanoseconds until `n` tokens are available (0 if now; -1 if `n` exceeds the burst).
  int64_t NanosUntil(double n);
  // Changes the rate and burst, keeping the tokens (clamped to the new burst).
  void Reconfigure(double rate_per_s, double burst);
  // True when the bucket is full: it holds no state a fresh bucket would not.
  bool Full();

  double rate_per_s() const { return rate_per_s_; }
  double burst() const { return burst_; }

 private:
  void Refill();

  const Clock& clock_;
  double rate_per_s_;
  double burst_;
  double tokens_;
  int64_t last_ns_;
};

// The agent's total probe budget in packets/s and bytes/s. A probe is admitted only if both
// buckets can pay for it, and then pays both. Thread-safe: every prober of an agent shares one.
class ProbeBudget {
 public:
  ProbeBudget(const Clock& clock, double packets_per_s, double bytes_per_s,
              double burst_seconds = 1.0);

  bool TryConsume(double packets, double bytes);
  void Reconfigure(double packets_per_s, double bytes_per_s, double burst_seconds = 1.0);
  uint64_t rejected() const;

 private:
  mutable Mutex mu_;
  TokenBucket packets_ FW_GUARDED_BY(mu_);
  TokenBucket bytes_ FW_GUARDED_BY(mu_);
  uint64_t rejected_ FW_GUARDED_BY(mu_) = 0;
};

}  // namespace fw::net
