// Transport names for probe results.
#include "daemon/aggregator/model/reported_probe.h"

#include <array>

namespace fw::aggregator {
namespace {
constexpr std::array<std::string_view, kTransportCount> kNames = {
    "udp", "tcp_connect", "tcp_bw", "rdma_ud", "rdma_rc", "collective"};
}  // namespace

std::string_view TransportName(Transport t) {
  const auto i = static_cast<size_t>(t);
  return i < kNames.size() ? kNames[i] : std::string_view("unknown");
}

std::optional<Transport> ParseTransport(std::string_view name) {
  for (size_t i = 0; i < kNames.size(); ++i) {
    if (kNames[i] == name) return static_cast<Transport>(i);
  }
  return std::nullopt;
}

}  // namespace fw::aggregator
