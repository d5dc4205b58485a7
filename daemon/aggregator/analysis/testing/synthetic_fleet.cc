// Synthetic fleet: flow plan, fault models and the per-second driver.
#include "daemon/aggregator/analysis/testing/synthetic_fleet.h"

#include <cmath>
#include <functional>
#include <stdexcept>

namespace fw::analysis::testing {
namespace {
constexpr double kHostRttS = 8e-6;  // both hosts' stacks
constexpr double kHopRttS = 2e-6;   // per link, both directions
constexpr double kLineRateBps = 100e9;
}  // namespace

std::string SyntheticFleet::HostName(int leaf, int host) {
  return "l" + std::to_string(leaf) + "h" + std::to_string(host);
}

std::string SyntheticFleet::MapYaml(const FleetShape& s) {
  std::string y = std::string("routing: ") + (s.deterministic ? "deterministic" : "ecmp") + "\n";
  y += "switches:\n";
  // Switch i of a tier answers from 198.19.<tier * 64 + i / 250>.<1 + i % 250>.
  auto addresses = [&](int tier, int i) {
    if (!s.switch_addresses) return std::string();
    return ", addresses: [198.19." + std::to_string(tier * 64 + i / 250) + "." +
           std::to_string(1 + i % 250) + "]";
  };
  for (int l = 0; l < s.leaves; ++l) {
    y += "  - {name: leaf" + std::to_string(l) + ", tier: leaf" + addresses(0, l) + "}\n";
  }
  for (int p = 0; p < s.spines; ++p) {
    y += "  - {name: spine" + std::to_string(p) + ", tier: spine" + addresses(1, p) + "}\n";
  }
  y += "links:\n";
  for (int l = 0; l < s.leaves; ++l) {
    for (int p = 0; p < s.spines; ++p) {
      y += "  - {a: leaf" + std::to_string(l) + ", b: spine" + std::to_string(p) + "}\n";
    }
  }
  y += "hosts:\n";
  for (int l = 0; l < s.leaves; ++l) {
    for (int h = 0; h < s.hosts_per_leaf; ++h) {
      const int n = l * s.hosts_per_leaf + h;
      y += "  - {node: " + HostName(l, h) + ", nic: mlx5_0, address: 198.18." +
           std::to_string(n / 250) + "." + std::to_string(1 + n % 250) + ", switch: leaf" +
           std::to_string(l) + "}\n";
    }
  }
  return y;
}

SyntheticFleet::SyntheticFleet(FleetShape shape, AnalysisConfig config, FindingsStore* store)
    : shape_(shape), rng_(shape.seed) {
  StatusOr<FabricMap> parsed = FabricMap::Parse(MapYaml(shape), "synthetic fleet");
  if (!parsed.ok()) throw std::runtime_error(parsed.status().ToString());
  truth_ = std::make_shared<const FabricMap>(std::move(parsed).value());
  if (shape.with_map) map_ = truth_;
  pairs_ = std::make_unique<aggregator::PairTable>(clock_, map_);
  analyzer_ = std::make_unique<Analyzer>(clock_, map_, pairs_.get(), config, PathResolver{}, store);
  link_faults_.assign(truth_->links().size(), LinkFault{});
  Plan();
}

void SyntheticFleet::Plan() {
  auto add = [&](int la, int ha, int lb, int hb, uint32_t flow_id, Transport t, double bw_phase) {
    PlannedFlow f;
    f.src = HostName(la, ha);
    f.dst = HostName(lb, hb);
    f.transport = t;
    f.flow_id = flow_id;
    f.src_port = static_cast<uint16_t>(40000 + flow_id);
    f.path = RouteOf(f);
    f.base_rtt_s = kHostRttS + kHopRttS * static_cast<double>(f.path.size());
    f.bw_phase_s = bw_phase;
    flows_.push_back(std::move(f));
  };
  const int L = shape_.leaves, H = shape_.hosts_per_leaf;
  for (int l = 0; l < L; ++l) {
    for (int a = 0; a < H; ++a) {
      for (int b = 0; b < H; ++b) {
        if (a != b) add(l, a, l, b, 0, Transport::kUdp, -1);
      }
    }
  }
  for (int la = 0; la < L; ++la) {
    for (int lb = 0; lb < L; ++lb) {
      if (la == lb) continue;
      const int ha = (la + lb) % H, hb = (la * 7 + lb) % H;  // the leaf pair's representatives
      for (int k = 0; k < shape_.inter_flows; ++k) add(la, ha, lb, hb, k, Transport::kUdp, -1);
      if (shape_.bw_every_s > 0) {
        // Bursts rotate over the flow ids so that every path gets measured.
        for (int k = 0; k < shape_.inter_flows; ++k) {
          const double phase = std::fmod((la * L + lb) * 1.7 + k * shape_.bw_every_s,
                                         shape_.bw_every_s * shape_.inter_flows);
          add(la, ha, lb, hb, k, Transport::kTcpBw, phase);
        }
      }
    }
  }
}

std::vector<aggregator::LinkIndex> SyntheticFleet::RouteOf(const PlannedFlow& f) const {
  const FabricMap& m = *truth_;
  const auto s = m.FindHostNic(f.src, "mlx5_0");
  const auto d = m.FindHostNic(f.dst, "mlx5_0");
  const auto full = m.Paths(*s, *d).FullPaths();
  size_t index = f.flow_id % full.size();
  if (!shape_.deterministic) {
    std::string key = f.src + f.dst + std::to_string(f.src_port);
    if (route_salt_ != 0) key += "/" + std::to_string(route_salt_);
    index = std::hash<std::string>{}(key) % full.size();
  }
  return full[index];
}

void SyntheticFleet::Reroute(uint64_t salt) {
  route_salt_ = salt;
  for (PlannedFlow& f : flows_) f.path = RouteOf(f);
}

void SyntheticFleet::TraceFlows(const std::set<std::string>& silent) {
  TracedPaths* traced = analyzer_->traced_paths();
  if (!traced) return;
  const int64_t now_ns = clock_.MonotonicNanos();
  for (const FlowTrace& t : FlowTraces(silent)) {
    traced->Record(t.src, t.dst, t.src_port, t.hops, now_ns);
  }
}

std::vector<SyntheticFleet::FlowTrace> SyntheticFleet::FlowTraces(
    const std::set<std::string>& silent) const {
  std::vector<FlowTrace> out;
  const FabricMap& m = *truth_;
  for (const PlannedFlow& f : flows_) {
    if (f.transport != Transport::kUdp || f.path.empty()) continue;
    // Hop k is the k-th switch: the source's leaf, then the far end of each core link.
    std::vector<std::string> hops;
    aggregator::SwitchIndex at = m.links()[f.path.front()].a;
    auto answer = [&](aggregator::SwitchIndex sw) {
      const aggregator::Switch& s = m.switches()[sw];
      hops.push_back(silent.count(s.name) || s.addresses.empty() ? "" : s.addresses.front());
    };
    answer(at);
    for (size_t i = 1; i + 1 < f.path.size(); ++i) {
      const aggregator::Link& l = m.links()[f.path[i]];
      at = l.a == at ? l.b : l.a;
      answer(at);
    }
    out.push_back(FlowTrace{f.src, f.dst, f.src_port, std::move(hops)});
  }
  return out;
}

void SyntheticFleet::SetLinkFault(const std::string& link_id, LinkFault fault) {
  const auto l = truth_->FindLink(link_id);
  if (!l) throw std::invalid_argument("no link " + link_id);
  link_faults_[*l] = fault;
}

void SyntheticFleet::SetHostNoise(const std::string& node, double factor, bool as_prober,
                                  bool as_target) {
  host_noise_[node] = {factor, {as_prober, as_target}};
}

void SyntheticFleet::ClearFaults() {
  link_faults_.assign(truth_->links().size(), LinkFault{});
  host_noise_.clear();
}

std::vector<ReportedProbe> SyntheticFleet::GenerateSecond() {
  std::vector<ReportedProbe> out;
  out.reserve(flows_.size());
  std::uniform_real_distribution<double> uni(0.0, 1.0);
  std::normal_distribution<double> gauss(0.0, 1.0);
  const double period = shape_.bw_every_s * shape_.inter_flows;
  for (const PlannedFlow& f : flows_) {
    if (f.transport == Transport::kTcpBw) {
      const double t =
          std::fmod(static_cast<double>(second_) - f.bw_phase_s + 1e9 * period, period);
      if (t >= 1.0) continue;  // not this flow's second
    }
    double keep = 1.0 - shape_.background_loss, rtt_factor = 1.0, bw_factor = 1.0;
    for (aggregator::LinkIndex l : f.path) {
      keep *= 1.0 - link_faults_[l].loss;
      // A random draw only for intermittent queues, so other scenarios keep their random stream.
      const LinkFault& lf = link_faults_[l];
      if (lf.slowed_fraction >= 1 || uni(rng_) < lf.slowed_fraction) rtt_factor *= lf.rtt_factor;
      bw_factor *= link_faults_[l].bw_factor;
    }
    if (auto it = host_noise_.find(f.src); it != host_noise_.end() && it->second.second.first) {
      rtt_factor *= 1.0 + (it->second.first - 1.0) * uni(rng_) * 2;
    }
    if (auto it = host_noise_.find(f.dst); it != host_noise_.end() && it->second.second.second) {
      rtt_factor *= 1.0 + (it->second.first - 1.0) * uni(rng_) * 2;
    }
    ReportedProbe r;
    r.src_node = f.src;
    r.dst_node = f.dst;
    r.transport = f.transport;
    r.src_port = f.src_port;
    r.flow_id = f.flow_id;
    r.seq = ++seq_;
    r.lost = uni(rng_) >= keep;
    // Realistic jitter: a few percent around the base, and a rare spike of 2-5x.
    double jitter = 1.0 + std::abs(gauss(rng_)) * 0.04;
    if (uni(rng_) < 0.003) jitter *= 2.0 + 3.0 * uni(rng_);
    if (f.transport == Transport::kTcpBw) {
      r.goodput_bps = kLineRateBps * bw_factor * (0.97 + 0.03 * uni(rng_));
      r.bytes = 4 << 20;
      r.rtt_ns = static_cast<int64_t>(r.bytes * 8 / r.goodput_bps * 1e9);
    } else {
      r.rtt_ns = static_cast<int64_t>(f.base_rtt_s * rtt_factor * jitter * 1e9);
      r.bytes = 64;
    }
    out.push_back(std::move(r));
  }
  ++second_;
  return out;
}

void SyntheticFleet::IngestSecond() {
  std::vector<ReportedProbe> batch = GenerateSecond();
  if (rewrite_) rewrite_(batch);
  results_ += batch.size();
  // Agents batch per source node; results of one node are contiguous in the plan.
  size_t begin = 0;
  for (size_t j = 1; j <= batch.size(); ++j) {
    if (j == batch.size() || batch[j].src_node != batch[begin].src_node) {
      const std::span<const ReportedProbe> part(batch.data() + begin, j - begin);
      pairs_->RecordBatch(part);
      analyzer_->OnHostDelays(part);
      analyzer_->NoteLost(part);
      begin = j;
    }
  }
}

void SyntheticFleet::Run(int seconds) { Step(seconds, false); }

void SyntheticFleet::RunWithBetweenTicks(int seconds) { Step(seconds, true); }

void SyntheticFleet::Step(int seconds, bool between_ticks) {
  for (int i = 0; i < seconds; ++i) {
    clock_.Advance(std::chrono::milliseconds(100));
    IngestSecond();
    if (between_ticks) {
      clock_.Advance(std::chrono::milliseconds(250));
      analyzer_->BetweenTicks();
      for (aggregator::EscalationRequest& r : analyzer_->TakeBetweenTickLeads()) {
        between_leads_.push_back(std::move(r));
      }
      clock_.Advance(std::chrono::milliseconds(600));
    } else {
      clock_.Advance(std::chrono::milliseconds(850));
    }
    analyzer_->Tick();
    clock_.Advance(std::chrono::milliseconds(50));
  }
}

FleetShape TracedEcmpShape(int spines, int leaves, int hosts_per_leaf, int inter_flows) {
  FleetShape s;
  s.spines = spines;
  s.leaves = leaves;
  s.hosts_per_leaf = hosts_per_leaf;
  s.inter_flows = inter_flows;
  s.deterministic = false;
  s.switch_addresses = true;
  return s;
}

std::string DescribeFindings(const std::vector<TrackedFinding>& findings) {
  std::string out;
  for (const auto& f : findings) out += f.finding.kind + "@" + f.finding.location.id + " ";
  return out;
}

double FindingEvidence(const TrackedFinding& f, const std::string& key) {
  auto it = f.finding.evidence.find(key);
  return it == f.finding.evidence.end() ? -1 : it->second;
}

}  // namespace fw::analysis::testing
