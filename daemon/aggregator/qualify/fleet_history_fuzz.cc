// libFuzzer target: the fleet history reads any JSON (a stored history) without crashing, keeps
// only positive finite medians of known classes, and counts what it left out.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "daemon/aggregator/qualify/fleet_history.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return 0;
  fw::qualify::FleetHistory h;
  const size_t skipped = h.Load(j);
  if (h.skipped() != skipped) std::abort();
  for (const auto& [cls, b] : h.Baselines()) {
    if (!fw::qualify::FleetHistory::KnownClass(cls) || !std::isfinite(b.rtt_p99_s) ||
        b.rtt_p99_s <= 0 || b.runs < fw::qualify::FleetHistory::kMinRuns ||
        b.runs > fw::qualify::FleetHistory::kMaxRuns) {
      std::abort();
    }
  }
  return 0;
}
