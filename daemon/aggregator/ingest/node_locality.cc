// Check report document → compact affinity matrix and PCIe link rows, and back to JSON.
#include "daemon/aggregator/ingest/node_locality.h"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <limits>

namespace fw::aggregator {
namespace {

using nlohmann::json;

// The classes of `nvidia-smi topo -m`, closest first (probes/topology/affinity.h).
constexpr const char* kClassNames[] = {"PIX", "PXB", "PHB", "NODE", "SYS"};
constexpr uint8_t kNoClass = 0xff;

uint8_t ClassIndex(const std::string& name) {
  for (size_t i = 0; i < std::size(kClassNames); ++i) {
    if (name == kClassNames[i]) return static_cast<uint8_t>(i);
  }
  return kNoClass;
}

size_t IndexOf(std::vector<std::string>& names, const std::string& name) {
  auto it = std::find(names.begin(), names.end(), name);
  if (it != names.end()) return static_cast<size_t>(it - names.begin());
  names.push_back(name);
  return names.size() - 1;
}

std::string StringOr(const json& row, const char* key) {
  auto it = row.find(key);
  return it != row.end() && it->is_string() ? it->get<std::string>() : std::string();
}

float SpeedOr(const json& row, const char* key) {
  auto it = row.find(key);
  return it != row.end() && it->is_number() ? it->get<float>()
                                            : std::numeric_limits<float>::quiet_NaN();
}

int16_t WidthOr(const json& row, const char* key) {
  auto it = row.find(key);
  if (it == row.end() || !it->is_number_integer()) return -1;
  const int64_t v = it->get<int64_t>();
  return v >= 0 && v <= 64 ? static_cast<int16_t>(v) : -1;
}

}  // namespace

StatusOr<NodeLocality> LocalityFromCheckJson(std::string_view check_json) {
  const json doc = json::parse(check_json, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.is_object()) {
    return Status::InvalidArgument("check report: the document is not a JSON object");
  }
  const auto aff = doc.find("affinity");
  const auto pcie = doc.find("pcie");
  const bool has_aff = aff != doc.end() && aff->is_array();
  const bool has_pcie = pcie != doc.end() && pcie->is_array();
  if (!has_aff && !has_pcie) {
    return Status::InvalidArgument("check report: neither an 'affinity' nor a 'pcie' array");
  }
  NodeLocality out;
  out.reported = true;
  struct Cell {
    size_t gpu, nic;
    uint8_t cls;
  };
  std::vector<Cell> cells;
  if (has_aff) {
    for (const json& row : *aff) {
      if (!row.is_object()) continue;
      const std::string gpu = StringOr(row, "gpu"), nic = StringOr(row, "nic");
      const uint8_t cls = ClassIndex(StringOr(row, "class"));
      if (gpu.empty() || nic.empty() || cls == kNoClass) continue;
      cells.push_back({IndexOf(out.gpus, gpu), IndexOf(out.nics, nic), cls});
    }
  }
  out.classes.assign(out.gpus.size() * out.nics.size(), kNoClass);
  for (const Cell& c : cells) out.classes[c.gpu * out.nics.size() + c.nic] = c.cls;
  if (has_pcie) {
    for (const json& row : *pcie) {
      if (!row.is_object()) continue;
      PcieLinkState l;
      l.bdf = StringOr(row, "bdf");
      if (l.bdf.empty()) continue;
      l.role = StringOr(row, "role");
      l.owner = StringOr(row, "for");
      auto present = row.find("present");
      l.present = present != row.end() && present->is_boolean() && present->get<bool>();
      l.current_speed_gts = SpeedOr(row, "current_speed_gts");
      l.max_speed_gts = SpeedOr(row, "max_speed_gts");
      l.current_width = WidthOr(row, "current_width");
      l.max_width = WidthOr(row, "max_width");
      out.pcie.push_back(std::move(l));
    }
  }
  return out;
}

json AffinityJson(const NodeLocality& locality) {
  json out = json::array();
  const size_t nics = locality.nics.size();
  for (size_t g = 0; g < locality.gpus.size(); ++g) {
    for (size_t n = 0; n < nics; ++n) {
      const uint8_t cls = locality.classes[g * nics + n];
      if (cls >= std::size(kClassNames)) continue;
      out.push_back(
          {{"gpu", locality.gpus[g]}, {"nic", locality.nics[n]}, {"class", kClassNames[cls]}});
    }
  }
  return out;
}

json PcieJson(const NodeLocality& locality) {
  auto speed = [](float v) { return std::isfinite(v) ? json(v) : json(nullptr); };
  auto width = [](int16_t v) { return v >= 0 ? json(v) : json(nullptr); };
  json out = json::array();
  for (const PcieLinkState& l : locality.pcie) {
    out.push_back({{"bdf", l.bdf},
                   {"role", l.role},
                   {"for", l.owner},
                   {"present", l.present},
                   {"current_speed_gts", speed(l.current_speed_gts)},
                   {"max_speed_gts", speed(l.max_speed_gts)},
                   {"current_width", width(l.current_width)},
                   {"max_width", width(l.max_width)}});
  }
  return out;
}

}  // namespace fw::aggregator
