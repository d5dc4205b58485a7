// Profile parsing (yaml-cpp) and the comparison of a node with its expected profile.
#include "probes/topology/profile.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

namespace fw::topology {
namespace {

constexpr size_t kMaxProfileBytes = 64 * 1024;

class ProfileError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

void CheckKeys(const YAML::Node& map, std::string_view where,
               std::initializer_list<const char*> keys) {
  if (!map.IsMap()) throw ProfileError(std::string(where) + " must be a mapping");
  for (const auto& kv : map) {
    const std::string key = kv.first.as<std::string>();
    if (std::none_of(keys.begin(), keys.end(), [&](const char* k) { return key == k; })) {
      throw ProfileError("unknown key '" + key + "' in " + std::string(where));
    }
  }
}

template <typename T>
std::optional<T> Opt(const YAML::Node& map, const char* key, std::string_view where) {
  const YAML::Node n = map[key];
  if (!n.IsDefined() || n.IsNull()) return std::nullopt;
  if (!n.IsScalar()) throw ProfileError(std::string(where) + "." + key + " must be a scalar");
  try {
    return n.as<T>();
  } catch (const YAML::Exception&) {
    throw ProfileError(std::string(where) + "." + key + ": bad value '" + n.Scalar() + "'");
  }
}

std::optional<int> PositiveInt(const YAML::Node& map, const char* key, std::string_view where,
                               int max) {
  auto v = Opt<int>(map, key, where);
  if (v && (*v < 0 || *v > max)) {
    throw ProfileError(std::string(where) + "." + key + " must be between 0 and " +
                       std::to_string(max));
  }
  return v;
}

std::vector<std::string> StringList(const YAML::Node& map, const char* key,
                                    std::string_view where) {
  std::vector<std::string> out;
  const YAML::Node n = map[key];
  if (!n.IsDefined() || n.IsNull()) return out;
  if (!n.IsSequence()) throw ProfileError(std::string(where) + "." + key + " must be a list");
  for (const auto& item : n) {
    if (!item.IsScalar())
      throw ProfileError(std::string(where) + "." + key + " holds a non-string");
    out.push_back(item.as<std::string>());
  }
  return out;
}

PcieExpectation ParsePcie(const YAML::Node& map, std::string_view where) {
  PcieExpectation p;
  const YAML::Node n = map["pcie"];
  if (!n.IsDefined() || n.IsNull()) return p;
  const std::string w = std::string(where) + ".pcie";
  CheckKeys(n, w, {"gen", "width"});
  p.gen = PositiveInt(n, "gen", w, 8);
  p.width = PositiveInt(n, "width", w, 32);
  return p;
}

std::optional<std::string> LinkLayer(const YAML::Node& map, const char* key,
                                     std::string_view where) {
  auto v = Opt<std::string>(map, key, where);
  if (v && *v != "InfiniBand" && *v != "Ethernet") {
    throw ProfileError(std::string(where) + "." + key + " must be InfiniBand or Ethernet, not '" +
                       *v + "'");
  }
  return v;
}

std::optional<double> Rate(const YAML::Node& map, const char* key, std::string_view where) {
  auto v = Opt<double>(map, key, where);
  if (v && (!std::isfinite(*v) || *v < 0 || *v > 1e5)) {
    throw ProfileError(std::string(where) + "." + key + " must be a rate in Gb/s");
  }
  return v;
}

NodeProfile ParseOrThrow(std::string_view text) {
  const YAML::Node root = YAML::Load(std::string(text));
  if (!root.IsMap()) throw ProfileError("a profile must be a YAML mapping");
  CheckKeys(root, "profile", {"name", "description", "gpus", "fabric_nics"});
  NodeProfile p;
  p.name = Opt<std::string>(root, "name", "profile").value_or("");
  if (p.name.empty()) throw ProfileError("profile.name is required");
  p.description = Opt<std::string>(root, "description", "profile").value_or("");
  if (const YAML::Node g = root["gpus"]; g.IsDefined() && !g.IsNull()) {
    CheckKeys(g, "gpus", {"count", "max_nic_class", "pcie"});
    p.gpu_count = PositiveInt(g, "count", "gpus", 1024);
    if (auto c = Opt<std::string>(g, "max_nic_class", "gpus")) {
      p.max_gpu_nic_class = ParsePathClass(*c);
      if (!p.max_gpu_nic_class) {
        throw ProfileError("gpus.max_nic_class must be PIX, PXB, PHB, NODE or SYS, not '" + *c +
                           "'");
      }
    }
    p.gpu_pcie = ParsePcie(g, "gpus");
  }
  if (const YAML::Node f = root["fabric_nics"]; f.IsDefined() && !f.IsNull()) {
    CheckKeys(f, "fabric_nics",
              {"count", "select", "exclude", "rate_gbps", "link_layer", "mtu", "pcie"});
    p.fabric_nic_count = PositiveInt(f, "count", "fabric_nics", 1024);
    if (const YAML::Node s = f["select"]; s.IsDefined() && !s.IsNull()) {
      CheckKeys(s, "fabric_nics.select", {"devices", "link_layer", "min_rate_gbps"});
      p.fabric.devices = StringList(s, "devices", "fabric_nics.select");
      p.fabric.link_layer = LinkLayer(s, "link_layer", "fabric_nics.select");
      p.fabric.min_rate_gbps = Rate(s, "min_rate_gbps", "fabric_nics.select");
    }
    p.fabric.exclude = StringList(f, "exclude", "fabric_nics");
    p.rate_gbps = Rate(f, "rate_gbps", "fabric_nics");
    p.link_layer = LinkLayer(f, "link_layer", "fabric_nics");
    p.mtu = PositiveInt(f, "mtu", "fabric_nics", 1 << 20);
    p.nic_pcie = ParsePcie(f, "fabric_nics");
  }
  return p;
}

std::string Num(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

Finding Mismatch(const std::string& node, Severity sev, std::string device, std::string summary) {
  Finding f;
  f.kind = "topology_mismatch";
  f.severity = sev;
  f.location.type = device.empty() ? "node" : "nic";
  f.location.node = node;
  f.location.id = device.empty() ? node : node + "/" + device;
  f.location.device = std::move(device);
  f.summary = std::move(summary);
  return f;
}

}  // namespace

StatusOr<NodeProfile> ParseProfile(std::string_view yaml, std::string_view origin) {
  if (yaml.size() > kMaxProfileBytes) {
    return Status::InvalidArgument(std::string(origin) + ": profile larger than 64 KiB");
  }
  try {
    return ParseOrThrow(yaml);
  } catch (const ProfileError& e) {
    return Status::InvalidArgument(std::string(origin) + ": " + e.what());
  } catch (const YAML::Exception& e) {
    return Status::InvalidArgument(std::string(origin) + ": not valid YAML: " + e.what());
  } catch (const std::exception& e) {
    return Status::InvalidArgument(std::string(origin) + ": " + e.what());
  }
}

StatusOr<NodeProfile> LoadProfile(const std::string& name_or_path) {
  const std::string name = name_or_path.empty() ? "generic" : name_or_path;
  if (auto builtin = BuiltinProfileYaml(name)) return ParseProfile(*builtin, "profile " + name);
  std::error_code ec;
  if (!std::filesystem::is_regular_file(name, ec)) {
    std::string known;
    for (const std::string& n : BuiltinProfileNames()) known += (known.empty() ? "" : ", ") + n;
    return Status::NotFound("profile '" + name + "' is neither a built-in profile (" + known +
                            ") nor a readable file");
  }
  std::ifstream in(name);
  std::string text;
  text.resize(kMaxProfileBytes + 1);
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  if (in.bad()) return Status::Unavailable("cannot read profile " + name);
  text.resize(static_cast<size_t>(in.gcount()));
  return ParseProfile(text, name);
}

bool GlobMatch(std::string_view pattern, std::string_view text) {
  size_t p = 0, t = 0, star = std::string_view::npos, mark = 0;
  while (t < text.size()) {
    if (p < pattern.size() && (pattern[p] == '?' || pattern[p] == text[t])) {
      ++p;
      ++t;
    } else if (p < pattern.size() && pattern[p] == '*') {
      star = p++;
      mark = t;
    } else if (star != std::string_view::npos) {
      p = star + 1;
      t = ++mark;
    } else {
      return false;
    }
  }
  while (p < pattern.size() && pattern[p] == '*') ++p;
  return p == pattern.size();
}

bool IsFabricPort(const NicSelector& s, const PortFacts& port) {
  for (const std::string& ex : s.exclude) {
    if (GlobMatch(ex, port.device)) return false;
  }
  if (!s.devices.empty()) {
    return std::any_of(s.devices.begin(), s.devices.end(),
                       [&](const std::string& g) { return GlobMatch(g, port.device); });
  }
  if (s.link_layer && port.link_layer != *s.link_layer) return false;
  if (s.min_rate_gbps && (!port.rate_gbps || *port.rate_gbps + 1e-9 < *s.min_rate_gbps)) {
    return false;
  }
  return true;
}

std::vector<Finding> CheckProfile(const NodeProfile& profile, const ProfileInputs& in) {
  std::vector<Finding> out;
  const std::string& node = in.node;
  const std::string who = "the " + profile.name + " profile";

  if (profile.gpu_count && in.topology != nullptr) {
    const int have = static_cast<int>(in.topology->gpus.size());
    if (have != *profile.gpu_count) {
      Finding f = Mismatch(
          node, have < *profile.gpu_count ? Severity::kCritical : Severity::kWarning, "", "");
      f.summary = node + " has " + std::to_string(have) + " GPUs on its PCIe bus; " + who +
                  " expects " + std::to_string(*profile.gpu_count) +
                  (have < *profile.gpu_count
                       ? ": a GPU is missing (fell off the bus?); check nvidia-smi and dmesg"
                       : ": check that the node has the right profile");
      f.evidence = {{"gpus", have}, {"expected_gpus", *profile.gpu_count}};
      out.push_back(std::move(f));
    }
  }

  // Fabric NICs: one device counts once, whatever its port count.
  std::set<std::string> fabric, others;
  for (const PortFacts& p : in.ports) {
    (IsFabricPort(profile.fabric, p) ? fabric : others).insert(p.device);
  }
  for (const std::string& d : fabric) others.erase(d);
  if (profile.fabric_nic_count && static_cast<int>(fabric.size()) != *profile.fabric_nic_count) {
    const int have = static_cast<int>(fabric.size());
    std::string counted, skipped;
    for (const std::string& d : fabric) counted += (counted.empty() ? "" : ", ") + d;
    for (const std::string& d : others) skipped += (skipped.empty() ? "" : ", ") + d;
    Finding f = Mismatch(
        node, have < *profile.fabric_nic_count ? Severity::kCritical : Severity::kWarning, "", "");
    f.summary = node + " has " + std::to_string(have) + " fabric NICs (" +
                (counted.empty() ? "none" : counted) + "); " + who + " expects " +
                std::to_string(*profile.fabric_nic_count) +
                (skipped.empty() ? "" : "; not counted as fabric: " + skipped) +
                "; check for a missing or failed HCA";
    f.evidence = {{"fabric_nics", have}, {"expected_fabric_nics", *profile.fabric_nic_count}};
    out.push_back(std::move(f));
  }

  for (const PortFacts& p : in.ports) {
    if (!fabric.count(p.device) || p.port == 0) continue;
    const std::string where = p.device + " port " + std::to_string(p.port);
    if (p.state_id >= 0 && p.state_id != 4) {
      Finding f = Mismatch(
          node, profile.fabric_nic_count ? Severity::kCritical : Severity::kWarning, p.device, "");
      f.kind = "nic_down";
      f.location.port = p.port;
      f.location.id += "/" + std::to_string(p.port);
      f.summary = where + " is " + (p.state.empty() ? "not ACTIVE" : p.state) +
                  ", not ACTIVE; check the cable, the switch port and the subnet manager";
      f.evidence = {{"state_id", p.state_id}};
      out.push_back(std::move(f));
    }
    if (profile.link_layer && !p.link_layer.empty() && p.link_layer != *profile.link_layer) {
      Finding f = Mismatch(node, Severity::kCritical, p.device,
                           where + " runs " + p.link_layer + "; " + who + " expects " +
                               *profile.link_layer + ": check the port's link type setting");
      f.location.port = p.port;
      out.push_back(std::move(f));
    }
    if (profile.rate_gbps && p.rate_gbps && p.state_id == 4 &&
        *p.rate_gbps + 1e-9 < *profile.rate_gbps) {
      Finding f = Mismatch(node, Severity::kWarning, p.device,
                           where + " runs at " + Num(*p.rate_gbps) + " Gb/s; " + who + " expects " +
                               Num(*profile.rate_gbps) +
                               ": check the cable, the transceiver and the switch port");
      f.location.port = p.port;
      f.evidence = {{"rate_gbps", *p.rate_gbps}, {"expected_rate_gbps", *profile.rate_gbps}};
      out.push_back(std::move(f));
    }
    if (profile.mtu && p.mtu && *p.mtu != *profile.mtu) {
      Finding f = Mismatch(node, Severity::kWarning, p.device,
                           where + " (" + p.netdev + ") has MTU " + std::to_string(*p.mtu) + "; " +
                               who + " expects " + std::to_string(*profile.mtu));
      f.location.port = p.port;
      f.evidence = {{"mtu", *p.mtu}, {"expected_mtu", *profile.mtu}};
      out.push_back(std::move(f));
    }
  }

  if (in.pcie != nullptr) {
    for (const PcieLink& l : *in.pcie) {
      const PcieExpectation* want = nullptr;
      if (l.target.role == "gpu") want = &profile.gpu_pcie;
      if (l.target.role == "nic" && fabric.count(l.target.owner)) want = &profile.nic_pcie;
      if (want == nullptr) continue;
      const int gen = l.max_speed_gts ? PcieGeneration(*l.max_speed_gts) : 0;
      const bool gen_low = want->gen && gen > 0 && gen < *want->gen;
      const bool width_low = want->width && l.max_width && *l.max_width < *want->width;
      if (!gen_low && !width_low) continue;
      Finding f =
          Mismatch(node, Severity::kWarning, l.target.owner,
                   l.target.owner + " (" + l.target.bdf + ") can link at most at Gen" +
                       std::to_string(gen) + " x" + std::to_string(l.max_width.value_or(0)) + "; " +
                       who + " expects Gen" + std::to_string(want->gen.value_or(gen)) + " x" +
                       std::to_string(want->width.value_or(l.max_width.value_or(0))) +
                       ": check that the right card sits in the right slot");
      f.location.type = l.target.role;
      f.evidence = {{"max_gen", gen}, {"max_width", l.max_width.value_or(0)}};
      out.push_back(std::move(f));
    }
  }

  if (profile.max_gpu_nic_class && in.affinity != nullptr && !in.affinity->nics.empty()) {
    const Affinity& a = *in.affinity;
    for (size_t g = 0; g < a.gpus.size(); ++g) {
      if (!a.best_class[g] || *a.best_class[g] <= *profile.max_gpu_nic_class) continue;
      std::string nics;
      for (const std::string& n : a.best_nics[g]) nics += (nics.empty() ? "" : ", ") + n;
      Finding f;
      f.kind = "gpu_nic_locality";
      f.severity = Severity::kWarning;
      f.location = {"gpu", node + "/" + a.gpus[g], node, a.gpus[g], 0};
      f.summary = a.gpus[g] + "'s nearest fabric NIC (" + nics + ") is " +
                  PathClassName(*a.best_class[g]) + " away; " + who + " allows at worst " +
                  PathClassName(*profile.max_gpu_nic_class) +
                  ", so its RDMA traffic crosses the host: check card placement";
      f.evidence = {{"class", static_cast<double>(*a.best_class[g])},
                    {"allowed_class", static_cast<double>(*profile.max_gpu_nic_class)}};
      out.push_back(std::move(f));
    }
  }
  return out;
}

}  // namespace fw::topology
