// Splitting and percent-decoding of HTTP query strings for the API handlers.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace fw::aggregator {

// "?a=1&b=x%20y&c" → {{"a", "1"}, {"b", "x y"}, {"c", ""}}: a leading '?' is skipped, '+' is a
// space, a malformed escape is kept literally, and parameters keep their order (repeats too).
std::vector<std::pair<std::string, std::string>> ParseQueryString(std::string_view query_string);

}  // namespace fw::aggregator
