// RDMA UD loss by NIC (docs/rdma.md "Loss on one NIC"): the rdma_ud results, kept per ordered pair
// of RDMA devices, localize loss to the one device that every lossy pair of its peers shares. The
// UDP flows of the same nodes use the host stack and often another NIC, so the pair table's
// node-pair loss (UDP and RDMA together) dilutes a broken RDMA port, and with three nodes two of
// the three pairs carry the fault into the fleet's background.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include "common/mutex.h"
#include "daemon/aggregator/model/name_interner.h"
#include "daemon/aggregator/model/reported_probe.h"

namespace fw::analysis {

struct RdmaLossLimits {
  double window_s = 10;            // results older than this are not judged
  uint32_t min_probes = 5;         // a device pair with fewer probes in the window says nothing
  double lossy_ratio = 0.1;        // a device pair losing at least this is lossy...
  uint32_t lossy_min_lost = 2;     // ...with at least this many lost, and loss both ways
  uint32_t min_lossy_pairs = 2;    // a device is named with at least this many lossy pairs...
  double device_fraction = 0.8;    // ...that are at least this fraction of its pairs,
  double peers_clean_ratio = 0.2;  // while at most this fraction of its peers' other pairs are
                                   // lossy (at least one such pair is needed: the peers' own
                                   // ports are seen healthy)
  double background_floor = 1e-3;  // the loss the significance test allows at least
  double significance = 9;         // -log10 Poisson chance of the device's lost probes
};

// One RDMA device named for loss: its node, the device, and the evidence.
struct RdmaLossVerdict {
  aggregator::NodeId node = aggregator::kNoNode;
  std::string device;        // empty when the agents did not name it
  uint32_t pairs = 0;        // device pairs with enough probes
  uint32_t lossy_pairs = 0;  // of them, lossy
  uint64_t probes = 0;       // over its lossy pairs, both directions
  uint64_t lost = 0;
  uint32_t peer_pairs = 0;      // its peers' pairs that do not include it
  double peers_loss_ratio = 0;  // the loss ratio over those
  double significance = 0;
  std::vector<aggregator::NodeId> lossy_peers;  // the nodes at the other end of its lossy pairs
};

// Thread-safe: Record() runs on ingest threads, Judge() on the tick thread.
class RdmaLosses {
 public:
  // Device pairs beyond this many are not kept (and counted): memory is bounded whatever agents
  // send.
  static constexpr size_t kMaxSeries = 1 << 16;
  static constexpr size_t kSeconds = 16;  // per-second buckets a series keeps

  // Keeps the outcome of every rdma_ud result named by node id (ingest); the others are skipped.
  void Record(std::span<const aggregator::ReportedProbe> results, int64_t now_ns);
  // The devices that explain the lossy device pairs of the window, most lossy pairs first; a
  // device pair is counted for one named device only. Series idle longer than the window are
  // dropped.
  std::vector<RdmaLossVerdict> Judge(int64_t now_ns, const RdmaLossLimits& limits);
  uint64_t refused() const;

 private:
  struct Bucket {
    int64_t second = -1;
    uint32_t probes = 0;
    uint32_t lost = 0;
  };
  struct Series {
    std::array<Bucket, kSeconds> buckets{};
    int64_t last_ns = 0;
  };
  // (src node, src device, dst node, dst device)
  using Key = std::tuple<aggregator::NodeId, std::string, aggregator::NodeId, std::string>;

  mutable Mutex mu_;
  std::map<Key, Series> series_ FW_GUARDED_BY(mu_);
  uint64_t refused_ FW_GUARDED_BY(mu_) = 0;
};

}  // namespace fw::analysis
