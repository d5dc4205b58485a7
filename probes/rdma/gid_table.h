// A port's GID table from sysfs (gids/<idx>, gid_attrs/types/<idx>, gid_attrs/ndevs/<idx>) and
// the choice of the source GID a probe uses.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "probes/rdma/verbs.h"

namespace fw::rdma {

// "IB/RoCE v1" → kIb on an InfiniBand port and kRoceV1 on Ethernet; "RoCE v2" → kRoceV2.
GidType ParseGidType(std::string_view text, LinkLayer link_layer);

// Reads <sysfs_root>/class/infiniband/<dev>/ports/<port>/gids/* with their types and netdevs.
// Zero GIDs (unused slots) are left out; an entry whose type file is missing or unreadable gets
// kUnknown (never chosen). At most `max_entries` indexes are scanned (the port's gid_tbl_len).
// NotFound when the port has no gids directory (e.g. a sysfs copy that left it out).
StatusOr<std::vector<GidEntry>> ReadSysfsGidTable(const std::string& sysfs_root,
                                                  std::string_view device, int port,
                                                  LinkLayer link_layer, int max_entries = 256);

// The netdev of an Ethernet port: the ndev of its first GID that names one, or "" when none does.
std::string PortNetdev(const std::vector<GidEntry>& table);

struct GidChoice {
  int index = 0;
  Gid gid;
  GidType type = GidType::kUnknown;
};

// The source GID for probes from a port:
// - Ethernet (RoCE): a RoCE v2 GID that is IPv4-mapped, on `netdev` when one is given (else on the
//   port's netdev); with `allow_ipv6`, a non-link-local RoCE v2 GID when no IPv4-mapped one exists.
//   Index 0 is never taken for being first: on RoCE it is the RoCE v1 link-local GID.
// - InfiniBand: the IB GID at the lowest index (the subnet prefix and the port GUID); an IB address
//   handle routes by LID, the GID only matters across subnets.
// NotFound, naming what the table held, when nothing fits.
StatusOr<GidChoice> ChooseSourceGid(const std::vector<GidEntry>& table, LinkLayer link_layer,
                                    std::string_view netdev = {}, bool allow_ipv6 = false);

}  // namespace fw::rdma
