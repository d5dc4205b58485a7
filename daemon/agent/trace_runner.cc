// TraceRunner: plan -> tracer flows and requests; finished traces -> PathTraceReports.
#include "daemon/agent/trace_runner.h"

#include <arpa/inet.h>

#include <algorithm>
#include <optional>

namespace fw::agent {
namespace v1 = fabricwatch::v1;

namespace {

class RealTracer final : public Tracer {
 public:
  explicit RealTracer(std::unique_ptr<net::PathTracer> t) : t_(std::move(t)) {}
  void SetFlows(std::vector<net::TraceFlow> flows) override { t_->SetFlows(std::move(flows)); }
  void Changed(const net::TraceFlow& flow, bool suspect) override { t_->Changed(flow, suspect); }
  void AddProbePackets(uint64_t n) override { t_->AddProbePackets(n); }
  std::vector<net::TracedPath> TakeTraces() override { return t_->TakeTraces(); }

 private:
  std::unique_ptr<net::PathTracer> t_;
};

}  // namespace

std::unique_ptr<Tracer> WrapPathTracer(std::unique_ptr<net::PathTracer> tracer) {
  return std::make_unique<RealTracer>(std::move(tracer));
}

v1::PathTrace TracedPathToProto(const net::TracedPath& t, const std::string& src_address,
                                int64_t mono_now_ns, int64_t unix_now_ns, bool echo) {
  v1::PathTrace p;
  p.set_src_address(src_address);
  p.set_dst_address(net::Ipv4String(t.flow.peer_address));
  p.set_src_port(t.flow.src_port);
  p.set_dst_port(t.flow.dst_port);
  p.set_transport(v1::TRANSPORT_UDP);
  p.set_dst_node(t.flow.peer);
  p.set_flow_id(t.flow.flow_id);
  for (size_t k = 0; k < t.hops.size(); ++k) {
    if (t.hops[k].empty()) continue;  // a silent hop is a TTL left out
    v1::TraceHop* h = p.add_hops();
    h->set_ttl(static_cast<uint32_t>(k + 1));
    h->set_address(t.hops[k]);
    if (k < t.hop_rtt_ns.size() && t.hop_rtt_ns[k] > 0) {
      h->set_rtt_ns(static_cast<uint64_t>(t.hop_rtt_ns[k]));
    }
  }
  p.set_finished_unix_ns(unix_now_ns - (mono_now_ns - t.finished_ns));
  p.set_status(t.reached_peer ? v1::TRACE_STATUS_REACHED_PEER : v1::TRACE_STATUS_INCOMPLETE);
  p.set_echo(echo);
  return p;
}

TraceRunner::TraceRunner(std::unique_ptr<Tracer> tracer, std::string src_address, Send send,
                         uint16_t responder_port)
    : tracer_(std::move(tracer)),
      src_address_(std::move(src_address)),
      send_(std::move(send)),
      responder_port_(responder_port) {}

void TraceRunner::OnPlan(const v1::ProbePlan& plan) {
  MutexLock lock(mu_);
  ++stats_.plans;
  peers_.clear();
  for (const v1::PlannedPeer& p : plan.peers()) {
    in_addr a{};
    // Only UDP flows to IPv4 peers are traced (path_tracer.h).
    if (p.transport() != v1::TRANSPORT_UDP || p.port() == 0 || p.port() > 65535 ||
        inet_pton(AF_INET, p.address().c_str(), &a) != 1) {
      continue;
    }
    peers_.push_back(Peer{p.node(), ntohl(a.s_addr), static_cast<uint16_t>(p.port()),
                          static_cast<uint32_t>(std::max(1, p.src_ports_size()))});
  }
  refresh_s_ = std::max(0.0, plan.trace_refresh_s());
  // A request is new when the last plan did not carry it: a plan re-sent with the same requests
  // does not trace again; a new escalation carries a new id.
  std::set<RequestKey> now;
  for (const v1::TraceRequest& r : plan.trace_requests()) {
    if (now.size() >= kMaxRequestsPerPlan) {
      ++stats_.requests_dropped;
      continue;
    }
    RequestKey k{r.peer(), static_cast<uint16_t>(std::min<uint32_t>(r.src_port(), 65535)), r.id()};
    if (now.insert(k).second && !seen_requests_.contains(k)) {
      pending_requests_.push_back(k);
      ++stats_.requests;
    }
  }
  seen_requests_ = std::move(now);
  plan_changed_ = true;
}

void TraceRunner::OnAnswered(const std::vector<net::AnsweredUdpFlow>& flows, int64_t mono_now_ns) {
  if (responder_port_ == 0) return;
  MutexLock lock(mu_);
  for (const net::AnsweredUdpFlow& f : flows) {
    // The responder's own port would be a flow from itself; port 0 no flow at all.
    if (f.port == 0 || f.address == 0) continue;
    const uint64_t key = (static_cast<uint64_t>(f.address) << 16) | f.port;
    if (auto it = echoes_.find(key); it != echoes_.end()) {
      it->second = mono_now_ns;
    } else if (echoes_.size() < kMaxEchoFlows) {
      echoes_.emplace(key, mono_now_ns);
      echoes_changed_ = true;
    } else {
      ++stats_.echo_flows_dropped;
    }
  }
  echoes_changed_ |= std::erase_if(echoes_, [&](const auto& e) {
                       return mono_now_ns - e.second > kEchoIdleNs;
                     }) > 0;
  stats_.echo_flows = echoes_.size();
}

std::string TraceRunner::NameAt(uint32_t address) const {
  for (const Peer& p : peers_) {
    if (p.address == address) return p.node;
  }
  return "";
}

void TraceRunner::RebuildFlows(const std::vector<uint16_t>& src_ports, int64_t now_ns) {
  std::unordered_map<net::TraceFlow, int64_t, net::TraceFlowHash> last;
  for (size_t i = 0; i < flows_.size(); ++i) last[flows_[i]] = last_ns_[i];
  flows_.clear();
  uint32_t flow_id = 0;
  for (const Peer& p : peers_) {
    for (uint32_t j = 0; j < p.flows; ++j, ++flow_id) {
      if (j >= src_ports.size() || src_ports[j] == 0) continue;
      flows_.push_back(net::TraceFlow{p.node, p.address, p.port, src_ports[j], flow_id});
    }
  }
  // Echo flows in a stable order (the tracer traces new flows in the order given).
  std::vector<uint64_t> echoes;
  echoes.reserve(echoes_.size());
  for (const auto& e : echoes_) echoes.push_back(e.first);
  std::sort(echoes.begin(), echoes.end());
  for (uint64_t k : echoes) {
    const auto address = static_cast<uint32_t>(k >> 16);
    flows_.push_back(
        net::TraceFlow{NameAt(address), address, static_cast<uint16_t>(k), responder_port_, 0});
  }
  echoes_changed_ = false;
  last_ns_.assign(flows_.size(), now_ns);  // new flows are traced as new by the tracer
  for (size_t i = 0; i < flows_.size(); ++i) {
    if (auto it = last.find(flows_[i]); it != last.end()) last_ns_[i] = it->second;
  }
  ports_ = src_ports;
  tracer_->SetFlows(flows_);
}

void TraceRunner::AskForRequests() {
  for (const auto& [peer, src_port, id] : pending_requests_) {
    bool any = false;
    // The echoes this node sends the peer too: escalation asks both ends of a pair, and the
    // peer's probes may come back over another link than they went.
    std::optional<uint32_t> peer_address;
    for (const Peer& p : peers_) {
      if (p.node == peer) peer_address = p.address;
    }
    for (const net::TraceFlow& f : flows_) {
      const bool echo = responder_port_ != 0 && f.src_port == responder_port_;
      if (echo) {
        if (!peer_address || f.peer_address != *peer_address) continue;
        ++stats_.echo_requested;
      } else if (f.peer != peer || (src_port != 0 && f.src_port != src_port)) {
        continue;
      }
      tracer_->Changed(f, /*suspect=*/true);
      ++stats_.requested_flows;
      any = true;
    }
    if (!any) ++stats_.requests_dropped;
  }
  pending_requests_.clear();
}

void TraceRunner::AskForStale(int64_t now_ns) {
  if (refresh_s_ <= 0) return;
  const auto period = static_cast<int64_t>(refresh_s_ * 1e9);
  for (size_t i = 0; i < flows_.size(); ++i) {
    if (now_ns - last_ns_[i] < period) continue;
    last_ns_[i] = now_ns;
    tracer_->Changed(flows_[i], /*suspect=*/false);
    ++stats_.refreshes;
  }
}

void TraceRunner::Pump(uint64_t probe_packets, const std::vector<uint16_t>& src_ports,
                       int64_t mono_now_ns, int64_t unix_now_ns) {
  std::vector<net::TracedPath> done;
  {
    MutexLock lock(mu_);
    if (probe_packets > 0) tracer_->AddProbePackets(probe_packets);
    if (plan_changed_ || echoes_changed_ || src_ports != ports_) {
      plan_changed_ = false;
      RebuildFlows(src_ports, mono_now_ns);
    }
    // Requests wait until the prober has bound the flows they name.
    if (!pending_requests_.empty() && !flows_.empty()) AskForRequests();
    AskForStale(mono_now_ns);
    done = tracer_->TakeTraces();
    for (net::TracedPath& t : done) {
      auto it = std::find(flows_.begin(), flows_.end(), t.flow);
      if (it != flows_.end()) last_ns_[static_cast<size_t>(it - flows_.begin())] = mono_now_ns;
      // An echo traced before the prober was a planned peer: its name, if known by now.
      if (IsEcho(t) && t.flow.peer.empty()) t.flow.peer = NameAt(t.flow.peer_address);
    }
  }
  for (size_t i = 0; i < done.size(); i += kMaxTracesPerReport) {
    uint64_t echoes = 0;
    v1::AgentMessage m;
    v1::PathTraceReport* r = m.mutable_path_traces();
    const size_t end = std::min(done.size(), i + kMaxTracesPerReport);
    for (size_t k = i; k < end; ++k) {
      *r->add_traces() =
          TracedPathToProto(done[k], src_address_, mono_now_ns, unix_now_ns, IsEcho(done[k]));
      echoes += IsEcho(done[k]);
    }
    send_(std::move(m));
    MutexLock lock(mu_);
    stats_.traces_sent += end - i;
    stats_.echo_traces_sent += echoes;
    ++stats_.reports_sent;
  }
}

TraceRunnerStats TraceRunner::stats() const {
  MutexLock lock(mu_);
  return stats_;
}

}  // namespace fw::agent
