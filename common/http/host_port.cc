#include "common/http/host_port.h"

namespace fw::http {

bool SplitHostPort(const std::string& s, std::string* host, int* port) {
  auto colon = s.rfind(':');
  if (colon == std::string::npos || colon + 1 >= s.size()) return false;
  *host = s.substr(0, colon);
  int p = 0;
  for (size_t i = colon + 1; i < s.size(); ++i) {
    if (s[i] < '0' || s[i] > '9') return false;
    p = p * 10 + (s[i] - '0');
    if (p > 65535) return false;
  }
  *port = p;
  return true;
}

}  // namespace fw::http
