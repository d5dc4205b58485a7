// Test helper: eight nodes h0..h7 on two leaves (h0-h3 on leaf0, h4-h7 on leaf1).
#pragma once

#include <string>
#include <vector>

#include "daemon/aggregator/collective/scheduler.h"

namespace fw::aggregator::collective::testing {

inline std::vector<CollectiveNode> TwoLeafFleet(int gpus_on_h0 = 0) {
  std::vector<CollectiveNode> nodes;
  for (int h = 0; h < 8; ++h) {
    nodes.push_back(
        {"h" + std::to_string(h), "leaf" + std::to_string(h / 4), h == 0 ? gpus_on_h0 : 0});
  }
  return nodes;
}

}  // namespace fw::aggregator::collective::testing
