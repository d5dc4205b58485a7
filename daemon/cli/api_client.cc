// Address resolution and JSON fetches for the CLI.
#include "daemon/cli/api_client.h"

#include "common/http/http_client.h"

namespace fw::cli {
namespace {

StatusOr<std::string> Normalize(std::string value, const char* source) {
  if (value.rfind("https://", 0) == 0) {
    return Status::InvalidArgument(std::string(source) + " '" + value +
                                   "': https is not supported; give the plain HTTP address");
  }
  if (value.rfind("http://", 0) == 0) value.erase(0, 7);
  while (!value.empty() && value.back() == '/') value.pop_back();
  const size_t colon = value.rfind(':');
  if (value.empty() || colon == std::string::npos || colon == 0 || colon + 1 == value.size() ||
      value.find('/') != std::string::npos ||
      value.find_first_not_of("0123456789", colon + 1) != std::string::npos) {
    return Status::InvalidArgument(std::string(source) + " '" + value +
                                   "': expected HOST:PORT, e.g. 127.0.0.1:9751");
  }
  return value;
}

}  // namespace

StatusOr<std::string> ResolveApiAddress(const std::optional<std::string>& api_flag,
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
    if (*a != *b) {
      return Status::InvalidArgument("--api " + *a + " and --aggregator " + *b +
                                     " disagree; give only --api");
    }
    return a;
  }
  if (api_flag) return Normalize(*api_flag, "--api");
  if (aggregator_flag) return Normalize(*aggregator_flag, "--aggregator");
  if (env_value && *env_value) return Normalize(env_value, kApiEnv);
  return std::string(kDefaultApi);
}

StatusOr<nlohmann::json> FetchJson(const std::string& address, const std::string& target,
                                   int timeout_ms, bool want_array) {
  auto r = http::Get(address, target, timeout_ms);
  if (!r.ok()) {
    return Status(r.status().code(), "cannot reach the aggregator's HTTP API at " + address + ": " +
                                         r.status().message());
  }
  if (r->status != 200) {
    std::string hint;
    if (r->status == 404) hint = " (is " + address + " the aggregator's HTTP port?)";
    return Status::InvalidArgument("http://" + address + target + " answered HTTP " +
                                   std::to_string(r->status) + hint);
  }
  nlohmann::json j = nlohmann::json::parse(r->body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) {
    return Status::InvalidArgument("http://" + address + target +
                                   " did not return JSON (is it the aggregator's HTTP API?)");
  }
  if (want_array && !j.is_array()) {
    return Status::InvalidArgument("http://" + address + target + " returned JSON " +
                                   j.type_name() + ", expected an array");
  }
  if (want_array) {
    for (const nlohmann::json& row : j) {
      if (!row.is_object()) {
        return Status::InvalidArgument("http://" + address + target + " returned an array with " +
                                       row.type_name() + " elements, expected objects");
      }
    }
  }
  return j;
}

}  // namespace fw::cli
