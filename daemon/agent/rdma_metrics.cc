#include "daemon/agent/rdma_metrics.h"

#include <array>
#include <atomic>
#include <cstdint>

namespace fw::agent {

void RegisterRdmaUdMetrics(metrics::Registry& registry, const rdma::UdMeshStats* stats) {
  struct Entry {
    const char* name;
    const char* help;
    std::atomic<uint64_t> rdma::UdMeshStats::*field;
  };
  static constexpr std::array<Entry, 4> kEntries{{
      {"fabricwatch_rdma_ud_busy_prober_delays_total",
       "rdma_ud results exported without their prober host delay: the ack waited on this "
       "agent's own RC or QP-setup work, not on the host.",
       &rdma::UdMeshStats::busy_prober_delays},
      {"fabricwatch_rdma_ud_busy_software_results_total",
       "rdma_ud results dropped on software timestamps: their network RTT held a wait on this "
       "agent's own RC or QP-setup work.",
       &rdma::UdMeshStats::busy_software_results},
      {"fabricwatch_rdma_ud_busy_turnarounds_total",
       "rdma_ud probes this agent answered whose turnaround held a wait on its own RC or QP-setup "
       "work; their reports say so (the prober leaves the responder host delay out).",
       &rdma::UdMeshStats::busy_turnarounds},
      {"fabricwatch_rdma_ud_peer_busy_turnarounds_total",
       "rdma_ud results exported without the responder host delay: the peer reported its "
       "turnaround busy with its own work.",
       &rdma::UdMeshStats::peer_busy_turnarounds},
  }};
  std::array<metrics::Counter*, kEntries.size()> counters{};
  for (size_t i = 0; i < kEntries.size(); ++i) {
    counters[i] = &registry.AddCounter(kEntries[i].name, kEntries[i].help).WithLabels({});
  }
  registry.AddBeforeRender([stats, counters] {
    if (stats == nullptr) return;
    for (size_t i = 0; i < kEntries.size(); ++i) {
      counters[i]->Set(static_cast<double>((stats->*kEntries[i].field).load()));
    }
  });
}

}  // namespace fw::agent
