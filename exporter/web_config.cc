// Web config parsing (yaml-cpp, bounded before parsing) and basic-auth checks (libxcrypt).
#include "exporter/web_config.h"

#include <crypt.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <yaml-cpp/yaml.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

namespace fw::http {

namespace {

// yaml-cpp recurses once per nesting level (flow brackets, and "- - -" block sequences on one
// line). A web config is three levels deep, so anything far past that is refused before yaml-cpp
// sees it, and garbage cannot exhaust the stack.
Status CheckShape(std::string_view yaml, const std::string& source) {
  if (yaml.size() > kMaxWebConfigBytes) {
    return Status::InvalidArgument(source + ": larger than " + std::to_string(kMaxWebConfigBytes) +
                                   " bytes");
  }
  size_t brackets = 0;
  int dashes = 0;
  bool line_start = true;
  for (size_t i = 0; i < yaml.size(); ++i) {
    const char c = yaml[i];
    if (c == '[' || c == '{') ++brackets;
    if (c == '\n') {
      line_start = true;
      dashes = 0;
    } else if (line_start && c == '-' && i + 1 < yaml.size() &&
               (yaml[i + 1] == ' ' || yaml[i + 1] == '\t')) {
      if (++dashes > 8) break;
    } else if (c != ' ' && c != '\t') {
      line_start = false;
    }
  }
  if (brackets > 64 || dashes > 8) {
    return Status::InvalidArgument(source + ": nested too deeply for a web config");
  }
  return Status::Ok();
}

bool AllOf(std::string_view s, const char* allowed) {
  return s.find_first_not_of(allowed) == std::string_view::npos;
}

constexpr const char* kCryptAlphabet =
    "./0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

// Checks that `hash` is a bcrypt or SHA-256-crypt string whose cost is bounded.
Status CheckHash(const std::string& hash) {
  // bcrypt: $2b$NN$ + 22 salt + 31 hash characters.
  if (hash.size() == 60 && hash[0] == '$' && hash[1] == '2' &&
      (hash[2] == 'a' || hash[2] == 'b' || hash[2] == 'y') && hash[3] == '$' && hash[6] == '$') {
    if (!AllOf(hash.substr(4, 2), "0123456789")) return Status::InvalidArgument("bad bcrypt cost");
    const int cost = std::stoi(hash.substr(4, 2));
    if (cost < 4 || cost > kMaxBcryptCost) {
      return Status::InvalidArgument("bcrypt cost " + std::to_string(cost) + " is outside 4.." +
                                     std::to_string(kMaxBcryptCost));
    }
    if (!AllOf(std::string_view(hash).substr(7), kCryptAlphabet)) {
      return Status::InvalidArgument("bcrypt hash holds characters outside its alphabet");
    }
    return Status::Ok();
  }
  // SHA-256-crypt: $5$[rounds=N$]salt$hash (salt <= 16, hash 43 characters).
  if (hash.rfind("$5$", 0) == 0) {
    std::string_view rest = std::string_view(hash).substr(3);
    if (rest.rfind("rounds=", 0) == 0) {
      size_t end = rest.find('$');
      std::string_view digits = rest.substr(7, end == std::string_view::npos ? 0 : end - 7);
      if (digits.empty() || digits.size() > 9 || !AllOf(digits, "0123456789")) {
        return Status::InvalidArgument("bad SHA-256-crypt rounds");
      }
      if (std::stoll(std::string(digits)) > kMaxSha256CryptRounds) {
        return Status::InvalidArgument("SHA-256-crypt rounds above " +
                                       std::to_string(kMaxSha256CryptRounds));
      }
      rest = rest.substr(end + 1);
    }
    size_t dollar = rest.find('$');
    if (dollar == std::string_view::npos || dollar == 0 || dollar > 16 ||
        rest.size() - dollar - 1 != 43 || !AllOf(rest.substr(0, dollar), kCryptAlphabet) ||
        !AllOf(rest.substr(dollar + 1), kCryptAlphabet)) {
      return Status::InvalidArgument("not a SHA-256-crypt ($5$salt$hash) string");
    }
    return Status::Ok();
  }
  return Status::InvalidArgument(
      "not a bcrypt ($2a$/$2b$/$2y$) or SHA-256-crypt ($5$) hash (plain passwords are refused)");
}

std::string Resolve(const std::string& path, const std::string& base_dir) {
  if (path.empty() || path[0] == '/' || base_dir.empty()) return path;
  return (std::filesystem::path(base_dir) / path).string();
}

StatusOr<std::string> ScalarString(const YAML::Node& n, const std::string& where) {
  if (!n.IsScalar()) return Status::InvalidArgument(where + ": must be a string");
  return n.Scalar();
}

Status ParseTls(const YAML::Node& node, const std::string& source, const std::string& base_dir,
                WebTlsConfig* tls) {
  if (!node.IsMap()) return Status::InvalidArgument(source + ": tls_server_config: must be a map");
  std::string auth = "NoClientCert";
  for (const auto& kv : node) {
    if (!kv.first.IsScalar())
      return Status::InvalidArgument(source + ": tls_server_config: bad key");
    const std::string key = kv.first.Scalar();
    const std::string where = source + ": tls_server_config." + key;
    auto value = ScalarString(kv.second, where);
    if (!value.ok()) return value.status();
    if (key == "cert_file") {
      tls->cert_file = Resolve(*value, base_dir);
    } else if (key == "key_file") {
      tls->key_file = Resolve(*value, base_dir);
    } else if (key == "client_ca_file") {
      tls->client_ca_file = Resolve(*value, base_dir);
    } else if (key == "client_auth_type") {
      auth = *value;
    } else if (key == "min_version") {
      if (*value == "TLS13") {
        tls->min_tls13 = true;
      } else if (*value != "TLS12") {
        return Status::InvalidArgument(where + ": '" + *value + "' is not TLS12 or TLS13");
      }
    } else {
      return Status::InvalidArgument(where + ": unknown or unsupported key");
    }
  }
  static const std::pair<const char*, ClientAuth> kAuth[] = {
      {"NoClientCert", ClientAuth::kNoClientCert},
      {"RequestClientCert", ClientAuth::kRequestClientCert},
      {"RequireAnyClientCert", ClientAuth::kRequireAnyClientCert},
      {"VerifyClientCertIfGiven", ClientAuth::kVerifyClientCertIfGiven},
      {"RequireAndVerifyClientCert", ClientAuth::kRequireAndVerifyClientCert}};
  bool known = false;
  for (const auto& [name, value] : kAuth) {
    if (auth == name) {
      tls->client_auth = value;
      known = true;
    }
  }
  if (!known) {
    return Status::InvalidArgument(source + ": tls_server_config.client_auth_type: '" + auth +
                                   "' is not one of NoClientCert, RequestClientCert, "
                                   "RequireAnyClientCert, VerifyClientCertIfGiven, "
                                   "RequireAndVerifyClientCert");
  }
  if (tls->cert_file.empty() || tls->key_file.empty()) {
    return Status::InvalidArgument(source +
                                   ": tls_server_config needs both cert_file and key_file");
  }
  const bool verifies = tls->client_auth == ClientAuth::kVerifyClientCertIfGiven ||
                        tls->client_auth == ClientAuth::kRequireAndVerifyClientCert;
  if (verifies && tls->client_ca_file.empty()) {
    return Status::InvalidArgument(source + ": tls_server_config.client_auth_type " + auth +
                                   " needs client_ca_file");
  }
  if (!verifies && !tls->client_ca_file.empty()) {
    return Status::InvalidArgument(source + ": tls_server_config.client_ca_file is given but " +
                                   auth + " does not verify client certificates");
  }
  return Status::Ok();
}

Status ParseUsers(const YAML::Node& node, const std::string& source, WebConfig* config) {
  if (!node.IsMap()) return Status::InvalidArgument(source + ": basic_auth_users: must be a map");
  for (const auto& kv : node) {
    if (!kv.first.IsScalar() || kv.first.Scalar().empty() ||
        kv.first.Scalar().size() > kMaxUserNameBytes ||
        kv.first.Scalar().find(':') != std::string::npos) {
      return Status::InvalidArgument(source + ": basic_auth_users: a user name must be 1.." +
                                     std::to_string(kMaxUserNameBytes) + " bytes without ':'");
    }
    const std::string user = kv.first.Scalar();
    auto hash = ScalarString(kv.second, source + ": basic_auth_users." + user);
    if (!hash.ok()) return hash.status();
    Status st = CheckHash(*hash);
    if (!st.ok()) {
      return Status::InvalidArgument(source + ": basic_auth_users." + user + ": " + st.message());
    }
    if (config->users.size() >= kMaxWebUsers) {
      return Status::InvalidArgument(source + ": basic_auth_users: more than " +
                                     std::to_string(kMaxWebUsers) + " users");
    }
    config->users[user] = *hash;
  }
  return Status::Ok();
}

Status CheckReadable(const std::string& path, const std::string& what) {
  std::ifstream in(path);
  if (!in) return Status::NotFound(what + " " + path + ": cannot read: " + std::strerror(errno));
  return Status::Ok();
}

}  // namespace

StatusOr<WebConfig> ParseWebConfig(std::string_view yaml, const std::string& source,
                                   const std::string& base_dir) {
  Status shape = CheckShape(yaml, source);
  if (!shape.ok()) return shape;
  WebConfig config;
  try {
    YAML::Node root = YAML::Load(std::string(yaml));
    if (root.IsNull()) return config;  // an empty file: plain HTTP, no users
    if (!root.IsMap()) return Status::InvalidArgument(source + ": the top level must be a map");
    for (const auto& kv : root) {
      if (!kv.first.IsScalar()) return Status::InvalidArgument(source + ": bad top-level key");
      const std::string key = kv.first.Scalar();
      if (key == "tls_server_config") {
        if (kv.second.IsNull()) continue;
        config.tls = true;
        Status st = ParseTls(kv.second, source, base_dir, &config.tls_config);
        if (!st.ok()) return st;
      } else if (key == "basic_auth_users") {
        if (kv.second.IsNull()) continue;
        Status st = ParseUsers(kv.second, source, &config);
        if (!st.ok()) return st;
      } else {
        return Status::InvalidArgument(source + ": " + key +
                                       ": unknown or unsupported key (fabricwatch reads "
                                       "tls_server_config and basic_auth_users)");
      }
    }
  } catch (const YAML::Exception& e) {
    return Status::InvalidArgument(source + ": invalid YAML at line " +
                                   std::to_string(e.mark.line + 1) + ": " + e.msg);
  }
  return config;
}

StatusOr<WebConfig> LoadWebConfigFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return Status::NotFound("--web-config " + path + ": cannot read: " + std::strerror(errno));
  }
  std::string data(kMaxWebConfigBytes + 1, '\0');
  in.read(data.data(), static_cast<std::streamsize>(data.size()));
  data.resize(static_cast<size_t>(in.gcount()));
  const std::string dir = std::filesystem::path(path).parent_path().string();
  auto config = ParseWebConfig(data, "--web-config " + path, dir.empty() ? "." : dir);
  if (!config.ok() || !config->tls) return config;
  const WebTlsConfig& t = config->tls_config;
  for (const auto& [file, what] :
       {std::pair{t.cert_file, "tls_server_config.cert_file"},
        std::pair{t.key_file, "tls_server_config.key_file"},
        std::pair{t.client_ca_file, "tls_server_config.client_ca_file"}}) {
    if (file.empty()) continue;
    Status st = CheckReadable(file, path + ": " + what);
    if (!st.ok()) return st;
  }
  return config;
}

StatusOr<std::string> DecodeBase64(std::string_view in) {
  while (!in.empty() && in.back() == '=') in.remove_suffix(1);
  std::string out;
  out.reserve(in.size() * 3 / 4);
  uint32_t acc = 0;
  int bits = 0;
  for (char c : in) {
    int v;
    if (c >= 'A' && c <= 'Z') {
      v = c - 'A';
    } else if (c >= 'a' && c <= 'z') {
      v = c - 'a' + 26;
    } else if (c >= '0' && c <= '9') {
      v = c - '0' + 52;
    } else if (c == '+') {
      v = 62;
    } else if (c == '/') {
      v = 63;
    } else {
      return Status::InvalidArgument("not base64");
    }
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<char>((acc >> bits) & 0xff));
    }
  }
  if (bits >= 6) return Status::InvalidArgument("truncated base64");
  return out;
}

bool BasicAuth::VerifyPassword(std::string_view password, const std::string& hash) {
  if (password.find('\0') != std::string_view::npos) return false;
  struct crypt_data data;
  std::memset(&data, 0, sizeof data);
  const std::string pw(password);
  const char* out = crypt_r(pw.c_str(), hash.c_str(), &data);
  // On a bad setting libxcrypt returns a string starting with '*' (or NULL): never equal.
  if (out == nullptr || out[0] == '*') return false;
  const size_t n = std::strlen(out);
  return n == hash.size() && CRYPTO_memcmp(out, hash.data(), n) == 0;
}

bool BasicAuth::Check(std::string_view authorization, std::string* user_out) {
  constexpr std::string_view kBasic = "Basic ";
  if (authorization.size() > 4096 || authorization.size() <= kBasic.size()) return false;
  // The scheme is case-insensitive (RFC 7617).
  for (size_t i = 0; i < kBasic.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(authorization[i])) !=
        std::tolower(static_cast<unsigned char>(kBasic[i]))) {
      return false;
    }
  }
  std::string_view b64 = authorization.substr(kBasic.size());
  while (!b64.empty() && b64.front() == ' ') b64.remove_prefix(1);
  auto decoded = DecodeBase64(b64);
  if (!decoded.ok()) return false;
  const size_t colon = decoded->find(':');
  if (colon == std::string::npos) return false;
  const std::string user = decoded->substr(0, colon);
  const std::string_view password = std::string_view(*decoded).substr(colon + 1);
  if (user_out != nullptr) *user_out = user;

  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int digest_len = 0;
  if (EVP_Digest(decoded->data(), decoded->size(), digest, &digest_len, EVP_sha256(), nullptr) !=
      1) {
    return false;
  }
  const std::string key(reinterpret_cast<const char*>(digest), digest_len);
  {
    MutexLock lock(mu_);
    if (verified_.count(key) != 0) return true;
  }
  auto it = users_.find(user);
  // An unknown user is checked against a known user's hash (failing), so that the time taken
  // does not tell which user names exist.
  if (it == users_.end()) {
    if (!users_.empty()) (void)VerifyPassword("\x01 not a password", users_.begin()->second);
    return false;
  }
  if (!VerifyPassword(password, it->second)) return false;
  MutexLock lock(mu_);
  if (verified_.size() >= kMaxVerified) verified_.clear();
  verified_.insert(key);
  return true;
}

}  // namespace fw::http
