// ETHTOOL_GSSET_INFO → ETHTOOL_GSTRINGS → ETHTOOL_GSTATS on a datagram socket.
#include "probes/counters/ethtool_stats.h"

#include <linux/ethtool.h>
#include <linux/sockios.h>
#include <net/if.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>

namespace fw::counters {
namespace {

constexpr uint32_t kMaxStats = 1 << 16;  // a sanity bound on what a driver may claim

class Socket {
 public:
  Socket() : fd_(socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0)) {}
  ~Socket() {
    if (fd_ >= 0 && close(fd_) != 0) {
      // Nothing to recover: the descriptor is released either way.
    }
  }
  int fd() const { return fd_; }

 private:
  int fd_;
};

Status Ioctl(int fd, std::string_view netdev, void* data, const char* what) {
  ifreq ifr{};
  std::memcpy(ifr.ifr_name, netdev.data(), netdev.size());
  ifr.ifr_data = static_cast<char*>(data);
  if (ioctl(fd, SIOCETHTOOL, &ifr) == 0) return Status::Ok();
  const int err = errno;
  const std::string msg =
      "ethtool " + std::string(what) + " on " + std::string(netdev) + ": " + std::strerror(err);
  if (err == ENODEV) return Status::NotFound(msg);
  return Status::Unavailable(msg);
}

}  // namespace

Status EthtoolStatsReader::Read(std::string_view netdev,
                                std::vector<std::pair<std::string, uint64_t>>& out) {
  out.clear();
  if (netdev.empty() || netdev.size() >= IFNAMSIZ) {
    return Status::InvalidArgument("bad netdev name '" + std::string(netdev) + "'");
  }
  Socket sock;
  if (sock.fd() < 0) return Status::Unavailable(std::string("socket: ") + std::strerror(errno));

  // How many statistics the driver has.
  // ethtool_sset_info ends in a flexible array with one entry per requested set: room for one.
  uint64_t sset_buf[(sizeof(ethtool_sset_info) + sizeof(uint32_t) + 7) / 8] = {};
  auto* sset = reinterpret_cast<ethtool_sset_info*>(sset_buf);
  sset->cmd = ETHTOOL_GSSET_INFO;
  sset->sset_mask = uint64_t{1} << ETH_SS_STATS;
  if (Status s = Ioctl(sock.fd(), netdev, sset, "GSSET_INFO"); !s.ok()) return s;
  const uint32_t n = (sset->sset_mask & (uint64_t{1} << ETH_SS_STATS)) ? sset->data[0] : 0;
  if (n == 0) return Status::Ok();
  if (n > kMaxStats) {
    return Status::Unavailable("ethtool on " + std::string(netdev) + " claims " +
                               std::to_string(n) + " statistics");
  }

  // Their names.
  const size_t strings_bytes = sizeof(ethtool_gstrings) + size_t{n} * ETH_GSTRING_LEN;
  auto strings = std::make_unique<uint64_t[]>((strings_bytes + 7) / 8);  // aligned, zeroed
  auto* gs = reinterpret_cast<ethtool_gstrings*>(strings.get());
  gs->cmd = ETHTOOL_GSTRINGS;
  gs->string_set = ETH_SS_STATS;
  gs->len = n;
  if (Status s = Ioctl(sock.fd(), netdev, gs, "GSTRINGS"); !s.ok()) return s;

  // Their values.
  const size_t stats_bytes = sizeof(ethtool_stats) + size_t{n} * sizeof(uint64_t);
  auto stats = std::make_unique<uint64_t[]>((stats_bytes + 7) / 8);
  auto* st = reinterpret_cast<ethtool_stats*>(stats.get());
  st->cmd = ETHTOOL_GSTATS;
  st->n_stats = n;
  if (Status s = Ioctl(sock.fd(), netdev, st, "GSTATS"); !s.ok()) return s;

  const uint32_t have = std::min(n, std::min(gs->len, st->n_stats));
  out.reserve(have);
  for (uint32_t i = 0; i < have; ++i) {
    const char* name = reinterpret_cast<const char*>(gs->data) + size_t{i} * ETH_GSTRING_LEN;
    out.emplace_back(std::string(name, strnlen(name, ETH_GSTRING_LEN)), st->data[i]);
  }
  return Status::Ok();
}

}  // namespace fw::counters
