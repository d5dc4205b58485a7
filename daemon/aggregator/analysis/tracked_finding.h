// A finding tracked over time: the detector's Finding plus identity, activity and timestamps.
#pragma once

#include <cstdint>
#include <string>

#include "common/finding.h"

namespace fw::analysis {

struct TrackedFinding {
  std::string id;       // "<element>@<first_seen unix seconds>", unique across occurrences
  std::string element;  // the analyzer element, e.g. "link:leaf1~spine2", "nic:node01/mlx5_0"
  Finding finding;
  bool active = true;
  int64_t first_seen_ns = 0;  // wall clock, for people
  int64_t last_seen_ns = 0;   // wall clock: the last evaluation that saw the fault
};

}  // namespace fw::analysis
