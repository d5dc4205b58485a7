// Rails in findings: the rail of a link, NIC or switch of a multi-rail fabric, in the evidence and
// the summary, so that a rail's fault reads as that rail's.
#include <cctype>

#include "daemon/aggregator/analysis/blamer.h"

namespace fw::analysis::blame {
namespace {

// Where `name` stands alone in `text` (not inside a longer link id or name); npos when nowhere.
size_t FindName(const std::string& text, const std::string& name) {
  auto part_of_name = [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '~' ||
           c == '/';
  };
  for (size_t at = text.find(name); at != std::string::npos; at = text.find(name, at + 1)) {
    const size_t end = at + name.size();
    const bool starts = at == 0 || !part_of_name(text[at - 1]);
    const bool ends = end == text.size() || !part_of_name(text[end]);
    if (starts && ends) return at;
  }
  return std::string::npos;
}

}  // namespace

void Blamer::AddRail(Finding& f) const {
  if (!ctx_.rails || !ctx_.rails->multi_rail() || f.evidence.contains("rail")) return;
  const std::optional<uint32_t> rail = ctx_.rails->OfLocation(f.location);
  if (!rail) return;
  f.evidence["rail"] = *rail;
  const std::string said = Fmt(" (rail %.0f)", *rail);
  const std::string name =
      f.location.type == "nic" ? f.location.device + " on " + f.location.node : f.location.id;
  const size_t at = FindName(f.summary, name);
  if (at != std::string::npos) {
    f.summary.insert(at + name.size(), said);
  } else {
    f.summary += Fmt(" It is on rail %.0f.", *rail);
  }
}

}  // namespace fw::analysis::blame
