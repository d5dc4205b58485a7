// Where inside one node its GPUs' group is slow. A slow intra-node group (every GPU of the node in
// one NCCL all-reduce) is rerun as GPU pairs along the ring of device indices, (0,1), (1,2), ...,
// (G-1,0), and the pairs are compared with each other (their median busbw is the reference):
// a GPU in two slow pairs is the culprit; a slow pair whose neighbours are fine is the link
// between its two GPUs (NVLink or PCIe); no slow pair means the node is slow only with all its
// GPUs together (host bridge, PCIe switch, NVSwitch), and the node is the culprit. Pure logic.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace fw::aggregator::collective {

class GpuSearch {
 public:
  struct Run {
    uint64_t id = 0;
    std::vector<uint32_t> devices;  // CUDA device indices on the node
  };
  struct Result {
    std::string gpu;    // "GPU3", "GPU1-GPU2" (the link between two), or empty: the node
    std::string cause;  // "slow GPU", "slow link between GPU1 and GPU2", "slow only with all ..."
    double measured_busbw = 0;  // the culprit's pairs' median (the node: the slow group's)
    double expected_busbw = 0;  // the pairs' median (the node: the group's expectation)
  };

  // `gpus` >= 3 (with two, the pair is the group itself: see Applies).
  GpuSearch(int gpus, double measured, double expected, double slow_ratio = 0.90);
  static bool Applies(int gpus) { return gpus >= 3; }

  const std::vector<Run>& pending() const { return pending_; }
  void OnResult(uint64_t run_id, double busbw_bytes_per_s, bool failed);
  bool done() const { return pending_.empty(); }
  // Once done: the GPUs, GPU links or (alone) the node.
  const std::vector<Result>& results() const { return results_; }

 private:
  void Resolve();

  const int gpus_;
  const double measured_;
  const double expected_;
  const double slow_ratio_;
  std::vector<Run> pending_;
  std::vector<double> busbw_;  // by pair (i, i+1 mod G)
  std::vector<bool> failed_;
  std::vector<Result> results_;
};

}  // namespace fw::aggregator::collective
