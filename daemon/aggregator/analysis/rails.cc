// RailIndex: rails per NIC, switch and link, from the map's NIC order and its switch tiers.
#include "daemon/aggregator/analysis/rails.h"

#include <bit>
#include <string_view>

namespace fw::analysis {

using aggregator::FabricMap;
using aggregator::HostNicIndex;
using aggregator::LinkIndex;
using aggregator::SwitchIndex;

RailIndex::RailIndex(const FabricMap& map) : map_(map), switch_rails_(map.switches().size(), 0) {
  const auto& nics = map.host_nics();
  for (HostNicIndex i = 0; i < nics.size(); ++i) {
    const uint32_t rail = map.RailOf(i);
    multi_rail_ = multi_rail_ || rail > 0;
    if (rail < kTracked && nics[i].leaf < switch_rails_.size()) {
      switch_rails_[nics[i].leaf] |= uint64_t{1} << rail;
    }
  }
  // Up the tiers: each pass carries the rails one tier higher (leaf, spine, superspine, core).
  const auto& switches = map.switches();
  for (int pass = 0; pass < 3; ++pass) {
    for (const aggregator::Link& l : map.links()) {
      if (l.IsAccess() || l.a >= switches.size() || l.b >= switches.size()) continue;
      const auto ta = static_cast<int>(switches[l.a].tier);
      const auto tb = static_cast<int>(switches[l.b].tier);
      if (ta < tb) switch_rails_[l.b] |= switch_rails_[l.a];
      if (tb < ta) switch_rails_[l.a] |= switch_rails_[l.b];
    }
  }
}

std::optional<uint32_t> RailIndex::Single(uint64_t bits) {
  if (std::popcount(bits) != 1) return std::nullopt;
  return static_cast<uint32_t>(std::countr_zero(bits));
}

std::optional<uint32_t> RailIndex::OfNic(HostNicIndex nic) const {
  if (nic >= map_.host_nics().size()) return std::nullopt;
  // Only where rails are planes of their own: NICs of several rails on one leaf (a leaf per host)
  // have a position, not a rail.
  if (!OfSwitch(map_.host_nics()[nic].leaf)) return std::nullopt;
  return map_.RailOf(nic);
}

std::optional<uint32_t> RailIndex::OfSwitch(SwitchIndex sw) const {
  if (sw >= switch_rails_.size()) return std::nullopt;
  return Single(switch_rails_[sw]);
}

std::optional<uint32_t> RailIndex::OfLink(LinkIndex link) const {
  if (link >= map_.links().size()) return std::nullopt;
  const aggregator::Link& l = map_.links()[link];
  if (l.IsAccess()) return OfNic(l.host_nic);
  if (l.a >= switch_rails_.size() || l.b >= switch_rails_.size()) return std::nullopt;
  return Single(switch_rails_[l.a] & switch_rails_[l.b]);
}

std::optional<uint32_t> RailIndex::OfLocation(const FindingLocation& where) const {
  if (where.type == "link") {
    const std::optional<LinkIndex> l = map_.FindLink(where.id);
    return l ? OfLink(*l) : std::nullopt;
  }
  if (where.type == "nic") {
    const std::optional<HostNicIndex> n = map_.FindHostNic(where.node, where.device);
    return n ? OfNic(*n) : std::nullopt;
  }
  if (where.type != "switch") return std::nullopt;
  std::optional<uint32_t> rail;
  std::string_view rest = where.id;
  while (!rest.empty()) {
    const size_t comma = rest.find(',');
    const std::optional<SwitchIndex> sw = map_.FindSwitch(rest.substr(0, comma));
    const std::optional<uint32_t> r = sw ? OfSwitch(*sw) : std::nullopt;
    if (!r || (rail && *rail != *r)) return std::nullopt;
    rail = r;
    rest = comma == std::string_view::npos ? std::string_view{} : rest.substr(comma + 1);
  }
  return rail;
}

}  // namespace fw::analysis
