// The simulator's modeled fat-tree: hosts, leaves, spines and rails, their names, and the fabric
// map.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/status.h"

namespace fw::sim {

struct TopologySpec {
  int spines = 2;          // per rail plane
  int leaves = 4;          // per rail plane
  int hosts_per_leaf = 8;  // every host has one NIC per rail, each on its own plane's leaf
  int rails = 1;
  // ecmp: a switch hashes each packet's 5-tuple (the aggregator knows only the candidate set).
  // deterministic: flow i of a pair takes equal-cost path i mod n in the fabric map's order, the
  // aggregator's convention (analysis/flow_table.h), so it can resolve every flow's path.
  bool deterministic = false;
  double host_link_gbps = 400;
  double fabric_link_gbps = 400;

  int hosts() const { return leaves * hosts_per_leaf; }
};

inline constexpr int kMaxHosts = 16000;
inline constexpr int kMaxRails = 8;
inline constexpr int kMaxSpines = 64;

// Link indices: fabric (leaf~spine) links first, then one access link per host NIC. Switch
// indices: leaves first (rail-major), then spines (rail-major). All names are precomputed: lookups
// by index never allocate.
class FatTree {
 public:
  // Validates the spec (counts, the 198.18.0.0/15 address budget) and builds every name.
  static StatusOr<FatTree> Build(const TopologySpec& spec);

  const TopologySpec& spec() const { return spec_; }
  int hosts() const { return spec_.hosts(); }
  int rails() const { return spec_.rails; }
  int spines() const { return spec_.spines; }
  int leaves() const { return spec_.leaves; }
  int link_count() const { return static_cast<int>(link_ids_.size()); }
  int switch_count() const { return static_cast<int>(switch_names_.size()); }

  int LeafGroup(int host) const { return host / spec_.hosts_per_leaf; }
  int LeafSwitch(int rail, int leaf) const { return rail * spec_.leaves + leaf; }
  int SpineSwitch(int rail, int spine) const {
    return spec_.rails * spec_.leaves + rail * spec_.spines + spine;
  }
  bool IsSpine(int sw) const { return sw >= spec_.rails * spec_.leaves; }
  int FabricLink(int rail, int leaf, int spine) const {
    return (rail * spec_.leaves + leaf) * spec_.spines + spine;
  }
  int AccessLink(int host, int rail) const {
    return spec_.rails * spec_.leaves * spec_.spines + host * spec_.rails + rail;
  }
  bool IsAccessLink(int link) const { return link >= spec_.rails * spec_.leaves * spec_.spines; }
  double LinkGbps(int link) const {
    return IsAccessLink(link) ? spec_.host_link_gbps : spec_.fabric_link_gbps;
  }
  // The two switches a fabric link joins, or {leaf, -1} for an access link.
  std::pair<int, int> LinkSwitches(int link) const;

  const std::string& NodeName(int host) const { return node_names_[host]; }
  const std::string& NicName(int rail) const { return nic_names_[rail]; }
  const std::string& SwitchName(int sw) const { return switch_names_[sw]; }
  // Fabric links: "a~b" with a < b, as in the fabric map. Access links: "<node>:<nic>~<leaf>", the
  // aggregator's naming for NIC cables.
  const std::string& LinkId(int link) const { return link_ids_[link]; }
  // 198.18.0.0/15, one address per host NIC.
  std::string Address(int host, int rail) const;
  // The address switch `sw` answers TTL expiry from (its fabric map `addresses` entry): in the
  // same range, after every host NIC's.
  // REQUIRES: SwitchAddressesFit().
  std::string SwitchAddress(int sw) const;
  bool SwitchAddressesFit() const {
    return int64_t{hosts()} * spec_.rails + switch_count() <= (1 << 17) - 2;
  }

  std::optional<int> FindHost(std::string_view node) const;
  std::optional<int> FindRail(std::string_view nic) const;
  std::optional<int> FindSwitch(std::string_view name) const;
  std::optional<int> FindLink(std::string_view id) const;
  // Every link that touches a switch (its fabric links and, for a leaf, its access links).
  std::vector<int> LinksOfSwitch(int sw) const;

  // The fabric map YAML (DESIGN.md format, routing: ecmp) the aggregator loads with --fabric-map.
  // With `switch_addresses`, each switch lists SwitchAddress() so traced hops map to it.
  std::string FabricMapYaml(bool switch_addresses = false) const;

 private:
  TopologySpec spec_;
  std::vector<std::string> node_names_;
  std::vector<std::string> nic_names_;
  std::vector<std::string> switch_names_;
  std::vector<std::string> link_ids_;
  std::unordered_map<std::string, int> host_by_name_;
  std::unordered_map<std::string, int> switch_by_name_;
  std::unordered_map<std::string, int> link_by_id_;
};

}  // namespace fw::sim
