// RDMA loss level: a device that the lossy rdma_ud device pairs share while its peers' other pairs
// are clean (rdma_loss.h) is named: nic_degraded on that NIC. Its pairs' own pair findings, made
// by the pair level from the same loss, are superseded.
#include "daemon/aggregator/analysis/blamer.h"

namespace fw::analysis::blame {

void Blamer::RdmaLossLevel() {
  for (const RdmaLossVerdict& v : ev_.rdma_losses) {
    const std::string node = ctx_.names.NodeName(v.node);
    const double ratio = v.probes ? static_cast<double>(v.lost) / v.probes : 0;
    Finding f;
    f.severity = ratio >= 0.05 ? Severity::kCritical : Severity::kWarning;
    f.evidence = {{"rdma_loss_ratio", ratio},
                  {"rdma_lost", static_cast<double>(v.lost)},
                  {"rdma_probes", static_cast<double>(v.probes)},
                  {"rdma_lossy_pairs", v.lossy_pairs},
                  {"rdma_pairs", v.pairs},
                  {"rdma_peers_loss_ratio", v.peers_loss_ratio},
                  {"rdma_peer_pairs", v.peer_pairs},
                  {"significance", v.significance}};
    const std::string what =
        Fmt("loses %.0f%% of its RDMA UD probes (%.0f of %.0f) toward %.0f", 100 * ratio,
            static_cast<double>(v.lost), static_cast<double>(v.probes), v.lossy_pairs) +
        Fmt(" of its %.0f peers, while their %.0f other RDMA pairs lose %.1f%%", v.pairs,
            v.peer_pairs, 100 * v.peers_loss_ratio);
    std::string key;
    if (v.device.empty()) {
      f.kind = "host_network";
      f.location = FindingLocation{"node", node, node, "", 0};
      f.summary =
          node + "'s RDMA port " + what + ": the port, its cable or the NIC, not the fabric.";
      key = "node:" + node;
    } else {
      f.kind = "nic_degraded";
      f.location = FindingLocation{"nic", node + "/" + v.device, node, v.device, 0};
      f.summary = "NIC " + v.device + " on " + node + " " + what +
                  ": the NIC, its port or its cable (the host link), not the fabric beyond it.";
      key = "nic:" + node + "/" + v.device;
    }
    f.confidence = std::min(0.95, v.lossy_pairs / (v.lossy_pairs + 1.0));
    for (NodeId peer : v.lossy_peers) {
      ev_.superseded.push_back("pair:" + PairId(node, ctx_.names.NodeName(peer)));
    }
    Merge(key, std::move(f));
  }
}

}  // namespace fw::analysis::blame
