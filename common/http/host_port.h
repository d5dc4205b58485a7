// "host:port" as the daemons' flags and the clients take it.
#pragma once

#include <string>

namespace fw::http {

// Splits "host:port" at the last colon; false when there is no port, the port is not all digits or
// it is above 65535. The host may be empty (the caller's default applies).
bool SplitHostPort(const std::string& s, std::string* host, int* port);

}  // namespace fw::http
