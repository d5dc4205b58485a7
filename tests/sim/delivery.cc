#include "tests/sim/delivery.h"

#include <algorithm>
#include <cmath>

namespace fw::sim {

int SendInstants(double rate, double phase, double from, double to, std::vector<double>* out) {
  if (!(rate > 0) || !(to > from)) return 0;
  // j is the first integer with (j + phase) / rate >= from, and the last with it < to.
  const auto first = static_cast<int64_t>(std::ceil(from * rate - phase));
  const auto end = static_cast<int64_t>(std::ceil(to * rate - phase));
  int n = 0;
  for (int64_t j = first; j < end; ++j) {
    out->push_back((static_cast<double>(j) + phase) / rate);
    ++n;
  }
  return n;
}

HeldResult LatencyResult(const Flow* flow, double sent_s, bool lost, uint64_t rtt_ns,
                         double timeout_s, bool raised) {
  const double rtt_s = static_cast<double>(rtt_ns) * 1e-9;
  HeldResult h;
  h.flow = flow;
  h.sent_s = sent_s;
  h.lost = lost || rtt_s >= timeout_s;
  h.rtt_ns = h.lost ? 0 : rtt_ns;
  h.ready_s = sent_s + (h.lost ? timeout_s : rtt_s);
  h.urgent = h.lost || raised;
  return h;
}

bool Outbox::Due(double now_s, bool regular) const {
  if (regular) return next_ready_s_ <= now_s;
  return next_urgent_s_ <= now_s && now_s - last_batch_s_ >= kMinUrgentGapS - 1e-9;
}

void Outbox::TakeReady(double now_s, std::vector<HeldResult>* out) {
  out->clear();
  auto keep = std::stable_partition(held_.begin(), held_.end(),
                                    [now_s](const HeldResult& r) { return r.ready_s > now_s; });
  out->assign(keep, held_.end());
  held_.erase(keep, held_.end());
  std::stable_sort(out->begin(), out->end(), [](const HeldResult& a, const HeldResult& b) {
    return a.sent_s < b.sent_s;
  });
  next_ready_s_ = next_urgent_s_ = kNever;
  for (const HeldResult& r : held_) Note(r);
}

void Outbox::Return(const std::vector<HeldResult>& taken) {
  for (const HeldResult& r : taken) {
    held_.push_back(r);
    Note(r);
  }
}

}  // namespace fw::sim
