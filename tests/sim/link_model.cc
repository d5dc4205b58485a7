// Fault application and probe sampling.
#include "tests/sim/link_model.h"

#include <algorithm>

namespace fw::sim {

namespace {

constexpr double kCongestionLoss = 0.0005;   // default loss of an injected congestion
constexpr double kCongestedBwShare = 0.6;    // goodput share left on a congested link
constexpr double kNicDefaultLatencyUs = 20;  // a bad NIC also answers late
constexpr double kCpuBusyDefaultFactor = 0.3;  // goodput share of a saturated host's bursts

}  // namespace

FabricModel::FabricModel(const FatTree& tree, const Scenario& scenario)
    : tree_(tree),
      scenario_(scenario),
      episodes_rng_(scenario.seed * 0x2545F4914F6CDD1DULL + 17),
      episode_left_s_(static_cast<size_t>(tree.link_count()), 0.f),
      episode_us_(static_cast<size_t>(tree.link_count()), 0.f),
      links_(static_cast<size_t>(tree.link_count())),
      rerouted_(static_cast<size_t>(tree.link_count()), 0),
      hosts_(static_cast<size_t>(tree.hosts())) {}

void FabricModel::Advance(double t) {
  const NoiseSpec& noise = scenario_.noise;
  for (size_t i = 0; i < links_.size(); ++i) {
    LinkState& l = links_[i];
    l = LinkState{};
    l.loss = static_cast<float>(noise.background_loss);
    if (episode_left_s_[i] > 0) {
      episode_left_s_[i] -= 1.f;
    } else if (noise.episode_prob > 0 && episodes_rng_.Uniform() < noise.episode_prob) {
      episode_left_s_[i] = static_cast<float>(episodes_rng_.Exponential(noise.episode_s));
      episode_us_[i] = static_cast<float>(episodes_rng_.Exponential(noise.episode_us));
      if (episodes_.size() < kMaxEpisodes) {
        episodes_.push_back({static_cast<int>(i), t, episode_left_s_[i], episode_us_[i]});
      }
    }
    if (episode_left_s_[i] > 0) l.queue_us = episode_us_[i];
  }
  std::fill(hosts_.begin(), hosts_.end(), HostState{});
  std::fill(rerouted_.begin(), rerouted_.end(), 0);
  any_rerouted_ = false;
  auto congest = [](LinkState& l, const Fault& f) {
    l.queue_us += static_cast<float>(f.latency_us);
    l.loss += static_cast<float>(f.loss > 0 ? f.loss : kCongestionLoss);
    l.congested = true;
  };
  for (const Fault& f : scenario_.faults) {
    if (!f.ActiveAt(t)) continue;
    switch (f.kind) {
      case FaultKind::kLinkLoss:
        links_[static_cast<size_t>(f.link)].loss += static_cast<float>(f.loss);
        break;
      case FaultKind::kLinkBandwidth:
        links_[static_cast<size_t>(f.link)].bw_factor *= static_cast<float>(f.factor);
        break;
      case FaultKind::kLinkDown:
        links_[static_cast<size_t>(f.link)].down = true;
        if (f.reroute && !tree_.IsAccessLink(f.link)) {
          rerouted_[static_cast<size_t>(f.link)] = 1;
          any_rerouted_ = true;
        }
        break;
      case FaultKind::kLinkFlap: {
        double phase = std::fmod(t - f.start_s, f.period_s);
        if (phase < f.down_s) links_[static_cast<size_t>(f.link)].down = true;
        break;
      }
      case FaultKind::kLinkCongestion:
        congest(links_[static_cast<size_t>(f.link)], f);
        break;
      case FaultKind::kSwitchCongestion:
        for (int l : tree_.LinksOfSwitch(f.switch_index)) {
          if (!tree_.IsAccessLink(l)) congest(links_[static_cast<size_t>(l)], f);
        }
        break;
      case FaultKind::kNicDegraded: {
        LinkState& l = links_[static_cast<size_t>(f.link)];
        l.loss += static_cast<float>(f.loss);
        l.queue_us += static_cast<float>(f.latency_us > 0 ? f.latency_us : kNicDefaultLatencyUs);
        break;
      }
      case FaultKind::kHostNoise: {
        HostState& h = hosts_[static_cast<size_t>(f.host)];
        h.spike_prob = static_cast<float>(f.spike_prob);
        h.spike_us = static_cast<float>(f.spike_us);
        h.loss = static_cast<float>(f.loss);
        break;
      }
      case FaultKind::kHostCpuBusy: {
        HostState& h = hosts_[static_cast<size_t>(f.host)];
        h.cpu_busy = static_cast<float>(f.cpu_busy);
        h.bw_factor = static_cast<float>(f.factor < 1 ? f.factor : kCpuBusyDefaultFactor);
        break;
      }
    }
  }
  for (LinkState& l : links_) l.loss = std::min(l.loss, 1.f);
}

const Flow& FabricModel::Routed(const Flow& f, Flow* scratch) const {
  if (!any_rerouted_ || !f.inter_leaf) return f;
  const int spines = tree_.spines();
  bool moved = false;
  // links[1] and links[2]: the probe's way up from the source leaf and down to the destination
  // leaf; links[forward_count + 1] and [+ 2]: the echo's, from the destination leaf back.
  for (int up : {1, static_cast<int>(f.forward_count) + 1}) {
    const int link = f.links[up];
    if (!rerouted_[static_cast<size_t>(link)]) continue;
    const bool probe = up == 1;
    const int from = tree_.LeafGroup(static_cast<int>(probe ? f.src_host : f.dst_host));
    const int to = tree_.LeafGroup(static_cast<int>(probe ? f.dst_host : f.src_host));
    const int spine = link % spines;
    for (int k = 1; k < spines; ++k) {
      const int other = (spine + k) % spines;
      const int alt = tree_.FabricLink(f.rail, from, other);
      if (links_[static_cast<size_t>(alt)].down) continue;
      if (!moved) *scratch = f;
      moved = true;
      scratch->links[up] = alt;
      scratch->links[up + 1] = tree_.FabricLink(f.rail, to, other);
      break;
    }
  }
  return moved ? *scratch : f;
}

LatencySample FabricModel::SampleLatency(const Flow& flow, Rng& rng) const {
  const NoiseSpec& noise = scenario_.noise;
  Flow scratch;
  const Flow& f = Routed(flow, &scratch);
  LatencySample s;
  double rtt_us = f.base_rtt_ns * 1e-3 + rng.Exponential(noise.jitter_us);
  if (rng.Uniform() < noise.spike_prob) rtt_us += rng.Exponential(noise.spike_us);
  for (int i = 0; i < f.traversal_count; ++i) {
    const LinkState& l = links_[static_cast<size_t>(f.links[i])];
    if (l.down || (l.loss > 0 && rng.Uniform() < l.loss)) {
      s.lost = true;
      return s;
    }
    if (l.queue_us > 0) rtt_us += rng.Exponential(l.queue_us);
  }
  for (uint32_t h : {f.src_host, f.dst_host}) {
    const HostState& hs = hosts_[h];
    if (hs.loss > 0 && rng.Uniform() < hs.loss) {
      s.lost = true;
      return s;
    }
    if (hs.spike_prob > 0 && rng.Uniform() < hs.spike_prob) rtt_us += rng.Exponential(hs.spike_us);
  }
  s.rtt_ns = static_cast<uint64_t>(rtt_us * 1e3);
  return s;
}

double FabricModel::AllAnsweredProbability(const std::vector<Flow>& flows) const {
  double p = 1;
  Flow scratch;
  for (const Flow& flow : flows) {
    const Flow& f = Routed(flow, &scratch);
    for (int i = 0; i < f.traversal_count; ++i) {
      const LinkState& l = links_[static_cast<size_t>(f.links[i])];
      if (l.down) return 0;
      p *= 1.0 - std::min(1.0, static_cast<double>(l.loss));
    }
    for (uint32_t h : {f.src_host, f.dst_host}) {
      p *= 1.0 - std::min(1.0, static_cast<double>(hosts_[h].loss));
    }
  }
  return p;
}

BandwidthSample FabricModel::SampleBandwidth(const Flow& flow, uint64_t bytes, Rng& rng) const {
  const NoiseSpec& noise = scenario_.noise;
  Flow scratch;
  const Flow& f = Routed(flow, &scratch);
  BandwidthSample s;
  double capacity_bps = 1e18;
  double loss_survive = 1;
  for (int i = 0; i < f.forward_count; ++i) {
    int li = f.links[i];
    const LinkState& l = links_[static_cast<size_t>(li)];
    if (l.down) {
      s.lost = true;
      return s;
    }
    double c = tree_.LinkGbps(li) * 1e9 * l.bw_factor * (l.congested ? kCongestedBwShare : 1.0);
    capacity_bps = std::min(capacity_bps, c);
    loss_survive *= 1.0 - l.loss;
  }
  if (&f != &flow) {
    // Moved around a down link: its acknowledgements come back the echo's way, which may still
    // reach the down link from the spine end.
    for (int i = f.forward_count; i < f.traversal_count; ++i) {
      if (links_[static_cast<size_t>(f.links[i])].down) {
        s.lost = true;
        return s;
      }
    }
  }
  double loss = 1.0 - loss_survive;
  // TCP backs off under loss: a crude penalty that reaches 5% of line rate at 10% loss.
  double penalty = std::max(0.05, 1.0 - 9.5 * loss);
  double eff = noise.bandwidth_efficiency * (1.0 + noise.bandwidth_noise * rng.Normalish());
  // A healthy prober's CPUs are 20-40 % busy over a burst; a saturated one's as its fault says,
  // and it gets only its share of the goodput.
  const HostState& src = hosts_[f.src_host];
  // (From the flow, not the generator: the runs' other samples stay as they were.)
  const double busy =
      src.cpu_busy > 0 ? src.cpu_busy : 0.2 + 0.2 * ((f.src_port * 2654435761u) % 1000) / 1000.0;
  s.cpu_busy_permille = static_cast<uint32_t>(std::clamp(std::lround(busy * 1000), 1L, 1000L));
  s.cpu_peak_permille = std::min<uint32_t>(1000, s.cpu_busy_permille + 150);
  s.goodput_bps =
      std::max(1.0, capacity_bps * std::clamp(eff, 0.05, 1.0) * penalty * src.bw_factor);
  s.duration_ns =
      static_cast<uint64_t>(static_cast<double>(bytes) * 8.0 / s.goodput_bps * 1e9) + f.base_rtt_ns;
  return s;
}

}  // namespace fw::sim
