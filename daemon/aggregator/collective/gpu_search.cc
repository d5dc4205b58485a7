// GPU pair search inside one node (see gpu_search.h).
#include "daemon/aggregator/collective/gpu_search.h"

#include <algorithm>

namespace fw::aggregator::collective {

GpuSearch::GpuSearch(int gpus, double measured, double expected, double slow_ratio)
    : gpus_(gpus),
      measured_(measured),
      expected_(expected),
      slow_ratio_(slow_ratio),
      busbw_(static_cast<size_t>(std::max(gpus, 0)), 0),
      failed_(static_cast<size_t>(std::max(gpus, 0)), false) {
  if (!Applies(gpus)) {
    results_.push_back({"", "slow GPUs or GPU links inside the node", measured, expected});
    return;
  }
  for (int i = 0; i < gpus; ++i) {
    pending_.push_back({static_cast<uint64_t>(i + 1),
                        {static_cast<uint32_t>(i), static_cast<uint32_t>((i + 1) % gpus)}});
  }
}

void GpuSearch::OnResult(uint64_t run_id, double busbw_bytes_per_s, bool failed) {
  auto it =
      std::find_if(pending_.begin(), pending_.end(), [&](const Run& r) { return r.id == run_id; });
  if (it == pending_.end()) return;
  const size_t pair = static_cast<size_t>(run_id - 1);
  busbw_[pair] = failed ? 0 : busbw_bytes_per_s;
  failed_[pair] = failed;
  pending_.erase(it);
  if (pending_.empty()) Resolve();
}

void GpuSearch::Resolve() {
  std::vector<double> ok;
  for (size_t i = 0; i < busbw_.size(); ++i) {
    if (!failed_[i]) ok.push_back(busbw_[i]);
  }
  if (ok.size() * 2 < busbw_.size()) {
    // Most pairs failed: nothing to compare with; the node is what is known.
    results_.push_back({"", "most of its GPU pairs failed to run", measured_, expected_});
    return;
  }
  std::sort(ok.begin(), ok.end());
  const double reference = ok.empty() ? 0 : ok[ok.size() / 2];
  const size_t g = busbw_.size();
  std::vector<bool> slow(g);
  for (size_t i = 0; i < g; ++i) slow[i] = failed_[i] || busbw_[i] < slow_ratio_ * reference;
  auto gpu = [](size_t i) { return "GPU" + std::to_string(i); };
  // Pair i joins GPU i and GPU i+1; GPU k is in pairs k-1 and k.
  std::vector<bool> explained(g);
  for (size_t k = 0; k < g; ++k) {
    const size_t before = (k + g - 1) % g;
    if (slow[before] && slow[k]) {
      results_.push_back({gpu(k), "slow GPU", std::min(busbw_[before], busbw_[k]), reference});
      explained[before] = explained[k] = true;
    }
  }
  for (size_t i = 0; i < g; ++i) {
    if (!slow[i] || explained[i]) continue;
    const std::string a = gpu(i), b = gpu((i + 1) % g);
    results_.push_back({a + "-" + b, "slow link between " + a + " and " + b + " (NVLink or PCIe)",
                        busbw_[i], reference});
  }
  if (results_.empty()) {
    results_.push_back({"",
                        "slow only with all its GPUs together (host bridge, PCIe switch or "
                        "NVSwitch)",
                        measured_, expected_});
  }
}

}  // namespace fw::aggregator::collective
