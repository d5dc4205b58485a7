// A minimal blocking HTTP/1.1 client for the CLI and tests (GET/POST, chunked responses, timeouts).
#pragma once

#include <string>

#include "common/status.h"

namespace fw::http {

struct ClientResponse {
  int status = 0;
  std::string content_type;
  std::string body;
};

// Sends one request to "host:port" (IPv4 literal or resolvable name) and reads the whole response.
// Fails with kUnavailable when the server cannot be reached within `timeout_ms`.
StatusOr<ClientResponse> Fetch(const std::string& host_port, const std::string& method,
                               const std::string& target, const std::string& body = "",
                               int timeout_ms = 5000);

// Parses a whole HTTP/1.x response (status, Content-Type, body; chunked bodies decoded). `from`
// names the server in errors.
StatusOr<ClientResponse> ParseResponse(const std::string& raw, const std::string& from);

inline StatusOr<ClientResponse> Get(const std::string& host_port, const std::string& target,
                                    int timeout_ms = 5000) {
  return Fetch(host_port, "GET", target, "", timeout_ms);
}

}  // namespace fw::http
