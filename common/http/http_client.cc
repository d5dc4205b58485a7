// Blocking HTTP client over a plain TCP socket with poll-based timeouts.
#include "common/http/http_client.h"

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <utility>

#include "common/http/host_port.h"

namespace fw::http {

namespace {

bool WaitFor(int fd, short events, std::chrono::steady_clock::time_point deadline) {
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                    deadline - std::chrono::steady_clock::now())
                    .count();
    if (left <= 0) return false;
    pollfd p{fd, events, 0};
    int n = poll(&p, 1, static_cast<int>(left));
    if (n > 0) return true;
    if (n < 0 && errno != EINTR) return false;
  }
}

// Decodes a chunked body in place; false when malformed.
bool Dechunk(const std::string& in, std::string* out) {
  size_t pos = 0;
  for (;;) {
    size_t eol = in.find("\r\n", pos);
    if (eol == std::string::npos) return false;
    size_t len = 0;
    try {
      len = std::stoul(in.substr(pos, eol - pos), nullptr, 16);
    } catch (...) {
      return false;
    }
    pos = eol + 2;
    if (len == 0) return true;
    if (pos + len > in.size()) return false;
    out->append(in, pos, len);
    pos += len + 2;
  }
}

}  // namespace

TcpSocket::~TcpSocket() {
  if (fd_ >= 0) close(fd_);
}

TcpSocket& TcpSocket::operator=(TcpSocket&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) close(fd_);
    fd_ = std::exchange(other.fd_, -1);
    host_ = std::move(other.host_);
  }
  return *this;
}

StatusOr<TcpSocket> DialTcp(const std::string& host_port,
                            std::chrono::steady_clock::time_point deadline) {
  std::string host;
  int port = 0;
  if (!SplitHostPort(host_port, &host, &port)) {
    return Status::InvalidArgument("address '" + host_port + "' is not HOST:PORT");
  }
  if (host.empty() || host == "0.0.0.0") host = "127.0.0.1";
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res) != 0 || !res) {
    return Status::Unavailable("cannot resolve '" + host + "'");
  }
  TcpSocket sock(socket(res->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0), host);
  const int rc = sock.fd() < 0 ? -1 : connect(sock.fd(), res->ai_addr, res->ai_addrlen);
  const int connect_errno = errno;
  freeaddrinfo(res);
  if (sock.fd() < 0) return Status::Unavailable(std::string("socket: ") + strerror(connect_errno));
  if (rc != 0 && connect_errno != EINPROGRESS) {
    return Status::Unavailable("connect to " + host_port + ": " + strerror(connect_errno));
  }
  if (!WaitFor(sock.fd(), POLLOUT, deadline)) {
    return Status::Unavailable("connect to " + host_port + ": timed out");
  }
  int err = 0;
  socklen_t len = sizeof err;
  getsockopt(sock.fd(), SOL_SOCKET, SO_ERROR, &err, &len);
  if (err != 0) return Status::Unavailable("connect to " + host_port + ": " + strerror(err));
  return sock;
}

std::string FormatRequest(const std::string& host_port, const std::string& method,
                          const std::string& target, const std::string& body,
                          const std::vector<std::string>& headers) {
  std::string req = method + " " + target + " HTTP/1.1\r\nHost: " + host_port +
                    "\r\nConnection: close\r\nContent-Length: " + std::to_string(body.size()) +
                    "\r\n";
  if (!body.empty()) req += "Content-Type: application/json\r\n";
  for (const std::string& h : headers) {
    if (h.find_first_of("\r\n") == std::string::npos) req += h + "\r\n";
  }
  return req + "\r\n" + body;
}

StatusOr<ClientResponse> Fetch(const std::string& host_port, const std::string& method,
                               const std::string& target, const std::string& body, int timeout_ms,
                               const std::vector<std::string>& headers) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  StatusOr<TcpSocket> sock = DialTcp(host_port, deadline);
  if (!sock.ok()) return sock.status();

  const std::string req = FormatRequest(host_port, method, target, body, headers);
  size_t sent = 0;
  while (sent < req.size()) {
    if (!WaitFor(sock->fd(), POLLOUT, deadline)) return Status::Unavailable("send timed out");
    ssize_t n = send(sock->fd(), req.data() + sent, req.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && errno != EAGAIN && errno != EINTR) {
      return Status::Unavailable(std::string("send: ") + strerror(errno));
    }
    if (n > 0) sent += static_cast<size_t>(n);
  }
  std::string raw;
  char buf[65536];
  for (;;) {
    if (!WaitFor(sock->fd(), POLLIN, deadline)) return Status::Unavailable("response timed out");
    ssize_t n = recv(sock->fd(), buf, sizeof buf, 0);
    if (n == 0) break;
    if (n < 0) {
      if (errno == EAGAIN || errno == EINTR) continue;
      return Status::Unavailable(std::string("recv: ") + strerror(errno));
    }
    raw.append(buf, static_cast<size_t>(n));
    if (raw.size() > (512u << 20)) return Status::ResourceExhausted("response larger than 512 MiB");
  }
  return ParseResponse(raw, host_port);
}

StatusOr<ClientResponse> ParseResponse(const std::string& raw, const std::string& from) {
  size_t hdr_end = raw.find("\r\n\r\n");
  if (hdr_end == std::string::npos || raw.compare(0, 5, "HTTP/") != 0) {
    return Status::InvalidArgument("malformed HTTP response from " + from);
  }
  ClientResponse out;
  size_t sp = raw.find(' ');
  out.status = std::atoi(raw.c_str() + sp + 1);
  std::string headers = raw.substr(0, hdr_end);
  std::string lower = headers;
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  size_t ct = lower.find("\r\ncontent-type:");
  if (ct != std::string::npos) {
    size_t s = ct + 15, e = headers.find("\r\n", s);
    out.content_type = headers.substr(s, e - s);
    while (!out.content_type.empty() && out.content_type[0] == ' ') out.content_type.erase(0, 1);
  }
  std::string payload = raw.substr(hdr_end + 4);
  if (lower.find("transfer-encoding: chunked") != std::string::npos) {
    if (!Dechunk(payload, &out.body)) return Status::InvalidArgument("malformed chunked body");
  } else {
    out.body = std::move(payload);
  }
  return out;
}

}  // namespace fw::http
