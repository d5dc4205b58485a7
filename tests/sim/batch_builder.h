// Fills one agent's per-second ProbeBatch in place from the fabric model, allocating nothing once
// the batch has been built the first time.
#pragma once

#include <cstdint>
#include <vector>

#include "fabricwatch.pb.h"
#include "tests/sim/delivery.h"
#include "tests/sim/flows.h"
#include "tests/sim/link_model.h"
#include "tests/sim/topology.h"

namespace fw::sim {

// How results travel: ProbeBatch.columns (what the real agent sends) or one ProbeResult
// sub-message each (the older form, still accepted by the aggregator).
enum class BatchEncoding { kColumns, kResults };

// The number of results a batch carries, in either encoding.
inline int ResultCount(const fabricwatch::v1::ProbeBatch& b) {
  return b.results_size() + b.columns().peer_size();
}

class BatchBuilder {
 public:
  // `bandwidth_slots`: bandwidth results per batch; they rotate over the agent's flows.
  BatchBuilder(const FatTree& tree, const FabricModel& model, int bandwidth_slots,
               BatchEncoding encoding = BatchEncoding::kColumns)
      : tree_(tree), model_(model), bandwidth_slots_(bandwidth_slots), encoding_(encoding) {}

  static constexpr uint64_t kBandwidthBytes = 4 << 20;

  // Writes the results of simulated second `second` (wall time `second_unix_ns`) for `flows` into
  // `batch`: one UDP result per flow, then the bandwidth slots. The first call for a batch builds
  // the static fields (names, ports); later calls rewrite only what changes. `seconds` > 1 (columns
  // only): the batch holds the `seconds` seconds that end with `second`, one block each, as an
  // agent paced to send every `seconds` seconds does. `layout`, when not null, is the caller's key
  // of the flows `batch`'s static fields were built for: they are rebuilt when `flows` differ from
  // them (a list that changes from batch to batch at the same length, as plans with fractional or
  // raised rates give), and the key updated. Without it they are rebuilt only when the row count
  // changes, which is enough for a flow list that never changes.
  void Fill(const std::vector<Flow>& flows, int64_t second, int64_t second_unix_ns, Rng& rng,
            fabricwatch::v1::ProbeBatch& batch, int seconds = 1, uint64_t* layout = nullptr) const;

  // Writes `held` (results an agent held until now, in the order given) into `batch`, each sent at
  // `epoch_ns` + its sent_s, in the builder's encoding; the fields are rewritten whole.
  void FillHeld(const std::vector<HeldResult>& held, int64_t epoch_ns,
                fabricwatch::v1::ProbeBatch& batch) const;

  // The key of `flows`' static fields in a batch of `seconds` blocks (0 is never a key).
  static uint64_t LayoutKey(const std::vector<Flow>& flows, int seconds);

 private:
  void FillResults(const std::vector<Flow>& flows, int64_t second, int64_t second_unix_ns, Rng& rng,
                   fabricwatch::v1::ProbeBatch& batch, bool rebuild) const;
  void FillColumns(const std::vector<Flow>& flows, int64_t second, int64_t second_unix_ns, Rng& rng,
                   fabricwatch::v1::ProbeBatch& batch, int seconds, bool rebuild) const;
  // Builds the name table and the columns that stay fixed for this agent's flows, `seconds`
  // blocks of them.
  void BuildColumns(const std::vector<Flow>& flows, int slots, int seconds,
                    fabricwatch::v1::ProbeColumns& c) const;
  void SetStatic(const Flow& f, fabricwatch::v1::Transport t,
                 fabricwatch::v1::ProbeResult* r) const;

  const FatTree& tree_;
  const FabricModel& model_;
  int bandwidth_slots_;
  BatchEncoding encoding_;
};

}  // namespace fw::sim
