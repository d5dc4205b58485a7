// Fat-tree construction, naming and fabric map output.
#include "tests/sim/topology.h"

#include <cstdio>

namespace fw::sim {

namespace {

std::string Format(const char* fmt, int a, int b = 0) {
  char buf[64];
  std::snprintf(buf, sizeof buf, fmt, a, b);
  return buf;
}

}  // namespace

StatusOr<FatTree> FatTree::Build(const TopologySpec& spec) {
  if (spec.spines < 1 || spec.spines > kMaxSpines) {
    return Status::InvalidArgument("topology.spines must be 1.." + std::to_string(kMaxSpines));
  }
  if (spec.leaves < 1 || spec.hosts_per_leaf < 1) {
    return Status::InvalidArgument("topology.leaves and topology.hosts_per_leaf must be >= 1");
  }
  if (spec.rails < 1 || spec.rails > kMaxRails) {
    return Status::InvalidArgument("topology.rails must be 1.." + std::to_string(kMaxRails));
  }
  if (static_cast<int64_t>(spec.leaves) * spec.hosts_per_leaf > kMaxHosts) {
    return Status::InvalidArgument(
        "topology has " + std::to_string(int64_t{spec.leaves} * spec.hosts_per_leaf) +
        " hosts; the simulator supports at most " + std::to_string(kMaxHosts));
  }
  // 198.18.0.0/15 holds 131072 addresses; .0 and the last are left out.
  if (int64_t{spec.hosts()} * spec.rails > (1 << 17) - 2) {
    return Status::InvalidArgument("hosts x rails exceeds the 198.18.0.0/15 address budget");
  }
  if (!(spec.host_link_gbps > 0) || !(spec.fabric_link_gbps > 0)) {
    return Status::InvalidArgument("link speeds must be positive");
  }
  FatTree t;
  t.spec_ = spec;
  const bool railed = spec.rails > 1;
  for (int h = 0; h < spec.hosts(); ++h) t.node_names_.push_back(Format("node%05d", h));
  for (int r = 0; r < spec.rails; ++r) t.nic_names_.push_back(Format("mlx5_%d", r));
  for (int r = 0; r < spec.rails; ++r) {
    for (int l = 0; l < spec.leaves; ++l) {
      t.switch_names_.push_back(railed ? Format("rail%d-leaf%03d", r, l) : Format("leaf%03d", l));
    }
  }
  for (int r = 0; r < spec.rails; ++r) {
    for (int s = 0; s < spec.spines; ++s) {
      t.switch_names_.push_back(railed ? Format("rail%d-spine%02d", r, s) : Format("spine%02d", s));
    }
  }
  for (int r = 0; r < spec.rails; ++r) {
    for (int l = 0; l < spec.leaves; ++l) {
      for (int s = 0; s < spec.spines; ++s) {
        const std::string& a = t.switch_names_[t.LeafSwitch(r, l)];
        const std::string& b = t.switch_names_[t.SpineSwitch(r, s)];
        t.link_ids_.push_back(a < b ? a + "~" + b : b + "~" + a);
      }
    }
  }
  for (int h = 0; h < spec.hosts(); ++h) {
    for (int r = 0; r < spec.rails; ++r) {
      t.link_ids_.push_back(t.node_names_[h] + ":" + t.nic_names_[r] + "~" +
                            t.switch_names_[t.LeafSwitch(r, t.LeafGroup(h))]);
    }
  }
  for (int h = 0; h < spec.hosts(); ++h) t.host_by_name_[t.node_names_[h]] = h;
  for (int s = 0; s < t.switch_count(); ++s) t.switch_by_name_[t.switch_names_[s]] = s;
  for (int l = 0; l < t.link_count(); ++l) t.link_by_id_[t.link_ids_[l]] = l;
  return t;
}

std::pair<int, int> FatTree::LinkSwitches(int link) const {
  if (IsAccessLink(link)) {
    int rel = link - AccessLink(0, 0);
    int host = rel / spec_.rails, rail = rel % spec_.rails;
    return {LeafSwitch(rail, LeafGroup(host)), -1};
  }
  int spine = link % spec_.spines;
  int leaf_global = link / spec_.spines;  // rail * leaves + leaf
  int rail = leaf_global / spec_.leaves;
  return {leaf_global, SpineSwitch(rail, spine)};
}

std::string FatTree::Address(int host, int rail) const {
  uint32_t v = static_cast<uint32_t>(host) * static_cast<uint32_t>(spec_.rails) +
               static_cast<uint32_t>(rail) + 1;
  char buf[32];
  std::snprintf(buf, sizeof buf, "198.%u.%u.%u", 18 + (v >> 16), (v >> 8) & 0xff, v & 0xff);
  return buf;
}

std::string FatTree::SwitchAddress(int sw) const {
  const uint32_t v = static_cast<uint32_t>(hosts()) * static_cast<uint32_t>(spec_.rails) +
                     static_cast<uint32_t>(sw) + 1;
  char buf[32];
  std::snprintf(buf, sizeof buf, "198.%u.%u.%u", 18 + (v >> 16), (v >> 8) & 0xff, v & 0xff);
  return buf;
}

std::optional<int> FatTree::FindHost(std::string_view node) const {
  auto it = host_by_name_.find(std::string(node));
  if (it == host_by_name_.end()) return std::nullopt;
  return it->second;
}

std::optional<int> FatTree::FindRail(std::string_view nic) const {
  for (int r = 0; r < spec_.rails; ++r) {
    if (nic_names_[r] == nic) return r;
  }
  return std::nullopt;
}

std::optional<int> FatTree::FindSwitch(std::string_view name) const {
  auto it = switch_by_name_.find(std::string(name));
  if (it == switch_by_name_.end()) return std::nullopt;
  return it->second;
}

std::optional<int> FatTree::FindLink(std::string_view id) const {
  auto it = link_by_id_.find(std::string(id));
  if (it == link_by_id_.end()) return std::nullopt;
  return it->second;
}

std::vector<int> FatTree::LinksOfSwitch(int sw) const {
  std::vector<int> out;
  for (int l = 0; l < link_count(); ++l) {
    auto [a, b] = LinkSwitches(l);
    if (a == sw || b == sw) out.push_back(l);
  }
  return out;
}

std::string FatTree::FabricMapYaml(bool switch_addresses) const {
  std::string y;
  y.reserve(static_cast<size_t>(hosts()) * spec_.rails * 96 + 4096);
  y += "# Generated by fw_sim: ";
  y += std::to_string(spec_.rails) + " rail(s) x " + std::to_string(spec_.leaves) + " leaves x " +
       std::to_string(spec_.spines) + " spines, " + std::to_string(spec_.hosts_per_leaf) +
       " hosts per leaf\nrouting: " + (spec_.deterministic ? "deterministic" : "ecmp") +
       "\nswitches:\n";
  for (int s = 0; s < switch_count(); ++s) {
    y += "  - {name: " + switch_names_[s] + ", tier: " + (IsSpine(s) ? "spine" : "leaf");
    if (switch_addresses) y += ", addresses: [" + SwitchAddress(s) + "]";
    y += "}\n";
  }
  y += "links:\n";
  for (int l = 0; l < link_count() && !IsAccessLink(l); ++l) {
    auto [a, b] = LinkSwitches(l);
    y += "  - {a: " + switch_names_[a] + ", b: " + switch_names_[b] + "}\n";
  }
  y += "hosts:\n";
  for (int h = 0; h < hosts(); ++h) {
    for (int r = 0; r < spec_.rails; ++r) {
      y += "  - {node: " + node_names_[h] + ", nic: " + nic_names_[r] +
           ", address: " + Address(h, r) +
           ", switch: " + switch_names_[LeafSwitch(r, LeafGroup(h))] + "}\n";
    }
  }
  return y;
}

}  // namespace fw::sim
