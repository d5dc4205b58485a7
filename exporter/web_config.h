// The HTTP servers' web config file (--web-config), in the format of the Prometheus exporter
// toolkit (https://github.com/prometheus/exporter-toolkit/blob/master/docs/web-configuration.md):
//
//   tls_server_config:
//     cert_file: /etc/fabricwatch/tls/web.crt
//     key_file: /etc/fabricwatch/tls/web.key
//     client_auth_type: RequireAndVerifyClientCert   # default NoClientCert
//     client_ca_file: /etc/fabricwatch/tls/ca.crt
//     min_version: TLS12                             # TLS12 (default) or TLS13
//   basic_auth_users:
//     alice: $2y$10$...          # bcrypt ($2a$, $2b$, $2y$) or SHA-256-crypt ($5$)
//
// Relative paths are relative to the config file's directory. Keys of the toolkit that fabricwatch
// does not implement (cipher_suites, http_server_config, ...) are errors, not silently ignored.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <unordered_set>

#include "common/mutex.h"
#include "common/status.h"

namespace fw::http {

enum class ClientAuth {
  kNoClientCert,                // no certificate asked for
  kRequestClientCert,           // asked for, not required, not verified
  kRequireAnyClientCert,        // required, not verified
  kVerifyClientCertIfGiven,     // not required; verified against client_ca_file when sent
  kRequireAndVerifyClientCert,  // required and verified against client_ca_file
};

struct WebTlsConfig {
  std::string cert_file;
  std::string key_file;
  std::string client_ca_file;  // required by the two verifying client_auth_types
  ClientAuth client_auth = ClientAuth::kNoClientCert;
  bool min_tls13 = false;  // min_version: TLS13
};

struct WebConfig {
  bool tls = false;  // tls_server_config was given
  WebTlsConfig tls_config;
  // user -> password hash ($2a$/$2b$/$2y$ bcrypt or $5$ SHA-256-crypt), checked for shape.
  std::map<std::string, std::string> users;

  bool auth_configured() const { return !users.empty(); }
};

// Bounds on what a web config may hold; past them the file is refused.
inline constexpr size_t kMaxWebConfigBytes = 64 * 1024;
inline constexpr size_t kMaxWebUsers = 256;
inline constexpr size_t kMaxUserNameBytes = 256;
inline constexpr int kMaxBcryptCost = 16;  // 2^16 rounds: ~4 s per check
inline constexpr int64_t kMaxSha256CryptRounds = 1000000;

// Parses web config YAML. `base_dir` resolves relative file paths ("" leaves them as written).
// Every error names `source` and the key. Never throws; never reads the files it names.
StatusOr<WebConfig> ParseWebConfig(std::string_view yaml, const std::string& source,
                                   const std::string& base_dir);

// Reads and parses a web config file (at most kMaxWebConfigBytes), and checks that the files it
// names are readable, so that a wrong path fails at start.
StatusOr<WebConfig> LoadWebConfigFile(const std::string& path);

// Checks HTTP basic-auth credentials against a WebConfig's users. A hash is computed once per
// attempt (bcrypt costs ~50-100 ms at cost 10, on purpose); credentials that matched are
// remembered (as a SHA-256 of user and password) so a scraper's every request does not pay it.
// An unknown user costs the same hash as a known one. Thread-safe.
class BasicAuth {
 public:
  explicit BasicAuth(std::map<std::string, std::string> users) : users_(std::move(users)) {}

  // True when `authorization` (the header's value, "Basic base64(user:password)") names a user
  // whose hash matches the password. `user` (optional) receives the user name sent, for logs.
  bool Check(std::string_view authorization, std::string* user = nullptr);

  // True when `password` matches the crypt(3) `hash`. Exposed for tests.
  static bool VerifyPassword(std::string_view password, const std::string& hash);

 private:
  std::map<std::string, std::string> users_;
  Mutex mu_;
  std::unordered_set<std::string> verified_ FW_GUARDED_BY(mu_);  // SHA-256(user \0 password)
  static constexpr size_t kMaxVerified = 1024;
};

// Decodes standard base64 (with or without padding). Fails on any other character.
StatusOr<std::string> DecodeBase64(std::string_view in);

}  // namespace fw::http
