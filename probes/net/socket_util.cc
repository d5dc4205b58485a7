// Socket helper implementations.
#include "probes/net/socket_util.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>

namespace fw::net {

Fd& Fd::operator=(Fd&& o) noexcept {
  if (this != &o) Reset(o.Release());
  return *this;
}

int Fd::Release() {
  int fd = fd_;
  fd_ = -1;
  return fd;
}

void Fd::Reset(int fd) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
}

uint16_t SocketAddress::port() const {
  if (family() == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in*>(&storage)->sin_port);
  if (family() == AF_INET6) {
    return ntohs(reinterpret_cast<const sockaddr_in6*>(&storage)->sin6_port);
  }
  return 0;
}

void SocketAddress::set_port(uint16_t port) {
  if (family() == AF_INET) reinterpret_cast<sockaddr_in*>(&storage)->sin_port = htons(port);
  if (family() == AF_INET6) reinterpret_cast<sockaddr_in6*>(&storage)->sin6_port = htons(port);
}

bool SocketAddress::SameEndpoint(const SocketAddress& o) const {
  if (family() != o.family() || port() != o.port()) return false;
  if (family() == AF_INET) {
    return reinterpret_cast<const sockaddr_in*>(&storage)->sin_addr.s_addr ==
           reinterpret_cast<const sockaddr_in*>(&o.storage)->sin_addr.s_addr;
  }
  if (family() == AF_INET6) {
    return std::memcmp(&reinterpret_cast<const sockaddr_in6*>(&storage)->sin6_addr,
                       &reinterpret_cast<const sockaddr_in6*>(&o.storage)->sin6_addr,
                       sizeof(in6_addr)) == 0;
  }
  return false;
}

std::string SocketAddress::ToString() const {
  char buf[INET6_ADDRSTRLEN] = "?";
  if (family() == AF_INET) {
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(&storage)->sin_addr, buf, sizeof buf);
    return std::string(buf) + ":" + std::to_string(port());
  }
  if (family() == AF_INET6) {
    inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(&storage)->sin6_addr, buf,
              sizeof buf);
    return "[" + std::string(buf) + "]:" + std::to_string(port());
  }
  return "unspecified";
}

StatusOr<SocketAddress> ParseAddress(std::string_view ip, uint16_t port) {
  SocketAddress a;
  std::string s(ip);
  auto* v4 = reinterpret_cast<sockaddr_in*>(&a.storage);
  auto* v6 = reinterpret_cast<sockaddr_in6*>(&a.storage);
  if (inet_pton(AF_INET, s.c_str(), &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    v4->sin_port = htons(port);
    a.len = sizeof(sockaddr_in);
    return a;
  }
  if (inet_pton(AF_INET6, s.c_str(), &v6->sin6_addr) == 1) {
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons(port);
    a.len = sizeof(sockaddr_in6);
    return a;
  }
  return Status::InvalidArgument("'" + s + "' is not a numeric IPv4 or IPv6 address");
}

StatusOr<SocketAddress> ParseHostPort(std::string_view hp) {
  size_t colon = hp.rfind(':');
  if (colon == std::string_view::npos || colon + 1 == hp.size()) {
    return Status::InvalidArgument("'" + std::string(hp) + "': expected IP:PORT");
  }
  std::string_view host = hp.substr(0, colon), port_s = hp.substr(colon + 1);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  unsigned port = 0;
  auto [ptr, ec] = std::from_chars(port_s.data(), port_s.data() + port_s.size(), port);
  if (ec != std::errc() || ptr != port_s.data() + port_s.size() || port > 65535) {
    return Status::InvalidArgument("'" + std::string(hp) + "': port must be 0..65535");
  }
  return ParseAddress(host, static_cast<uint16_t>(port));
}

Status ErrnoStatus(std::string_view what, int err) {
  std::string msg = std::string(what) + ": " + std::strerror(err);
  if (err == EINVAL || err == EAFNOSUPPORT) return Status::InvalidArgument(std::move(msg));
  if (err == EACCES || err == EPERM) return Status::PermissionDenied(std::move(msg));
  return Status::Unavailable(std::move(msg));
}

StatusOr<SocketAddress> LocalAddress(int fd) {
  SocketAddress a;
  a.len = sizeof(a.storage);
  if (getsockname(fd, a.get(), &a.len) != 0) return ErrnoStatus("getsockname", errno);
  return a;
}

Status BindSource(int fd, int family, std::string_view source) {
  if (source.empty()) return Status::Ok();
  StatusOr<SocketAddress> a = ParseAddress(source, 0);
  if (!a.ok()) return a.status();
  if (a->family() != family) return Status::Ok();
  if (bind(fd, a->get(), a->len) != 0) return ErrnoStatus("bind source " + a->ToString(), errno);
  return Status::Ok();
}

Status SetNonBlocking(int fd) {
  int flags = fcntl(fd, F_GETFL, 0);
  if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) != 0) {
    return ErrnoStatus("fcntl(O_NONBLOCK)", errno);
  }
  return Status::Ok();
}

}  // namespace fw::net
