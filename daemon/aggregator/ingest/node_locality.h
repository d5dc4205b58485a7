// A node's GPU↔NIC affinity matrix and PCIe link state, kept from its agent's latest check report
// for the /api/v1/nodes view (`inventory.affinity`, `inventory.pcie`).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace fw::aggregator {

struct PcieLinkState {
  std::string bdf;
  std::string role;   // gpu | nic | bridge
  std::string owner;  // the GPU or NIC the link leads to ("for" in JSON)
  bool present = false;
  // Unknown values are NaN (speeds) and -1 (widths); they render as null.
  float current_speed_gts = 0, max_speed_gts = 0;
  int16_t current_width = -1, max_width = -1;
};

// Stored as a matrix (names once, one byte per class) because a fleet holds one per node.
struct NodeLocality {
  bool reported = false;  // a check report with a parsable document arrived
  std::vector<std::string> gpus, nics;
  std::vector<uint8_t> classes;  // [gpu * nics.size() + nic]: index into kClassNames; 0xff none
  std::vector<PcieLinkState> pcie;
};

// Extracts `affinity` ([{gpu, nic, class}]) and `pcie` ([{bdf, role, for, present,
// current_speed_gts, max_speed_gts, current_width, max_width}]) from the document an agent's
// `check --format json` prints (CheckReport.json). Fails with kInvalidArgument on JSON that does
// not parse or has neither array; unknown classes and malformed rows are skipped.
StatusOr<NodeLocality> LocalityFromCheckJson(std::string_view check_json);

// [{gpu, nic, class}] in GPU then NIC order, the same rows as the agent's check JSON.
nlohmann::json AffinityJson(const NodeLocality& locality);
// [{bdf, role, for, present, current_speed_gts, max_speed_gts, current_width, max_width}].
nlohmann::json PcieJson(const NodeLocality& locality);

}  // namespace fw::aggregator
