// Where the CLI finds the aggregator's HTTP API, and fetching its JSON documents.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "common/status.h"

namespace fw::cli {

inline constexpr const char* kDefaultApi = "127.0.0.1:9751";
inline constexpr const char* kApiEnv = "FABRICWATCH_API";

// The address the user gave, from the strongest source down: --api, then the deprecated
// --aggregator, then $FABRICWATCH_API, then kDefaultApi. Accepts HOST:PORT and http://HOST:PORT[/].
// Fails with kInvalidArgument when --api and --aggregator disagree, for https:// (this client
// speaks plain HTTP) or for a value that is not HOST:PORT. `deprecation_note` gets the one-line
// note to print when --aggregator was used, and stays empty otherwise.
StatusOr<std::string> ResolveApiAddress(const std::optional<std::string>& api_flag,
                                        const std::optional<std::string>& aggregator_flag,
                                        const char* env_value, std::string* deprecation_note);

// GETs `target` from the API at `address` and parses the body. Every failure is a Status whose
// message names the address and what went wrong: unreachable (kUnavailable), an HTTP status other
// than 200, a body that is not JSON, or JSON that is not an array of objects when `want_array`
// (kInvalidArgument; the usual cause is a wrong port).
StatusOr<nlohmann::json> FetchJson(const std::string& address, const std::string& target,
                                   int timeout_ms, bool want_array = true);

}  // namespace fw::cli
