// Query-string parsing shared by the /api/v1 handlers.
#include "daemon/aggregator/api/query_string.h"

namespace fw::aggregator {
namespace {

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

std::string Decode(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '+') {
      out += ' ';
    } else if (s[i] == '%' && i + 2 < s.size() && HexValue(s[i + 1]) >= 0 &&
               HexValue(s[i + 2]) >= 0) {
      out += static_cast<char>(HexValue(s[i + 1]) * 16 + HexValue(s[i + 2]));
      i += 2;
    } else {
      out += s[i];
    }
  }
  return out;
}

}  // namespace

std::vector<std::pair<std::string, std::string>> ParseQueryString(std::string_view qs) {
  std::vector<std::pair<std::string, std::string>> out;
  if (!qs.empty() && qs.front() == '?') qs.remove_prefix(1);
  while (!qs.empty()) {
    const size_t amp = qs.find('&');
    const std::string_view part = qs.substr(0, amp);
    qs = amp == std::string_view::npos ? std::string_view() : qs.substr(amp + 1);
    if (part.empty()) continue;
    const size_t eq = part.find('=');
    out.emplace_back(Decode(part.substr(0, eq)),
                     eq == std::string_view::npos ? std::string() : Decode(part.substr(eq + 1)));
  }
  return out;
}

}  // namespace fw::aggregator
