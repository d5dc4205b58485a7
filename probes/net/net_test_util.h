// Test helpers: raw UDP/TCP loopback clients for talking to the responder byte by byte.
#pragma once

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "probes/net/echo_responder.h"
#include "probes/net/socket_util.h"

namespace fw::net::testing {

inline sockaddr_in Loopback(uint16_t port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return a;
}

// A UDP socket bound to an ephemeral loopback port.
inline Fd UdpSocket() {
  Fd fd(socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  sockaddr_in a = Loopback(0);
  if (bind(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) fd.Reset();
  return fd;
}

inline bool SendTo(int fd, uint16_t port, const std::vector<uint8_t>& bytes) {
  sockaddr_in a = Loopback(port);
  return sendto(fd, bytes.data(), bytes.size(), 0, reinterpret_cast<sockaddr*>(&a), sizeof a) ==
         static_cast<ssize_t>(bytes.size());
}

// Waits up to `wait` for one datagram; nullopt on timeout.
inline std::optional<std::vector<uint8_t>> RecvWithin(int fd, std::chrono::milliseconds wait) {
  pollfd p{fd, POLLIN, 0};
  if (poll(&p, 1, static_cast<int>(wait.count())) != 1) return std::nullopt;
  std::vector<uint8_t> buf(65536);
  ssize_t n = recv(fd, buf.data(), buf.size(), 0);
  if (n < 0) return std::nullopt;
  buf.resize(static_cast<size_t>(n));
  return buf;
}

// A blocking TCP connection to a loopback port (invalid Fd on failure).
inline Fd TcpConnect(uint16_t port) {
  Fd fd(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in a = Loopback(port);
  if (connect(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) fd.Reset();
  return fd;
}

inline bool SendAll(int fd, const uint8_t* data, size_t len) {
  while (len > 0) {
    ssize_t n = send(fd, data, len, MSG_NOSIGNAL);
    if (n <= 0) return false;
    data += n;
    len -= static_cast<size_t>(n);
  }
  return true;
}

// Reads exactly `len` bytes within `wait`; fewer if the peer closes or time runs out.
inline std::vector<uint8_t> RecvExactly(int fd, size_t len, std::chrono::milliseconds wait) {
  std::vector<uint8_t> out;
  auto deadline = std::chrono::steady_clock::now() + wait;
  while (out.size() < len) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    pollfd p{fd, POLLIN, 0};
    if (left.count() <= 0 || poll(&p, 1, static_cast<int>(left.count())) != 1) break;
    uint8_t buf[4096];
    ssize_t n = recv(fd, buf, std::min(sizeof buf, len - out.size()), 0);
    if (n <= 0) break;
    out.insert(out.end(), buf, buf + n);
  }
  return out;
}

// True when the peer closes the connection within `wait` (recv returns 0 or an error).
inline bool ClosedWithin(int fd, std::chrono::milliseconds wait) {
  pollfd p{fd, POLLIN, 0};
  if (poll(&p, 1, static_cast<int>(wait.count())) != 1) return false;
  uint8_t b;
  return recv(fd, &b, 1, 0) <= 0;
}

// An echo responder on 127.0.0.1 and a free port (null, with a test failure, if it cannot start).
inline std::unique_ptr<EchoResponder> StartResponder(ResponderOptions o = {}) {
  o.listen_address = "127.0.0.1";
  o.port = 0;
  auto r = EchoResponder::Start(std::move(o), RealClock::Get());
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? std::move(r.value()) : nullptr;
}

// Threads of this process named `name` (/proc/self/task/*/comm).
inline int ThreadsNamed(const std::string& name) {
  int n = 0;
  for (const auto& t : std::filesystem::directory_iterator("/proc/self/task")) {
    std::ifstream in(t.path() / "comm");
    std::string comm;
    if (std::getline(in, comm) && comm == name) ++n;
  }
  return n;
}

// Polls `pred` every 5 ms until it holds or `wait` passes.
template <typename Pred>
bool Eventually(Pred pred, std::chrono::milliseconds wait) {
  auto deadline = std::chrono::steady_clock::now() + wait;
  while (std::chrono::steady_clock::now() < deadline) {
    if (pred()) return true;
    usleep(5000);
  }
  return pred();
}

}  // namespace fw::net::testing
