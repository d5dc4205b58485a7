// Small socket helpers shared by the probes: an owning fd, address parsing, errno -> Status.
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>

#include <cstdint>
#include <string>
#include <string_view>

#include "common/status.h"

namespace fw::net {

// Owns a file descriptor; closes it on destruction. Move-only.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(Fd&& o) noexcept : fd_(o.Release()) {}
  Fd& operator=(Fd&& o) noexcept;
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() { Reset(); }

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int Release();
  void Reset(int fd = -1);

 private:
  int fd_ = -1;
};

// An IPv4 or IPv6 socket address.
struct SocketAddress {
  sockaddr_storage storage{};
  socklen_t len = 0;

  const sockaddr* get() const { return reinterpret_cast<const sockaddr*>(&storage); }
  sockaddr* get() { return reinterpret_cast<sockaddr*>(&storage); }
  int family() const { return storage.ss_family; }
  uint16_t port() const;
  void set_port(uint16_t port);
  // Same family, address and port.
  bool SameEndpoint(const SocketAddress& other) const;
  std::string ToString() const;  // "198.18.1.2:9753" or "[::1]:9753"
};

// Parses a numeric IPv4/IPv6 address (no DNS) and a port.
StatusOr<SocketAddress> ParseAddress(std::string_view ip, uint16_t port);
// Parses "IP:PORT" or "[IPv6]:PORT".
StatusOr<SocketAddress> ParseHostPort(std::string_view host_port);

// "what: strerror(errno)" as kUnavailable (or kInvalidArgument for EINVAL/EAFNOSUPPORT).
Status ErrnoStatus(std::string_view what, int err);

// The local address a socket is bound to.
StatusOr<SocketAddress> LocalAddress(int fd);

Status SetNonBlocking(int fd);

// Binds `fd` (of `family`) to the numeric address `source` and an ephemeral port, so that what it
// sends leaves from that address; an empty `source`, or one of the other family, leaves the
// choice to the kernel's route.
Status BindSource(int fd, int family, std::string_view source);

}  // namespace fw::net
