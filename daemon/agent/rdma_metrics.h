// The RDMA UD mesh's counters on the agent's /metrics (docs/metrics.md, docs/rdma.md).
#pragma once

#include "exporter/registry.h"
#include "probes/rdma/ud_mesh.h"

namespace fw::agent {

// Registers the UD mesh's waits on the agent's own work (UdMesh::NoteBusy; docs/rdma.md "Waits
// on the agent's own work"), read from `stats` before each render:
//   fabricwatch_rdma_ud_busy_prober_delays_total     UdMeshStats::busy_prober_delays
//   fabricwatch_rdma_ud_busy_software_results_total  UdMeshStats::busy_software_results
//   fabricwatch_rdma_ud_busy_turnarounds_total       UdMeshStats::busy_turnarounds
//   fabricwatch_rdma_ud_peer_busy_turnarounds_total  UdMeshStats::peer_busy_turnarounds
// `stats` may be null (RDMA unavailable): the series are then exported as 0. It must outlive
// `registry`'s renders.
void RegisterRdmaUdMetrics(metrics::Registry& registry, const rdma::UdMeshStats* stats);

}  // namespace fw::agent
