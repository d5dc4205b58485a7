// The real EthernetStatsSource: a netdev's driver statistics through the SIOCETHTOOL ioctl, the
// same data `ethtool -S` prints. Reads in the network namespace of the calling thread.
#pragma once

#include "probes/counters/ethernet_stats.h"

namespace fw::counters {

class EthtoolStatsReader final : public EthernetStatsSource {
 public:
  // kNotFound: no such netdev. kUnavailable: the driver has no statistics (EOPNOTSUPP), or the
  // ioctl failed otherwise (the message carries errno).
  Status Read(std::string_view netdev, std::vector<std::pair<std::string, uint64_t>>& out) override;
};

}  // namespace fw::counters
