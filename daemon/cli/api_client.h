// Where the CLI finds the aggregator's HTTP API, how it talks to it (TLS, credentials), and
// fetching its JSON documents.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "common/http/http_client.h"
#include "common/http/web_client.h"
#include "common/status.h"

namespace fw::cli {

inline constexpr const char* kDefaultApi = "127.0.0.1:9751";
inline constexpr const char* kApiEnv = "FABRICWATCH_API";
inline constexpr const char* kPasswordEnv = "FABRICWATCH_PASSWORD";

struct Options {
  std::string api;              // HOST:PORT of the aggregator's HTTP API
  std::string format = "text";  // text | json
  int timeout_ms = 5000;
  // TLS (web.tls, the CA, a client certificate) and the Authorization header; see ConfigureTls
  // and BasicAuthHeader.
  http::WebClientOptions web;
};

struct ApiEndpoint {
  std::string address;  // HOST:PORT
  bool tls = false;     // given as https://HOST:PORT
};

// The address the user gave, from the strongest source down: --api, then the deprecated
// --aggregator, then $FABRICWATCH_API, then kDefaultApi. Accepts HOST:PORT, http://HOST:PORT[/]
// and https://HOST:PORT[/] (tls). Fails with kInvalidArgument when --api and --aggregator
// disagree or for a value that is not HOST:PORT. `deprecation_note` gets the one-line note to
// print when --aggregator was used, and stays empty otherwise.
StatusOr<ApiEndpoint> ResolveApiAddress(const std::optional<std::string>& api_flag,
                                        const std::optional<std::string>& aggregator_flag,
                                        const char* env_value, std::string* deprecation_note);

// Sets o->web's TLS part from the endpoint and --tls-ca/--tls-cert/--tls-key. Over https the
// server is verified against `ca_file`, or the system's trust store without one; `cert_file` and
// `key_file` (both or neither) are the client certificate for a server that asks for one. The
// files given to a plain http:// endpoint are an error (kInvalidArgument), not ignored.
Status ConfigureTls(const ApiEndpoint& endpoint, const std::string& ca_file,
                    const std::string& cert_file, const std::string& key_file, Options* o);

// The "Authorization: Basic ..." header line for --user, or "" without a user. The password is the
// first line of `password_file` (its newline not included; the file at most 4 KiB) or else
// `env_password` ($FABRICWATCH_PASSWORD), never a command-line argument, which every local user
// can read in /proc. kInvalidArgument for a user without a password, a password file without a
// user, a user name holding ':' or a control character, or an unreadable or empty file.
StatusOr<std::string> BasicAuthHeader(const std::string& user, const std::string& password_file,
                                      const char* env_password);

// A one-line warning when `o` sends credentials over plain HTTP to a host other than loopback
// (the password crosses the network readable); "" otherwise.
std::string PlainCredentialsWarning(const Options& o);

// "http://HOST:PORT" or "https://HOST:PORT" followed by `target`, for messages.
std::string ApiUrl(const Options& o, const std::string& target);

// What to add after "answered HTTP <status>": for 401, that credentials are needed (none were
// given) or were refused; for 404, whether this is the aggregator's HTTP port; else "".
std::string HttpStatusHint(const Options& o, int status);

// One request to the API with o.web (TLS, client certificate, credentials) and `timeout_ms`.
StatusOr<http::ClientResponse> ApiFetch(const Options& o, const std::string& method,
                                        const std::string& target, const std::string& body,
                                        int timeout_ms);

// GETs `target` from the API and parses the body. Every failure is a Status whose message names
// the address and what went wrong: unreachable (kUnavailable), an HTTP status other than 200 (401
// with a hint about --user), a body that is not JSON, or JSON that is not an array of objects when
// `want_array` (kInvalidArgument; the usual cause is a wrong port).
StatusOr<nlohmann::json> FetchJson(const Options& o, const std::string& target,
                                   bool want_array = true);

}  // namespace fw::cli
