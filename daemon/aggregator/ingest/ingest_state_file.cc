#include "daemon/aggregator/ingest/ingest_state_file.h"

#include <spdlog/spdlog.h>

#include <filesystem>
#include <fstream>
#include <sstream>

namespace fw::aggregator {

std::string IngestStatePath(const std::string& state_dir) {
  return state_dir.empty() ? "" : state_dir + "/ingest_state.json";
}

std::optional<QuarantinedFile> LoadIngestState(FleetState& fleet, const std::string& path,
                                               int64_t wall_ns) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::stringstream ss;
  ss << in.rdbuf();
  Status st = fleet.ImportIngestJson(ss.str());
  if (!st.ok()) {
    // A damaged state file costs dedup history, not availability; it is kept for a person.
    in.close();
    return QuarantineFile(path, st.message(), wall_ns);
  }
  spdlog::info("msg=\"ingest state restored\" file={}", path);
  return std::nullopt;
}

void SaveIngestState(const FleetState& fleet, const std::string& path) {
  std::string tmp = path + ".tmp";
  std::ofstream out(tmp, std::ios::trunc);
  out << fleet.ExportIngestJson();
  out.close();
  std::error_code ec;
  if (!out || (std::filesystem::rename(tmp, path, ec), ec)) {
    spdlog::error("msg=\"cannot save ingest state\" file={}", path);
  }
}

}  // namespace fw::aggregator
