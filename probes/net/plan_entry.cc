// Shared checks of plan entries.
#include "probes/net/plan_entry.h"

#include "probes/net/probe_result.h"
#include "probes/net/socket_util.h"

namespace fw::net {

std::string_view PlanSkipName(PlanSkip s) {
  switch (s) {
    case PlanSkip::kName:
      return "name";
    case PlanSkip::kAddress:
      return "address";
    case PlanSkip::kPort:
      return "port";
    case PlanSkip::kFlows:
      return "flows";
    case PlanSkip::kRate:
      return "rate";
    case PlanSkip::kTransport:
      return "transport";
    case PlanSkip::kDuplicate:
      return "duplicate";
    case PlanSkip::kSocket:
      return "socket";
    case PlanSkip::kTimeout:
      return "timeout";
    case PlanSkip::kCount:
      break;
  }
  return "unknown";
}

std::optional<PlanSkip> CheckPeer(std::string_view name, std::string_view address, uint32_t port) {
  if (name.empty() || name.size() > ProbeResult::kPeerNameMax) return PlanSkip::kName;
  if (port == 0 || port > 65535) return PlanSkip::kPort;
  // inet_pton reads a C string: "10.0.0.1\0junk" would parse as 10.0.0.1.
  if (address.find('\0') != std::string_view::npos ||
      !ParseAddress(address, static_cast<uint16_t>(port)).ok()) {
    return PlanSkip::kAddress;
  }
  return std::nullopt;
}

}  // namespace fw::net
