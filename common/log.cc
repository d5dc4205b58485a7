// Structured logging set-up.
#include "common/log.h"

#include <spdlog/sinks/stdout_sinks.h>

namespace fw {

void InitLogging(std::string_view component, std::string_view level) {
  auto logger = spdlog::stderr_logger_mt(std::string(component));
  // %E is seconds since epoch; ISO 8601 with ms reads better in logs.
  logger->set_pattern("ts=%Y-%m-%dT%H:%M:%S.%eZ level=%l component=%n %v", spdlog::pattern_time_type::utc);
  auto lvl = spdlog::level::from_str(std::string(level));
  if (lvl == spdlog::level::off && level != "off") lvl = spdlog::level::info;
  logger->set_level(lvl);
  logger->flush_on(spdlog::level::info);
  spdlog::set_default_logger(logger);
}

std::string LogQuote(std::string_view value) {
  bool needs = value.empty();
  for (char c : value) {
    if (c == ' ' || c == '"' || c == '=' || c == '\n' || c == '\t') needs = true;
  }
  if (!needs) return std::string(value);
  std::string out = "\"";
  for (char c : value) {
    if (c == '"' || c == '\\') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  out += '"';
  return out;
}

}  // namespace fw
