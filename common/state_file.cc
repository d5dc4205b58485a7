// Quarantine of corrupt state files.
#include "common/state_file.h"

#include <ctime>
#include <filesystem>
#include <system_error>

#include "common/log.h"

namespace fw {

QuarantinedFile QuarantineFile(const std::string& path, const std::string& error, int64_t wall_ns,
                               std::initializer_list<const char*> companions) {
  namespace fs = std::filesystem;
  QuarantinedFile q;
  q.file = fs::path(path).filename().string();
  q.from = path;
  q.error = error;
  const std::time_t secs = static_cast<std::time_t>(wall_ns / 1'000'000'000);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%Y%m%dT%H%M%SZ", &tm);
  std::string to = path + ".corrupt-" + stamp;
  std::error_code ec;
  // Two quarantines in one second (a crash loop) must not overwrite the first one's evidence.
  for (int n = 1; fs::exists(to, ec) && n < 1000; ++n) {
    to = path + ".corrupt-" + stamp + "-" + std::to_string(n);
  }
  fs::rename(path, to, ec);
  if (ec) {
    spdlog::error(
        "msg=\"corrupt state file could not be moved aside\" file={} error={} rename_error={}",
        LogQuote(path), LogQuote(error), LogQuote(ec.message()));
    return q;
  }
  q.to = to;
  for (const char* suffix : companions) {
    const std::string side = path + suffix;
    if (!fs::exists(side, ec)) continue;
    fs::rename(side, to + suffix, ec);
    // A journal left beside the fresh file would be replayed into it.
    if (ec) fs::remove(side, ec);
  }
  spdlog::error(
      "msg=\"corrupt state file moved aside; starting fresh\" file={} error={} moved_to={}",
      LogQuote(path), LogQuote(error), LogQuote(to));
  return q;
}

}  // namespace fw
