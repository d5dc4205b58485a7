// Converts the node-checks library's results into the wire messages the agent sends.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "daemon/agent/node/node_metrics.h"
#include "fabricwatch.pb.h"

namespace fw::agent {

fabricwatch::v1::Inventory InventoryToProto(const NodeInventory& inventory);
fabricwatch::v1::Finding FindingToProto(const Finding& finding);
// The raw counter totals that a full counter batch carried (PortSample.counters): the base that
// later batches send only the changes against (CounterBatch.counters_base_unix_ns).
struct CounterMapBase {
  int64_t sampled_unix_ns = 0;  // the full batch's sampled_unix_ns; 0: no base
  struct Reading {
    std::string name;
    bool valid = false;
    uint64_t value = 0;
  };
  struct Port {
    std::string device;
    int port = 0;
    std::vector<Reading> readings;  // in the pass's order (the sampler keeps it across passes)
  };
  std::vector<Port> ports;
};

// Per-port rates; unknown rates (first pass, reset, saturation) are sent as NaN, never as 0.
// Without a base (null, or one with sampled_unix_ns 0) every readable counter goes into the ports'
// maps; with one, the maps are partial: the counters that are readable and differ from the base
// (or that it lacks), and counters_base_unix_ns names the base.
fabricwatch::v1::CounterBatch CounterBatchToProto(const NodeSnapshot& snapshot,
                                                  const CounterMapBase* base = nullptr);
// Makes `snapshot`'s readings the base of the batches after it.
void SetCounterMapBase(const NodeSnapshot& snapshot, CounterMapBase& base);

// Which counter batches carry full maps of raw counters: the first, the first after Reset() (a
// new connection, whose aggregator holds no base), and the first once `full_every` has passed
// since the last full one; the others carry the changes since the last full one. Each partial map
// is against the last full one, not the batch before it, so a lost batch (counter batches are
// best-effort) costs a reader nothing but that batch.
class CounterBatcher {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr std::chrono::seconds kFullEvery{60};
  explicit CounterBatcher(Clock::duration full_every = kFullEvery) : full_every_(full_every) {}

  // The batch for `snapshot`, taken at `now`.
  fabricwatch::v1::CounterBatch Next(const NodeSnapshot& snapshot, Clock::time_point now);
  // The next batch carries full maps.
  void Reset() { base_.sampled_unix_ns = 0; }

 private:
  Clock::duration full_every_;
  Clock::time_point last_full_{};
  CounterMapBase base_;
};
// The full check document plus its findings and verdict.
fabricwatch::v1::CheckReport CheckReportToProto(const NodeSnapshot& snapshot);

}  // namespace fw::agent
