// Fills one agent's per-second ProbeBatch in place from the fabric model, allocating nothing once
// the batch has been built the first time.
#pragma once

#include <cstdint>
#include <vector>

#include "fabricwatch.pb.h"
#include "tests/sim/flows.h"
#include "tests/sim/link_model.h"
#include "tests/sim/topology.h"

namespace fw::sim {

class BatchBuilder {
 public:
  // `bandwidth_slots`: bandwidth results per batch; they rotate over the agent's flows.
  BatchBuilder(const FatTree& tree, const FabricModel& model, int bandwidth_slots)
      : tree_(tree), model_(model), bandwidth_slots_(bandwidth_slots) {}

  static constexpr uint64_t kBandwidthBytes = 4 << 20;

  // Writes the results of simulated second `second` (wall time `second_unix_ns`) for `flows` into
  // `batch`: one UDP result per flow, then the bandwidth slots. The first call for a batch builds
  // the static fields (names, ports); later calls rewrite only what changes.
  void Fill(const std::vector<Flow>& flows, int64_t second, int64_t second_unix_ns, Rng& rng,
            fabricwatch::v1::ProbeBatch& batch) const;

 private:
  void SetStatic(const Flow& f, fabricwatch::v1::Transport t,
                 fabricwatch::v1::ProbeResult* r) const;

  const FatTree& tree_;
  const FabricModel& model_;
  int bandwidth_slots_;
};

}  // namespace fw::sim
