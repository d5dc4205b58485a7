// Token bucket arithmetic.
#include "probes/net/token_bucket.h"

#include <algorithm>
#include <cmath>

namespace fw::net {

TokenBucket::TokenBucket(const Clock& clock, double rate_per_s, double burst)
    : clock_(clock),
      rate_per_s_(std::max(0.0, rate_per_s)),
      burst_(std::max(0.0, burst)),
      tokens_(burst_),
      last_ns_(clock.MonotonicNanos()) {}

void TokenBucket::Refill() {
  int64_t now = clock_.MonotonicNanos();
  if (now > last_ns_) {
    tokens_ = std::min(burst_, tokens_ + rate_per_s_ * static_cast<double>(now - last_ns_) * 1e-9);
    last_ns_ = now;
  }
}

bool TokenBucket::TryTake(double n) {
  Refill();
  if (tokens_ + 1e-9 < n) return false;
  tokens_ -= n;
  return true;
}

double TokenBucket::Available() {
  Refill();
  return tokens_;
}

int64_t TokenBucket::NanosUntil(double n) {
  if (n > burst_) return -1;
  Refill();
  if (tokens_ >= n) return 0;
  if (rate_per_s_ <= 0) return -1;
  return static_cast<int64_t>(std::ceil((n - tokens_) / rate_per_s_ * 1e9));
}

void TokenBucket::Reconfigure(double rate_per_s, double burst) {
  Refill();
  rate_per_s_ = std::max(0.0, rate_per_s);
  burst_ = std::max(0.0, burst);
  tokens_ = std::min(tokens_, burst_);
}

bool TokenBucket::Full() { return Available() >= burst_; }

ProbeBudget::ProbeBudget(const Clock& clock, double packets_per_s, double bytes_per_s,
                         double burst_seconds)
    : packets_(clock, packets_per_s, packets_per_s * burst_seconds),
      bytes_(clock, bytes_per_s, bytes_per_s * burst_seconds) {}

bool ProbeBudget::TryConsume(double packets, double bytes) {
  MutexLock lock(mu_);
  if (packets_.Available() + 1e-9 < packets || bytes_.Available() + 1e-9 < bytes) {
    ++rejected_;
    return false;
  }
  packets_.TryTake(packets);
  bytes_.TryTake(bytes);
  return true;
}

void ProbeBudget::Reconfigure(double packets_per_s, double bytes_per_s, double burst_seconds) {
  MutexLock lock(mu_);
  packets_.Reconfigure(packets_per_s, packets_per_s * burst_seconds);
  bytes_.Reconfigure(bytes_per_s, bytes_per_s * burst_seconds);
}

uint64_t ProbeBudget::rejected() const {
  MutexLock lock(mu_);
  return rejected_;
}

}  // namespace fw::net
