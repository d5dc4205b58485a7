// Parsing and validation of the fabric map YAML, and the switch graph built from it.
#include "daemon/aggregator/plan/fabric_map.h"

#include <arpa/inet.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <fstream>
#include <sstream>

namespace fw::aggregator {

std::string_view RoutingName(Routing r) {
  return r == Routing::kDeterministic ? "deterministic" : "ecmp";
}

std::string_view SwitchTierName(SwitchTier t) {
  switch (t) {
    case SwitchTier::kLeaf:
      return "leaf";
    case SwitchTier::kSpine:
      return "spine";
    case SwitchTier::kSuperspine:
      return "superspine";
    case SwitchTier::kCore:
      return "core";
  }
  return "unknown";
}

std::string_view PathClassName(PathClass c) {
  switch (c) {
    case PathClass::kIntraLeaf:
      return "intra_leaf";
    case PathClass::kInterLeaf:
      return "inter_leaf";
    case PathClass::kUnknown:
      return "unknown";
  }
  return "unknown";
}

std::vector<std::vector<LinkIndex>> PathSet::FullPaths() const {
  std::vector<std::vector<LinkIndex>> out;
  if (!core) return out;
  for (const auto& p : core->paths) {
    std::vector<LinkIndex> full;
    full.reserve(p.size() + 2);
    full.push_back(src_access);
    full.insert(full.end(), p.begin(), p.end());
    full.push_back(dst_access);
    out.push_back(std::move(full));
  }
  return out;
}

namespace {

// Collects the context of an error: "<source>:<line>: <where>: <what>".
class ErrorSink {
 public:
  explicit ErrorSink(std::string_view source) : source_(source) {}
  Status At(const YAML::Node& node, const std::string& what) const {
    const int line = node.Mark().is_null() ? 0 : node.Mark().line + 1;
    return Status::InvalidArgument(source_ + ":" + std::to_string(line) + ": " + what);
  }
  Status Plain(const std::string& what) const {
    return Status::InvalidArgument(source_ + ": " + what);
  }

 private:
  std::string source_;
};

int LineOf(const YAML::Node& node) { return node.Mark().is_null() ? 0 : node.Mark().line + 1; }

// Flow collections nest by brackets, and yaml-cpp recurses per level. Reject absurd nesting before
// handing the text over, so that garbage cannot exhaust the stack.
bool NestingTooDeep(std::string_view text, int limit) {
  int depth = 0;
  for (char c : text) {
    if (c == '[' || c == '{') {
      if (++depth > limit) return true;
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return false;
}

// A name used inside link ids: non-empty, printable, without the id separators '~' and ':'.
bool ValidName(const std::string& s) {
  if (s.empty() || s.size() > 255) return false;
  for (unsigned char c : s) {
    if (c <= ' ' || c == '~' || c == ':' || c >= 0x7f) return false;
  }
  return true;
}

bool ValidAddress(const std::string& s) {
  unsigned char buf[16];
  return inet_pton(AF_INET, s.c_str(), buf) == 1 || inet_pton(AF_INET6, s.c_str(), buf) == 1;
}

// The canonical text of an IPv4 or IPv6 address ("::ffff:1.2.3.4" and "1.2.3.4" stay distinct);
// nullopt when it is neither.
std::optional<std::string> CanonicalAddress(std::string_view text) {
  if (text.size() >= INET6_ADDRSTRLEN) return std::nullopt;
  const std::string s(text);
  unsigned char buf[16];
  char out[INET6_ADDRSTRLEN];
  for (int family : {AF_INET, AF_INET6}) {
    if (inet_pton(family, s.c_str(), buf) == 1 && inet_ntop(family, buf, out, sizeof out)) {
      return std::string(out);
    }
  }
  return std::nullopt;
}

// Reads the string value of `key` in map entry `entry`, which `where` names ("switches[2]").
StatusOr<std::string> ScalarField(const ErrorSink& err, const YAML::Node& entry,
                                  const std::string& where, const char* key) {
  const YAML::Node v = entry[key];
  if (!v) return err.At(entry, where + ": missing key '" + key + "'");
  if (!v.IsScalar()) return err.At(v, where + ": key '" + key + "' must be a plain value");
  return v.Scalar();
}

Status CheckKeys(const ErrorSink& err, const YAML::Node& entry, const std::string& where,
                 std::initializer_list<const char*> allowed) {
  for (const auto& kv : entry) {
    if (!kv.first.IsScalar()) return err.At(kv.first, where + ": keys must be plain names");
    const std::string& k = kv.first.Scalar();
    bool ok = false;
    for (const char* a : allowed) ok = ok || k == a;
    if (!ok) {
      std::string list;
      for (const char* a : allowed) list += std::string(list.empty() ? "" : ", ") + a;
      return err.At(kv.first, where + ": unknown key '" + k + "' (expected " + list + ")");
    }
  }
  return Status::Ok();
}

std::optional<SwitchTier> ParseTier(const std::string& s) {
  for (SwitchTier t :
       {SwitchTier::kLeaf, SwitchTier::kSpine, SwitchTier::kSuperspine, SwitchTier::kCore}) {
    if (SwitchTierName(t) == s) return t;
  }
  return std::nullopt;
}

std::string Truncated(const std::string& s) { return s.size() > 64 ? s.substr(0, 64) + "…" : s; }

}  // namespace

StatusOr<FabricMap> FabricMap::Load(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::NotFound("fabric map " + path + ": cannot open for reading");
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return Status::Unavailable("fabric map " + path + ": read error");
  return Parse(ss.str(), path);
}

StatusOr<FabricMap> FabricMap::Parse(std::string_view yaml, std::string_view source) {
  ErrorSink err(source);
  if (yaml.size() > kMaxInputBytes) {
    return err.Plain("larger than " + std::to_string(kMaxInputBytes >> 20) + " MiB");
  }
  if (NestingTooDeep(yaml, 64)) return err.Plain("brackets nested deeper than 64 levels");
  YAML::Node root;
  try {
    root = YAML::Load(std::string(yaml));
  } catch (const YAML::Exception& e) {
    return Status::InvalidArgument(std::string(source) + ":" + std::to_string(e.mark.line + 1) +
                                   ": not valid YAML: " + e.msg);
  }
  FabricMap map;
  try {
    if (!root.IsMap()) return err.Plain("top level must be a map with keys switches, links, hosts");
    if (Status s = CheckKeys(err, root, "top level", {"routing", "switches", "links", "hosts"});
        !s.ok()) {
      return s;
    }
    if (const YAML::Node r = root["routing"]) {
      if (!r.IsScalar() || (r.Scalar() != "ecmp" && r.Scalar() != "deterministic")) {
        return err.At(r, "routing: expected ecmp or deterministic");
      }
      map.routing_ = r.Scalar() == "ecmp" ? Routing::kEcmp : Routing::kDeterministic;
    }

    const YAML::Node switches = root["switches"];
    if (!switches || !switches.IsSequence() || switches.size() == 0) {
      return err.At(switches ? switches : root, "switches: expected a non-empty list");
    }
    for (size_t i = 0; i < switches.size(); ++i) {
      const YAML::Node e = switches[i];
      const std::string where = "switches[" + std::to_string(i) + "]";
      if (!e.IsMap()) return err.At(e, where + ": expected {name, tier}");
      if (Status s = CheckKeys(err, e, where, {"name", "tier", "addresses"}); !s.ok()) return s;
      auto name = ScalarField(err, e, where, "name");
      if (!name.ok()) return name.status();
      auto tier_s = ScalarField(err, e, where, "tier");
      if (!tier_s.ok()) return tier_s.status();
      if (!ValidName(*name)) {
        return err.At(
            e, where + ": bad name '" + Truncated(*name) + "' (non-empty, no spaces, '~' or ':')");
      }
      const auto tier = ParseTier(*tier_s);
      if (!tier) {
        return err.At(e["tier"], where + ": bad tier '" + Truncated(*tier_s) +
                                     "' (expected leaf, spine, superspine or core)");
      }
      const auto index = static_cast<SwitchIndex>(map.switches_.size());
      if (!map.switch_by_name_.emplace(*name, index).second) {
        return err.At(e, where + ": duplicate switch '" + *name + "' (first on line " +
                             std::to_string(map.switches_[map.switch_by_name_[*name]].line) + ")");
      }
      Switch sw{*name, *tier, LineOf(e), {}};
      if (const YAML::Node addrs = e["addresses"]) {
        constexpr size_t kMaxAddresses = 1024;
        if (!addrs.IsSequence() || addrs.size() > kMaxAddresses) {
          return err.At(addrs, where + ": addresses: expected a list of at most " +
                                   std::to_string(kMaxAddresses) + " IP addresses");
        }
        for (const YAML::Node& a : addrs) {
          std::optional<std::string> canonical =
              a.IsScalar() ? CanonicalAddress(a.Scalar()) : std::nullopt;
          if (!canonical) {
            return err.At(a,
                          where + ": addresses: '" +
                              Truncated(a.IsScalar() ? a.Scalar() : std::string("(not a value)")) +
                              "' is not an IP address");
          }
          if (auto [it, fresh] = map.switch_by_address_.emplace(*canonical, index); !fresh) {
            return err.At(
                a, where + ": address " + *canonical + " is already " +
                       (it->second == index ? std::string("listed")
                                            : "switch " + map.switches_[it->second].name + "'s"));
          }
          sw.addresses.push_back(std::move(*canonical));
        }
      }
      map.switches_.push_back(std::move(sw));
    }
    map.adjacency_.resize(map.switches_.size());
    map.nics_by_switch_.resize(map.switches_.size());

    const YAML::Node links = root["links"];
    if (links && !links.IsSequence() && !links.IsNull()) {
      return err.At(links, "links: expected a list of {a, b}");
    }
    for (size_t i = 0; links && links.IsSequence() && i < links.size(); ++i) {
      const YAML::Node e = links[i];
      const std::string where = "links[" + std::to_string(i) + "]";
      if (!e.IsMap()) return err.At(e, where + ": expected {a, b}");
      if (Status s = CheckKeys(err, e, where, {"a", "b"}); !s.ok()) return s;
      auto a = ScalarField(err, e, where, "a");
      if (!a.ok()) return a.status();
      auto b = ScalarField(err, e, where, "b");
      if (!b.ok()) return b.status();
      for (const std::string* end : {&*a, &*b}) {
        if (!map.switch_by_name_.contains(*end)) {
          return err.At(e, where + ": unknown switch '" + Truncated(*end) + "'");
        }
      }
      if (*a == *b) return err.At(e, where + ": a link from '" + *a + "' to itself");
      const std::string& lo = std::min(*a, *b);
      const std::string& hi = std::max(*a, *b);
      Link link{lo + "~" + hi, map.switch_by_name_[lo], map.switch_by_name_[hi], kNoIndex,
                LineOf(e)};
      const auto index = static_cast<LinkIndex>(map.links_.size());
      if (!map.link_by_id_.emplace(link.id, index).second) {
        return err.At(e, where + ": duplicate link '" + link.id + "' (first on line " +
                             std::to_string(map.links_[map.link_by_id_[link.id]].line) + ")");
      }
      map.adjacency_[link.a].emplace_back(link.b, index);
      map.adjacency_[link.b].emplace_back(link.a, index);
      map.links_.push_back(std::move(link));
    }

    const YAML::Node hosts = root["hosts"];
    if (!hosts || !hosts.IsSequence() || hosts.size() == 0) {
      return err.At(hosts ? hosts : root, "hosts: expected a non-empty list");
    }
    std::unordered_map<std::string, int> address_line;
    for (size_t i = 0; i < hosts.size(); ++i) {
      const YAML::Node e = hosts[i];
      const std::string where = "hosts[" + std::to_string(i) + "]";
      if (!e.IsMap()) return err.At(e, where + ": expected {node, nic, address, switch}");
      if (Status s = CheckKeys(err, e, where, {"node", "nic", "address", "switch"}); !s.ok()) {
        return s;
      }
      HostNic h;
      h.line = LineOf(e);
      for (auto [key, dst] : {std::pair{"node", &h.node}, std::pair{"nic", &h.nic},
                              std::pair{"address", &h.address}}) {
        auto v = ScalarField(err, e, where, key);
        if (!v.ok()) return v.status();
        *dst = std::move(*v);
      }
      auto sw = ScalarField(err, e, where, "switch");
      if (!sw.ok()) return sw.status();
      if (!ValidName(h.node) || !ValidName(h.nic)) {
        return err.At(e, where + ": bad node or nic name (non-empty, no spaces, '~' or ':')");
      }
      if (!ValidAddress(h.address)) {
        return err.At(e["address"],
                      where + ": address '" + Truncated(h.address) + "' is not an IP address");
      }
      const auto sw_it = map.switch_by_name_.find(*sw);
      if (sw_it == map.switch_by_name_.end()) {
        return err.At(e["switch"], where + ": unknown switch '" + Truncated(*sw) + "'");
      }
      if (map.switches_[sw_it->second].tier != SwitchTier::kLeaf) {
        return err.At(e["switch"],
                      where + ": host attached to '" + *sw + "', which is a " +
                          std::string(SwitchTierName(map.switches_[sw_it->second].tier)) +
                          ", not a leaf");
      }
      if (map.FindHostNic(h.node, h.nic)) {
        return err.At(e, where + ": duplicate host NIC " + h.node + ":" + h.nic);
      }
      if (auto [it, fresh] = address_line.emplace(h.address, h.line); !fresh) {
        return err.At(e, where + ": address " + h.address + " already used on line " +
                             std::to_string(it->second));
      }
      h.leaf = sw_it->second;
      const auto nic_index = static_cast<HostNicIndex>(map.host_nics_.size());
      h.access_link = static_cast<LinkIndex>(map.links_.size());
      Link access{h.node + ":" + h.nic + "~" + *sw, h.leaf, kNoIndex, nic_index, h.line};
      map.link_by_id_.emplace(access.id, h.access_link);
      map.links_.push_back(std::move(access));
      map.nics_by_node_[h.node].push_back(nic_index);
      map.nics_by_switch_[h.leaf].push_back(nic_index);
      map.host_nics_.push_back(std::move(h));
    }
  } catch (const YAML::Exception& e) {
    // Conversions are checked above; this catches anything yaml-cpp still throws on odd input.
    return Status::InvalidArgument(std::string(source) + ":" + std::to_string(e.mark.line + 1) +
                                   ": " + e.msg);
  }
  return map;
}

std::optional<SwitchIndex> FabricMap::SwitchAtAddress(std::string_view address) const {
  if (switch_by_address_.empty()) return std::nullopt;
  std::optional<std::string> canonical = CanonicalAddress(address);
  if (!canonical) return std::nullopt;
  auto it = switch_by_address_.find(*canonical);
  if (it == switch_by_address_.end()) return std::nullopt;
  return it->second;
}

std::vector<SwitchIndex> FabricMap::SwitchesOnPath(const PathSet& paths, size_t path) const {
  std::vector<SwitchIndex> out;
  if (!paths.core || path >= paths.core->paths.size() || paths.src_access >= links_.size()) {
    return out;
  }
  SwitchIndex at = links_[paths.src_access].a;  // the source NIC's leaf
  out.push_back(at);
  for (LinkIndex l : paths.core->paths[path]) {
    const Link& link = links_[l];
    at = link.a == at ? link.b : link.a;
    out.push_back(at);
  }
  return out;
}

std::optional<SwitchIndex> FabricMap::FindSwitch(std::string_view name) const {
  const auto it = switch_by_name_.find(std::string(name));
  if (it == switch_by_name_.end()) return std::nullopt;
  return it->second;
}

std::optional<LinkIndex> FabricMap::FindLink(std::string_view id) const {
  const auto it = link_by_id_.find(std::string(id));
  if (it == link_by_id_.end()) return std::nullopt;
  return it->second;
}

std::optional<HostNicIndex> FabricMap::FindHostNic(std::string_view node,
                                                   std::string_view nic) const {
  for (HostNicIndex i : NicsOfNode(node)) {
    if (host_nics_[i].nic == nic) return i;
  }
  return std::nullopt;
}

std::optional<HostNicIndex> FabricMap::HostNicAt(std::string_view node,
                                                 std::string_view address) const {
  const std::optional<std::string> want = CanonicalAddress(address);
  if (!want) return std::nullopt;
  for (HostNicIndex i : NicsOfNode(node)) {
    if (CanonicalAddress(host_nics_[i].address) == want) return i;
  }
  return std::nullopt;
}

uint32_t FabricMap::RailOf(HostNicIndex nic) const {
  if (nic >= host_nics_.size()) return 0;
  const std::vector<HostNicIndex>& mine = NicsOfNode(host_nics_[nic].node);
  const auto it = std::find(mine.begin(), mine.end(), nic);
  return static_cast<uint32_t>(it - mine.begin());
}

const std::vector<HostNicIndex>& FabricMap::NicsOfNode(std::string_view node) const {
  static const std::vector<HostNicIndex> kEmpty;
  const auto it = nics_by_node_.find(std::string(node));
  return it == nics_by_node_.end() ? kEmpty : it->second;
}

const std::vector<HostNicIndex>& FabricMap::NicsOnSwitch(SwitchIndex s) const {
  static const std::vector<HostNicIndex> kEmpty;
  return s < nics_by_switch_.size() ? nics_by_switch_[s] : kEmpty;
}

}  // namespace fw::aggregator
