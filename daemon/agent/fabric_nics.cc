#include "daemon/agent/fabric_nics.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>

#include <set>

#include "probes/net/socket_util.h"

namespace fw::agent {

std::optional<std::string> InterfaceAddressV4(const std::string& name) {
  if (name.empty() || if_nametoindex(name.c_str()) == 0) return std::nullopt;
  ifaddrs* all = nullptr;
  if (getifaddrs(&all) != 0) return std::string();
  std::string found;
  for (const ifaddrs* a = all; a != nullptr; a = a->ifa_next) {
    if (a->ifa_addr == nullptr || a->ifa_addr->sa_family != AF_INET || name != a->ifa_name) {
      continue;
    }
    char text[INET_ADDRSTRLEN] = {};
    const auto* in = reinterpret_cast<const sockaddr_in*>(a->ifa_addr);
    if (inet_ntop(AF_INET, &in->sin_addr, text, sizeof text) != nullptr) {
      found = text;
      break;
    }
  }
  freeifaddrs(all);
  return found;
}

StatusOr<std::vector<FabricNic>> ParseFabricNics(std::string_view spec,
                                                 const InterfaceLookup& lookup) {
  std::vector<FabricNic> out;
  std::set<std::string> seen;
  size_t start = 0;
  while (start <= spec.size()) {
    const size_t comma = spec.find(',', start);
    std::string_view entry = spec.substr(
        start, comma == std::string_view::npos ? std::string_view::npos : comma - start);
    start = comma == std::string_view::npos ? spec.size() + 1 : comma + 1;
    if (entry.empty()) continue;
    const size_t eq = entry.find('=');
    FabricNic nic;
    nic.name = std::string(entry.substr(0, eq));
    if (nic.name.empty() || nic.name.find_first_of(" \t=") != std::string::npos ||
        nic.name.size() > 63) {
      return Status::InvalidArgument("--probe-nics: bad NIC name in '" + std::string(entry) + "'");
    }
    if (!seen.insert(nic.name).second) {
      return Status::InvalidArgument("--probe-nics: NIC " + nic.name + " named twice");
    }
    const std::optional<std::string> iface = lookup(nic.name);
    if (iface) nic.device = nic.name;
    if (eq != std::string_view::npos) {
      nic.address = std::string(entry.substr(eq + 1));
      if (!net::ParseAddress(nic.address, 0).ok()) {
        return Status::InvalidArgument("--probe-nics: " + nic.name + ": '" + nic.address +
                                       "' is not a numeric IP address");
      }
    } else if (!iface) {
      nic.skip_reason = "no interface named " + nic.name;
    } else if (iface->empty()) {
      nic.skip_reason = "interface " + nic.name + " has no IPv4 address";
    } else {
      nic.address = *iface;
    }
    out.push_back(std::move(nic));
  }
  if (out.empty()) return Status::InvalidArgument("--probe-nics: no NIC named");
  return out;
}

}  // namespace fw::agent
