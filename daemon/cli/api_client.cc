// Address resolution, TLS and credential options, and JSON fetches for the CLI.
#include "daemon/cli/api_client.h"

#include <fstream>

#include "common/http/host_port.h"
#include "common/http/http_client.h"

namespace fw::cli {
namespace {

StatusOr<ApiEndpoint> Normalize(std::string value, const char* source) {
  ApiEndpoint e;
  if (value.rfind("https://", 0) == 0) {
    e.tls = true;
    value.erase(0, 8);
  } else if (value.rfind("http://", 0) == 0) {
    value.erase(0, 7);
  }
  while (!value.empty() && value.back() == '/') value.pop_back();
  const size_t colon = value.rfind(':');
  if (value.empty() || colon == std::string::npos || colon == 0 || colon + 1 == value.size() ||
      value.find('/') != std::string::npos ||
      value.find_first_not_of("0123456789", colon + 1) != std::string::npos) {
    return Status::InvalidArgument(std::string(source) + " '" + value +
                                   "': expected HOST:PORT, e.g. 127.0.0.1:9751");
  }
  e.address = std::move(value);
  return e;
}

constexpr size_t kMaxPasswordFile = 4096;

}  // namespace

StatusOr<ApiEndpoint> ResolveApiAddress(const std::optional<std::string>& api_flag,
                                        const std::optional<std::string>& aggregator_flag,
                                        const char* env_value, std::string* deprecation_note) {
  deprecation_note->clear();
  if (aggregator_flag) {
    *deprecation_note =
        "fabricwatch: --aggregator is deprecated here (the agent's --aggregator is a gRPC "
        "address); use --api HOST:PORT or FABRICWATCH_API for the aggregator's HTTP API";
  }
  if (api_flag && aggregator_flag) {
    auto a = Normalize(*api_flag, "--api"), b = Normalize(*aggregator_flag, "--aggregator");
    if (!a.ok()) return a;
    if (!b.ok()) return b;
    if (a->address != b->address || a->tls != b->tls) {
      return Status::InvalidArgument("--api " + *api_flag + " and --aggregator " +
                                     *aggregator_flag + " disagree; give only --api");
    }
    return a;
  }
  if (api_flag) return Normalize(*api_flag, "--api");
  if (aggregator_flag) return Normalize(*aggregator_flag, "--aggregator");
  if (env_value && *env_value) return Normalize(env_value, kApiEnv);
  return ApiEndpoint{kDefaultApi, false};
}

Status ConfigureTls(const ApiEndpoint& endpoint, const std::string& ca_file,
                    const std::string& cert_file, const std::string& key_file, Options* o) {
  if (!endpoint.tls && (!ca_file.empty() || !cert_file.empty() || !key_file.empty())) {
    return Status::InvalidArgument(
        "--tls-ca, --tls-cert and --tls-key need an https:// API address (--api https://" +
        endpoint.address + ")");
  }
  if (cert_file.empty() != key_file.empty()) {
    return Status::InvalidArgument("--tls-cert and --tls-key go together");
  }
  o->web.tls = endpoint.tls;
  o->web.ca_file = ca_file;
  o->web.verify_with_system_ca = endpoint.tls && ca_file.empty();
  o->web.cert_file = cert_file;
  o->web.key_file = key_file;
  return Status::Ok();
}

StatusOr<std::string> BasicAuthHeader(const std::string& user, const std::string& password_file,
                                      const char* env_password) {
  if (user.empty()) {
    if (!password_file.empty()) return Status::InvalidArgument("--password-file needs --user");
    return std::string();
  }
  for (unsigned char c : user) {
    if (c == ':' || c < 0x20 || c == 0x7f) {
      return Status::InvalidArgument("--user must not hold ':' or control characters");
    }
  }
  std::string password;
  if (!password_file.empty()) {
    std::ifstream in(password_file, std::ios::binary);
    if (!in)
      return Status::InvalidArgument("--password-file " + password_file + ": cannot read it");
    std::string content(kMaxPasswordFile + 1, '\0');
    in.read(content.data(), static_cast<std::streamsize>(content.size()));
    content.resize(static_cast<size_t>(in.gcount()));
    if (content.size() > kMaxPasswordFile) {
      return Status::InvalidArgument("--password-file " + password_file + ": over 4 KiB");
    }
    password = content.substr(0, content.find('\n'));
    if (!password.empty() && password.back() == '\r') password.pop_back();
    if (password.empty()) {
      return Status::InvalidArgument("--password-file " + password_file +
                                     ": its first line is empty");
    }
  } else if (env_password != nullptr && *env_password != '\0') {
    password = env_password;
  } else {
    return Status::InvalidArgument("--user " + user +
                                   " needs a password: --password-file FILE or $" + kPasswordEnv);
  }
  return "Authorization: " + http::BasicAuthorization(user, password);
}

std::string PlainCredentialsWarning(const Options& o) {
  if (o.web.tls || o.web.headers.empty()) return "";
  std::string host;
  int port = 0;
  if (http::SplitHostPort(o.api, &host, &port) &&
      (host.empty() || host == "localhost" || host.rfind("127.", 0) == 0 || host == "0.0.0.0")) {
    return "";
  }
  return "fabricwatch: warning: sending the password to " + o.api +
         " over plain HTTP; use --api https://" + o.api + " when its web config has TLS";
}

std::string HttpStatusHint(const Options& o, int status) {
  if (status == 401) {
    return o.web.headers.empty()
               ? " (the API wants credentials: --user NAME with --password-file FILE or $" +
                     std::string(kPasswordEnv) + ")"
               : " (the user or password was not accepted)";
  }
  if (status == 404) return " (is " + o.api + " the aggregator's HTTP port?)";
  return "";
}

std::string ApiUrl(const Options& o, const std::string& target) {
  return (o.web.tls ? "https://" : "http://") + o.api + target;
}

StatusOr<http::ClientResponse> ApiFetch(const Options& o, const std::string& method,
                                        const std::string& target, const std::string& body,
                                        int timeout_ms) {
  return http::FetchWeb(o.api, method, target, o.web, timeout_ms, body);
}

StatusOr<nlohmann::json> FetchJson(const Options& o, const std::string& target, bool want_array) {
  auto r = ApiFetch(o, "GET", target, "", o.timeout_ms);
  if (!r.ok()) {
    return Status(r.status().code(), "cannot reach the aggregator's HTTP API at " + o.api + ": " +
                                         r.status().message());
  }
  if (r->status != 200) {
    return Status::InvalidArgument(ApiUrl(o, target) + " answered HTTP " +
                                   std::to_string(r->status) + HttpStatusHint(o, r->status));
  }
  nlohmann::json j = nlohmann::json::parse(r->body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) {
    return Status::InvalidArgument(ApiUrl(o, target) +
                                   " did not return JSON (is it the aggregator's HTTP API?)");
  }
  if (want_array && !j.is_array()) {
    return Status::InvalidArgument(ApiUrl(o, target) + " returned JSON " + j.type_name() +
                                   ", expected an array");
  }
  if (want_array) {
    for (const nlohmann::json& row : j) {
      if (!row.is_object()) {
        return Status::InvalidArgument(ApiUrl(o, target) + " returned an array with " +
                                       row.type_name() + " elements, expected objects");
      }
    }
  }
  return j;
}

}  // namespace fw::cli
