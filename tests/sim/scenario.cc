// Scenario YAML parsing and fault resolution.
#include "tests/sim/scenario.h"

#include <yaml-cpp/yaml.h>

#include <cmath>
#include <fstream>
#include <set>
#include <sstream>

#include "common/config.h"

namespace fw::sim {

namespace {

struct KindInfo {
  FaultKind kind;
  const char* name;
  const char* default_expect;
};
constexpr KindInfo kKinds[] = {
    {FaultKind::kLinkLoss, "link_loss", "link_degraded"},
    {FaultKind::kLinkBandwidth, "link_bandwidth", "link_degraded"},
    {FaultKind::kLinkDown, "link_down", "link_down"},
    {FaultKind::kLinkFlap, "link_flap", "link_flapping"},
    {FaultKind::kLinkCongestion, "link_congestion", "congestion"},
    {FaultKind::kSwitchCongestion, "switch_congestion", "congestion"},
    {FaultKind::kNicDegraded, "nic_degraded", "nic_degraded"},
    {FaultKind::kHostNoise, "host_noise", "host_network"},
    {FaultKind::kHostCpuBusy, "host_cpu_busy", "host_network"},
};

// Reads one YAML mapping, remembering which keys were consumed so leftovers can be reported.
class Reader {
 public:
  Reader(const YAML::Node& node, std::string where, std::string source)
      : node_(node), where_(std::move(where)), source_(std::move(source)) {}

  Status Error(const std::string& key, const std::string& what) const {
    int line = node_[key] ? node_[key].Mark().line + 1 : node_.Mark().line + 1;
    std::string path = where_.empty() ? key : where_ + "." + key;
    return Status::InvalidArgument(source_ + ":" + std::to_string(line) + ": " + path + ": " +
                                   what);
  }
  bool Has(const std::string& key) {
    seen_.insert(key);
    return static_cast<bool>(node_[key]);
  }
  Status String(const std::string& key, std::string* out) {
    if (!Has(key)) return Status::Ok();
    if (!node_[key].IsScalar()) return Error(key, "must be a string");
    *out = node_[key].Scalar();
    return Status::Ok();
  }
  Status Int(const std::string& key, int* out, int lo, int hi) {
    if (!Has(key)) return Status::Ok();
    try {
      int v = node_[key].as<int>();
      if (v < lo || v > hi) {
        return Error(key, "must be in " + std::to_string(lo) + ".." + std::to_string(hi));
      }
      *out = v;
    } catch (const YAML::Exception&) {
      return Error(key, "must be an integer");
    }
    return Status::Ok();
  }
  Status Double(const std::string& key, double* out, double lo, double hi) {
    if (!Has(key)) return Status::Ok();
    try {
      double v = node_[key].as<double>();
      if (!std::isfinite(v) || v < lo || v > hi) {
        std::ostringstream s;
        s << "must be a number in [" << lo << ", " << hi << "]";
        return Error(key, s.str());
      }
      *out = v;
    } catch (const YAML::Exception&) {
      return Error(key, "must be a number");
    }
    return Status::Ok();
  }
  Status Bool(const std::string& key, bool* out) {
    if (!Has(key)) return Status::Ok();
    try {
      *out = node_[key].as<bool>();
    } catch (const YAML::Exception&) {
      return Error(key, "must be true or false");
    }
    return Status::Ok();
  }
  Status Duration(const std::string& key, double* out) {
    if (!Has(key)) return Status::Ok();
    if (!node_[key].IsScalar()) return Error(key, "must be a duration such as 30s");
    auto d = ParseDurationSeconds(node_[key].Scalar());
    if (!d.ok()) return Error(key, d.status().message());
    *out = *d;
    return Status::Ok();
  }
  // Fails on any key that no accessor asked for (a typo would otherwise be silently ignored).
  Status NoUnknownKeys() const {
    for (const auto& kv : node_) {
      std::string k = kv.first.as<std::string>();
      if (!seen_.count(k)) return Error(k, "unknown key");
    }
    return Status::Ok();
  }

 private:
  const YAML::Node& node_;
  std::string where_;
  std::string source_;
  std::set<std::string> seen_;
};

#define FW_RETURN_IF_ERROR(expr) \
  do {                           \
    ::fw::Status st_ = (expr);   \
    if (!st_.ok()) return st_;   \
  } while (false)

Status ParseFault(const YAML::Node& n, const std::string& where, const std::string& source,
                  const FatTree& tree, double duration, Fault* f) {
  if (!n.IsMap()) {
    return Status::InvalidArgument(source + ":" + std::to_string(n.Mark().line + 1) + ": " + where +
                                   ": must be a mapping");
  }
  Reader r(n, where, source);
  f->line = n.Mark().line + 1;
  std::string kind;
  FW_RETURN_IF_ERROR(r.String("kind", &kind));
  const KindInfo* info = nullptr;
  for (const auto& k : kKinds) {
    if (kind == k.name) info = &k;
  }
  if (info == nullptr) {
    std::string all;
    for (const auto& k : kKinds) all += std::string(all.empty() ? "" : ", ") + k.name;
    return r.Error("kind", "'" + kind + "' is not a fault kind (one of: " + all + ")");
  }
  f->kind = info->kind;
  f->end_s = duration;
  FW_RETURN_IF_ERROR(r.Duration("start", &f->start_s));
  if (f->start_s >= duration) return r.Error("start", "starts after the run ends");
  FW_RETURN_IF_ERROR(r.Duration("end", &f->end_s));
  if (f->end_s <= f->start_s) return r.Error("end", "must be after start");
  FW_RETURN_IF_ERROR(r.Double("loss", &f->loss, 0, 1));
  FW_RETURN_IF_ERROR(r.Double("factor", &f->factor, 0.001, 1));
  FW_RETURN_IF_ERROR(r.Double("latency_us", &f->latency_us, 0, 1e6));
  FW_RETURN_IF_ERROR(r.Duration("period", &f->period_s));
  FW_RETURN_IF_ERROR(r.Duration("down", &f->down_s));
  FW_RETURN_IF_ERROR(r.Double("spike_prob", &f->spike_prob, 0, 1));
  FW_RETURN_IF_ERROR(r.Double("spike_us", &f->spike_us, 0, 1e6));
  FW_RETURN_IF_ERROR(r.Double("cpu_busy", &f->cpu_busy, 0, 1));
  FW_RETURN_IF_ERROR(r.Bool("reroute", &f->reroute));
  if (f->reroute && f->kind != FaultKind::kLinkDown) {
    return r.Error("reroute", "only a link_down fault reroutes");
  }
  if (f->kind == FaultKind::kLinkFlap && (f->period_s <= 0 || f->down_s >= f->period_s)) {
    return r.Error("down", "a flap needs 0 < down < period");
  }
  switch (f->kind) {
    case FaultKind::kLinkLoss:
    case FaultKind::kLinkBandwidth:
    case FaultKind::kLinkDown:
    case FaultKind::kLinkFlap:
    case FaultKind::kLinkCongestion: {
      if (!r.Has("link")) return r.Error("link", "required for " + kind);
      FW_RETURN_IF_ERROR(r.String("link", &f->target));
      auto l = tree.FindLink(f->target);
      if (!l) return r.Error("link", "no link '" + f->target + "' in this topology");
      f->link = *l;
      break;
    }
    case FaultKind::kSwitchCongestion: {
      if (!r.Has("switch")) return r.Error("switch", "required for " + kind);
      FW_RETURN_IF_ERROR(r.String("switch", &f->target));
      auto s = tree.FindSwitch(f->target);
      if (!s) return r.Error("switch", "no switch '" + f->target + "' in this topology");
      f->switch_index = *s;
      break;
    }
    case FaultKind::kNicDegraded:
    case FaultKind::kHostNoise:
    case FaultKind::kHostCpuBusy: {
      if (!r.Has("node")) return r.Error("node", "required for " + kind);
      FW_RETURN_IF_ERROR(r.String("node", &f->target));
      auto h = tree.FindHost(f->target);
      if (!h) return r.Error("node", "no node '" + f->target + "' in this topology");
      f->host = *h;
      if (f->kind == FaultKind::kNicDegraded) {
        f->nic = tree.NicName(0);
        FW_RETURN_IF_ERROR(r.String("nic", &f->nic));
        auto rail = tree.FindRail(f->nic);
        if (!rail) return r.Error("nic", "no NIC '" + f->nic + "' in this topology");
        f->rail = *rail;
        f->link = tree.AccessLink(f->host, f->rail);
      }
      break;
    }
  }
  if (r.Has("expect")) {
    const YAML::Node& e = n["expect"];
    if (e.IsScalar()) {
      f->expect_kinds.push_back(e.Scalar());
    } else if (e.IsSequence()) {
      for (const auto& k : e) f->expect_kinds.push_back(k.as<std::string>());
    } else {
      return r.Error("expect", "must be a finding kind or a list of them");
    }
  } else {
    f->expect_kinds.push_back(info->default_expect);
  }
  return r.NoUnknownKeys();
}

}  // namespace

std::string_view FaultKindName(FaultKind k) {
  for (const auto& i : kKinds) {
    if (i.kind == k) return i.name;
  }
  return "unknown";
}

StatusOr<Scenario> ParseScenario(const std::string& yaml, const std::string& source) {
  YAML::Node root;
  try {
    root = YAML::Load(yaml);
  } catch (const YAML::Exception& e) {
    return Status::InvalidArgument(source + ":" + std::to_string(e.mark.line + 1) +
                                   ": not valid YAML: " + e.msg);
  }
  if (!root.IsMap()) return Status::InvalidArgument(source + ": a scenario must be a mapping");
  Scenario s;
  Reader r(root, "", source);
  try {
    FW_RETURN_IF_ERROR(r.String("name", &s.name));
    FW_RETURN_IF_ERROR(r.String("description", &s.description));
    FW_RETURN_IF_ERROR(r.Duration("duration", &s.duration_s));
    if (s.duration_s < 1) return r.Error("duration", "must be at least 1s");
    int seed = 1;
    FW_RETURN_IF_ERROR(r.Int("seed", &seed, 0, 1 << 30));
    s.seed = static_cast<uint64_t>(seed);
    FW_RETURN_IF_ERROR(r.Int("bandwidth_probes_per_s", &s.bandwidth_probes_per_s, 0, 64));
    FW_RETURN_IF_ERROR(r.Duration("heartbeat", &s.heartbeat_s));
    if (r.Has("topology")) {
      const YAML::Node& t = root["topology"];
      Reader tr(t, "topology", source);
      FW_RETURN_IF_ERROR(tr.Int("spines", &s.topology.spines, 1, kMaxSpines));
      FW_RETURN_IF_ERROR(tr.Int("leaves", &s.topology.leaves, 1, kMaxHosts));
      FW_RETURN_IF_ERROR(tr.Int("hosts_per_leaf", &s.topology.hosts_per_leaf, 1, kMaxHosts));
      FW_RETURN_IF_ERROR(tr.Int("rails", &s.topology.rails, 1, kMaxRails));
      FW_RETURN_IF_ERROR(tr.Int("inter_leaf_flows", &s.flows.inter_leaf_flows, 0, 256));
      FW_RETURN_IF_ERROR(tr.Double("host_link_gbps", &s.topology.host_link_gbps, 1, 1e4));
      FW_RETURN_IF_ERROR(tr.Double("fabric_link_gbps", &s.topology.fabric_link_gbps, 1, 1e4));
      std::string routing = "ecmp";
      FW_RETURN_IF_ERROR(tr.String("routing", &routing));
      if (routing != "ecmp" && routing != "deterministic") {
        return tr.Error("routing", "must be ecmp or deterministic");
      }
      s.topology.deterministic = routing == "deterministic";
      FW_RETURN_IF_ERROR(tr.NoUnknownKeys());
    }
    if (r.Has("noise")) {
      const YAML::Node& n = root["noise"];
      Reader nr(n, "noise", source);
      NoiseSpec& ns = s.noise;
      FW_RETURN_IF_ERROR(nr.Double("jitter_us", &ns.jitter_us, 0, 1e6));
      FW_RETURN_IF_ERROR(nr.Double("spike_prob", &ns.spike_prob, 0, 1));
      FW_RETURN_IF_ERROR(nr.Double("spike_us", &ns.spike_us, 0, 1e6));
      FW_RETURN_IF_ERROR(nr.Double("episode_prob", &ns.episode_prob, 0, 1));
      FW_RETURN_IF_ERROR(nr.Duration("episode", &ns.episode_s));
      FW_RETURN_IF_ERROR(nr.Double("episode_us", &ns.episode_us, 0, 1e6));
      FW_RETURN_IF_ERROR(nr.Double("background_loss", &ns.background_loss, 0, 1));
      FW_RETURN_IF_ERROR(nr.Double("bandwidth_efficiency", &ns.bandwidth_efficiency, 0.01, 1));
      FW_RETURN_IF_ERROR(nr.Double("bandwidth_noise", &ns.bandwidth_noise, 0, 1));
      FW_RETURN_IF_ERROR(nr.NoUnknownKeys());
    }
    auto tree = FatTree::Build(s.topology);
    if (!tree.ok()) return Status::InvalidArgument(source + ": " + tree.status().message());
    if (r.Has("tracing")) {
      // tracing: {silent: [spine03, ...], echoes: false}; the key alone turns tracing on.
      const YAML::Node& t = root["tracing"];
      if (!t.IsMap()) return r.Error("tracing", "must be a mapping, e.g. {silent: [spine03]}");
      Reader tr(t, "tracing", source);
      s.tracing.enabled = true;
      if (!tree->SwitchAddressesFit()) {
        return r.Error("tracing", "no room for switch addresses in 198.18.0.0/15 beside the hosts");
      }
      if (tr.Has("silent")) {
        const YAML::Node& l = t["silent"];
        if (!l.IsSequence()) return tr.Error("silent", "must be a list of switch names");
        for (size_t i = 0; i < l.size(); ++i) {
          auto sw = l[i].IsScalar() ? tree->FindSwitch(l[i].Scalar()) : std::nullopt;
          if (!sw) return tr.Error("silent", "no switch '" + l[i].Scalar() + "' in this topology");
          s.tracing.silent.push_back(*sw);
        }
      }
      FW_RETURN_IF_ERROR(tr.Bool("echoes", &s.tracing.echoes));
      FW_RETURN_IF_ERROR(tr.NoUnknownKeys());
    }
    if (r.Has("faults")) {
      const YAML::Node& fs = root["faults"];
      if (!fs.IsSequence()) return r.Error("faults", "must be a list");
      for (size_t i = 0; i < fs.size(); ++i) {
        Fault f;
        FW_RETURN_IF_ERROR(ParseFault(fs[i], "faults[" + std::to_string(i) + "]", source, *tree,
                                      s.duration_s, &f));
        f.end_s = std::min(f.end_s, s.duration_s);
        s.faults.push_back(std::move(f));
      }
    }
    FW_RETURN_IF_ERROR(r.NoUnknownKeys());
  } catch (const YAML::Exception& e) {
    return Status::InvalidArgument(source + ":" + std::to_string(e.mark.line + 1) + ": " + e.msg);
  }
  if (s.name.empty()) s.name = source;
  return s;
}

StatusOr<Scenario> LoadScenario(const std::string& path) {
  std::ifstream in(path);
  if (!in) return Status::NotFound("cannot read scenario file " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ParseScenario(ss.str(), path);
}

}  // namespace fw::sim
