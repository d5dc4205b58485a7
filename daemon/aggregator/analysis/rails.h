// Which rail a finding's element serves in a multi-rail fabric (issue 16: "every NIC, every rail"),
// so that a fault on one rail is named with its rail and the other rails stay out of it.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "common/finding.h"
#include "daemon/aggregator/plan/fabric_map.h"

namespace fw::analysis {

// Built once from the map; immutable after. A NIC's rail is its position among its node's NICs
// (FabricMap::RailOf). A leaf serves the rails of its NICs, a switch above it the rails of the
// switches below it. An element has a rail only when it serves exactly one.
class RailIndex {
 public:
  // `map` must outlive this.
  explicit RailIndex(const aggregator::FabricMap& map);

  // Some node has two NICs or more: findings say their rail.
  bool multi_rail() const { return multi_rail_; }
  // A NIC's rail, when its leaf serves that rail alone.
  std::optional<uint32_t> OfNic(aggregator::HostNicIndex nic) const;
  std::optional<uint32_t> OfSwitch(aggregator::SwitchIndex sw) const;
  // An access link: its NIC's rail; a switch link: the one rail both ends serve.
  std::optional<uint32_t> OfLink(aggregator::LinkIndex link) const;
  // A finding's location: a link, a NIC, a switch or a set of switches ("spine0,spine1") that
  // all serve the same single rail; nullopt for anything else.
  std::optional<uint32_t> OfLocation(const FindingLocation& where) const;

 private:
  static constexpr uint32_t kTracked = 64;  // rails beyond are not named
  static std::optional<uint32_t> Single(uint64_t bits);

  const aggregator::FabricMap& map_;
  bool multi_rail_ = false;
  std::vector<uint64_t> switch_rails_;  // bit r: the switch serves rail r
};

}  // namespace fw::analysis
