// GID table reading from sysfs and the source GID choice.
#include "probes/rdma/gid_table.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

namespace fw::rdma {
namespace {

// Reads a small file whole (at most cap bytes); false when it cannot be opened or read.
bool ReadSmall(const std::string& path, std::string& out, size_t cap = 128) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  out.resize(cap);
  ssize_t n;
  do {
    n = ::read(fd, out.data(), cap);
  } while (n < 0 && errno == EINTR);
  ::close(fd);
  if (n < 0) return false;
  out.resize(static_cast<size_t>(n));
  while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.pop_back();
  return true;
}

}  // namespace

GidType ParseGidType(std::string_view text, LinkLayer link_layer) {
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.remove_suffix(1);
  if (text == "RoCE v2") return GidType::kRoceV2;
  if (text == "IB/RoCE v1") {
    return link_layer == LinkLayer::kEthernet ? GidType::kRoceV1 : GidType::kIb;
  }
  return GidType::kUnknown;
}

StatusOr<std::vector<GidEntry>> ReadSysfsGidTable(const std::string& sysfs_root,
                                                  std::string_view device, int port,
                                                  LinkLayer link_layer, int max_entries) {
  const std::string dir =
      sysfs_root + "/class/infiniband/" + std::string(device) + "/ports/" + std::to_string(port);
  std::error_code ec;
  if (!std::filesystem::is_directory(dir + "/gids", ec)) {
    return Status::NotFound(dir + "/gids: no GID table in sysfs");
  }
  std::vector<GidEntry> out;
  std::string text;
  for (int idx = 0; idx < max_entries; ++idx) {
    const std::string i = std::to_string(idx);
    if (!ReadSmall(dir + "/gids/" + i, text)) {
      // The table is dense up to gid_tbl_len; a missing index ends it.
      if (errno == ENOENT) break;
      continue;  // EINVAL/EAGAIN: some drivers fail reads of unused slots
    }
    auto gid = Gid::Parse(text);
    if (!gid.ok() || gid->IsZero()) continue;
    GidEntry e;
    e.index = idx;
    e.gid = *gid;
    e.type = ReadSmall(dir + "/gid_attrs/types/" + i, text) ? ParseGidType(text, link_layer)
                                                            : GidType::kUnknown;
    if (ReadSmall(dir + "/gid_attrs/ndevs/" + i, text)) e.netdev = text;
    out.push_back(std::move(e));
  }
  return out;
}

std::string PortNetdev(const std::vector<GidEntry>& table) {
  for (const GidEntry& e : table) {
    if (!e.netdev.empty()) return e.netdev;
  }
  return "";
}

StatusOr<GidChoice> ChooseSourceGid(const std::vector<GidEntry>& table, LinkLayer link_layer,
                                    std::string_view netdev, bool allow_ipv6) {
  if (link_layer == LinkLayer::kInfiniBand) {
    for (const GidEntry& e : table) {
      if (e.type == GidType::kIb) return GidChoice{e.index, e.gid, e.type};
    }
    return Status::NotFound("no IB GID in a table of " + std::to_string(table.size()) + " entries");
  }
  std::string want(netdev);
  if (want.empty()) want = PortNetdev(table);
  const GidEntry* v6 = nullptr;
  int v1 = 0, v2_other_netdev = 0;
  for (const GidEntry& e : table) {
    if (e.type == GidType::kRoceV1) ++v1;
    if (e.type != GidType::kRoceV2) continue;
    if (!want.empty() && e.netdev != want) {
      ++v2_other_netdev;
      continue;
    }
    if (e.gid.IsIpv4Mapped()) return GidChoice{e.index, e.gid, e.type};
    if (allow_ipv6 && v6 == nullptr && !e.gid.IsLinkLocal()) v6 = &e;
  }
  if (v6 != nullptr) return GidChoice{v6->index, v6->gid, v6->type};
  return Status::NotFound("no IPv4-mapped RoCE v2 GID on netdev '" + want +
                          "' (table: " + std::to_string(table.size()) + " entries, " +
                          std::to_string(v1) + " RoCE v1, " + std::to_string(v2_other_netdev) +
                          " RoCE v2 on other netdevs); is an IPv4 address set on the netdev?");
}

}  // namespace fw::rdma
