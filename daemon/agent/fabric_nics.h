// The agent's fabric NICs (--probe-nics): which interfaces it probes from, and their addresses.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "daemon/agent/probe_scheduler.h"

namespace fw::agent {

// What the host knows of one interface: none when there is no interface of that name, else its
// first IPv4 address ("" when it has none).
using InterfaceLookup = std::function<std::optional<std::string>(const std::string& name)>;

// The host's interfaces (getifaddrs).
std::optional<std::string> InterfaceAddressV4(const std::string& name);

// Parses --probe-nics: comma-separated entries `name` or `name=address`.
//   `eth1`            the interface eth1, its first IPv4 address, bound to it (SO_BINDTODEVICE)
//   `mlx5_0=10.0.0.5` the map's NIC mlx5_0 at that address; bound to an interface of that name if
//                     the host has one, else by address (the routing table picks the egress)
// An interface without an address stays in the list with an empty address and a skip reason
// (the scheduler counts and skips it). Errors: an empty or duplicate name, a name with a space,
// ',' or '=' only, an address that is not numeric, no entry at all.
StatusOr<std::vector<FabricNic>> ParseFabricNics(std::string_view spec,
                                                 const InterfaceLookup& lookup);

}  // namespace fw::agent
