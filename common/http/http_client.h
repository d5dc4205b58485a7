// A minimal blocking HTTP/1.1 client for the CLI and tests (GET/POST, chunked responses, timeouts).
#pragma once

#include <chrono>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"

namespace fw::http {

struct ClientResponse {
  int status = 0;
  std::string content_type;
  std::string body;
};

// A TCP socket, closed when this is destroyed, and the host name it was dialed as.
class TcpSocket {
 public:
  TcpSocket() = default;
  TcpSocket(int fd, std::string host) : fd_(fd), host_(std::move(host)) {}
  ~TcpSocket();
  TcpSocket(TcpSocket&& other) noexcept : fd_(other.fd_), host_(std::move(other.host_)) {
    other.fd_ = -1;
  }
  TcpSocket& operator=(TcpSocket&& other) noexcept;
  TcpSocket(const TcpSocket&) = delete;
  TcpSocket& operator=(const TcpSocket&) = delete;

  int fd() const { return fd_; }
  const std::string& host() const { return host_; }

 private:
  int fd_ = -1;
  std::string host_;
};

// Resolves "host:port" (IPv4; an empty host or 0.0.0.0 dials 127.0.0.1) and connects before
// `deadline`. The socket it returns is non-blocking. kInvalidArgument for a malformed address,
// kUnavailable when the host does not resolve or the connection fails or times out.
StatusOr<TcpSocket> DialTcp(const std::string& host_port,
                            std::chrono::steady_clock::time_point deadline);

// Sends one request to "host:port" (IPv4 literal or resolvable name) and reads the whole response.
// `headers` are extra "Name: value" lines; one holding CR or LF is dropped (it would inject
// headers). Fails with kUnavailable when the server cannot be reached within `timeout_ms`.
StatusOr<ClientResponse> Fetch(const std::string& host_port, const std::string& method,
                               const std::string& target, const std::string& body = "",
                               int timeout_ms = 5000, const std::vector<std::string>& headers = {});

// The request line and headers (Host, Connection: close, Content-Length, Content-Type for a
// body, then `headers` without any holding CR or LF), the blank line and the body.
std::string FormatRequest(const std::string& host_port, const std::string& method,
                          const std::string& target, const std::string& body,
                          const std::vector<std::string>& headers);

// Parses a whole HTTP/1.x response (status, Content-Type, body; chunked bodies decoded). `from`
// names the server in errors.
StatusOr<ClientResponse> ParseResponse(const std::string& raw, const std::string& from);

inline StatusOr<ClientResponse> Get(const std::string& host_port, const std::string& target,
                                    int timeout_ms = 5000) {
  return Fetch(host_port, "GET", target, "", timeout_ms);
}

}  // namespace fw::http
