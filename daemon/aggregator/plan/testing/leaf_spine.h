// Test fabrics for the planner's tests: a leaf-spine map built in code.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "daemon/aggregator/plan/fabric_map.h"

namespace fw::aggregator::testing {

// `leaves` leaves of `hosts` hosts each (node n<leaf>-<host>, NIC mlx5_0, address
// 10.<leaf>.0.<host>), every leaf linked to every spine.
inline std::shared_ptr<const FabricMap> LeafSpine(int spines, int leaves, int hosts,
                                                  const char* routing = "ecmp") {
  std::string y = std::string("routing: ") + routing + "\nswitches:\n";
  for (int s = 1; s <= spines; ++s)
    y += "  - {name: spine" + std::to_string(s) + ", tier: spine}\n";
  for (int l = 1; l <= leaves; ++l) y += "  - {name: leaf" + std::to_string(l) + ", tier: leaf}\n";
  y += "links:\n";
  for (int l = 1; l <= leaves; ++l) {
    for (int s = 1; s <= spines; ++s) {
      y += "  - {a: leaf" + std::to_string(l) + ", b: spine" + std::to_string(s) + "}\n";
    }
  }
  y += "hosts:\n";
  for (int l = 1; l <= leaves; ++l) {
    for (int h = 1; h <= hosts; ++h) {
      y += "  - {node: n" + std::to_string(l) + "-" + std::to_string(h) +
           ", nic: mlx5_0, address: 10." + std::to_string(l) + ".0." + std::to_string(h) +
           ", switch: leaf" + std::to_string(l) + "}\n";
    }
  }
  auto m = FabricMap::Parse(y);
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  return std::make_shared<const FabricMap>(std::move(m).value());
}

}  // namespace fw::aggregator::testing
