// Backoff schedule.
#include "common/backoff.h"

#include <algorithm>
#include <cmath>

namespace fw {

double Backoff::Next() {
  double ceiling = std::min(max_, base_ * std::ldexp(1.0, std::min(attempt_, 30)));
  ++attempt_;
  std::uniform_real_distribution<double> jitter(ceiling / 2, ceiling);
  return jitter(rng_);
}

}  // namespace fw
