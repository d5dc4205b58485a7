// Seam for per-netdev Ethernet statistics (ethtool -S), where RoCE ports keep their PFC pause
// counters (e.g. mlx5's rx_prio3_pause, tx_prio3_pause).
//
// Abstract so the sampler can be tested with a fake: no kernel here has an RDMA or PFC-capable
// NIC, so a real SIOCETHTOOL reader could not be tested honestly yet and is not shipped.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/status.h"

namespace fw::counters {

class EthernetStatsSource {
 public:
  virtual ~EthernetStatsSource() = default;
  // Fills `out` with (name, value) pairs for `netdev`, replacing its contents. kNotFound when the
  // netdev does not exist, kUnavailable when the driver has no statistics. Called from the
  // sampler's thread only.
  virtual Status Read(std::string_view netdev,
                      std::vector<std::pair<std::string, uint64_t>>& out) = 0;
};

// Whether an ethtool statistic name is a PFC or global pause counter worth keeping.
bool IsPauseCounterName(std::string_view name);

}  // namespace fw::counters
