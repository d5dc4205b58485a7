// Structured logging: one line per event, "ts=... level=... component=... msg=... key=value".
#pragma once

#include <spdlog/spdlog.h>

#include <string>
#include <string_view>

namespace fw {

// Configures the default spdlog logger for a daemon: logfmt-style lines on stderr.
// `level` is one of trace, debug, info, warn, error; unknown values fall back to info.
void InitLogging(std::string_view component, std::string_view level);

// Quotes a value for logfmt when it contains spaces, quotes or '='.
std::string LogQuote(std::string_view value);

}  // namespace fw
