// An HTTP client for the web config's features: TLS (server verified against a CA, optional
// client certificate) and extra request headers such as basic auth. Used by the daemons' own
// health self-check when their HTTP server runs TLS, by the CLI and by tests.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"
#include "common/http/http_client.h"

namespace fw::http {

struct WebClientOptions {
  bool tls = false;
  std::string ca_file;  // verify the server against this CA
  // With an empty ca_file: verify the server against OpenSSL's default trust store when true;
  // when false, do not verify it (the daemons' self-check of their own server).
  bool verify_with_system_ca = false;
  std::string cert_file;  // client certificate, for servers that ask for one
  std::string key_file;
  std::string server_name;  // SNI and the name verified (default: the host part of the address)
  std::vector<std::string> headers;  // "Name: value" lines
};

// Sends one request with `body` (as JSON when not empty) and reads the whole response
// (Connection: close). Without tls this is http::Fetch with the headers. kUnavailable when the
// server cannot be reached, the TLS handshake fails (the message names the OpenSSL reason) or the
// server closes without an answer; over TLS `timeout_ms` bounds each read and write.
StatusOr<ClientResponse> FetchWeb(const std::string& host_port, const std::string& method,
                                  const std::string& target, const WebClientOptions& options,
                                  int timeout_ms = 5000, const std::string& body = "");

// "Basic base64(user:password)", the value of an Authorization header.
std::string BasicAuthorization(const std::string& user, const std::string& password);

}  // namespace fw::http
