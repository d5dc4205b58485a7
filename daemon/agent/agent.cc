// Agent composition.
#include "daemon/agent/agent.h"

#include <unistd.h>

#include <random>
#include <spdlog/spdlog.h>

#include "probes/topology/affinity.h"
#include "probes/topology/hwloc_discovery.h"

namespace fw::agent {

namespace v1 = fabricwatch::v1;

namespace {
std::string Hostname() {
  char buf[256] = {};
  if (gethostname(buf, sizeof buf - 1) != 0) return "unknown";
  return buf;
}
}  // namespace

Agent::Agent(AgentOptions options)
    : options_(std::move(options)),
      session_id_(std::random_device{}() | (uint64_t{std::random_device{}()} << 32)),
      self_(registry_, FW_VERSION),
      buffer_(static_cast<size_t>(std::max(1, options_.buffer_batches)),
              static_cast<size_t>(std::max(1, options_.buffer_mb)) << 20),
      discovery_errors_(registry_
                            .AddCounter("fabricwatch_discovery_errors_total",
                                        "Topology discoveries that failed.")
                            .WithLabels({})) {
  if (options_.node_name.empty()) options_.node_name = Hostname();
}

Agent::~Agent() { Stop(); }

Status Agent::Discover() {
  auto topo = topology::Discover(options_.hwloc_xml);
  inventory_.set_hostname(Hostname());
  inventory_.set_cores(static_cast<uint32_t>(std::max(1L, sysconf(_SC_NPROCESSORS_ONLN))));
  if (!topo.ok()) {
    discovery_errors_.Inc();
    inventory_.set_source(options_.hwloc_xml.empty() ? "live" : options_.hwloc_xml);
    return topo.status();
  }
  inventory_.set_source(topo->source);
  inventory_.set_packages(static_cast<uint32_t>(topo->packages));
  inventory_.set_numa_nodes(static_cast<uint32_t>(topo->numa_nodes.size()));
  topology::Affinity aff = topology::ComputeAffinity(*topo);
  auto numa_of = [&](int node_index) {
    if (node_index < 0 || node_index >= static_cast<int>(topo->nodes.size())) return -1;
    const auto& numa = topo->nodes[node_index].numa;
    return numa.size() == 1 ? numa[0] : -1;
  };
  for (size_t i = 0; i < topo->gpus.size(); ++i) {
    const topology::Gpu& g = topo->gpus[i];
    v1::Gpu* pg = inventory_.add_gpus();
    pg->set_bus_id(g.bdf);
    pg->set_name(g.model.empty() ? g.name : g.name + " " + g.model);
    pg->set_vendor_id(g.vendor_id);
    pg->set_device_id(g.device_id);
    pg->set_numa_node(numa_of(g.node_index));
    if (i < aff.best_nics.size() && !aff.best_nics[i].empty()) {
      pg->set_best_nic(aff.best_nics[i][0]);
      if (aff.best_class[i]) pg->set_affinity_class(topology::PathClassName(*aff.best_class[i]));
    }
  }
  for (const topology::Nic& n : topo->nics) {
    v1::Nic* pn = inventory_.add_nics();
    pn->set_bus_id(n.bdf);
    pn->set_device(n.name);
    if (!n.netdevs.empty()) pn->set_netdev(n.netdevs[0]);
    pn->set_vendor_id(n.vendor_id);
    pn->set_device_id(n.device_id);
    pn->set_numa_node(numa_of(n.node_index));
    pn->set_fabric(n.kind == topology::NicKind::kRdma);
  }
  return Status::Ok();
}

v1::Hello Agent::MakeHello() const {
  v1::Hello h;
  h.set_node(options_.node_name);
  h.set_version(FW_VERSION);
  *h.mutable_inventory() = inventory_;
  h.set_session_id(session_id_);
  h.set_next_seq(buffer_.next_seq());
  if (!options_.probe_address.empty()) {
    for (auto t : {v1::TRANSPORT_UDP, v1::TRANSPORT_TCP_CONNECT, v1::TRANSPORT_TCP_BW}) {
      v1::ProbeEndpoint* e = h.add_endpoints();
      e->set_transport(t);
      e->set_address(options_.probe_address);
      e->set_port(static_cast<uint32_t>(options_.probe_port));
    }
  }
  return h;
}

Status Agent::Start() {
  Status d = Discover();
  if (!d.ok()) {
    // The agent still probes and reports without an inventory; say so once.
    spdlog::warn("msg=\"topology discovery failed\" error=\"{}\"", d.message());
  }
  auto http = http::Server::Start(options_.http_listen, 2);
  if (!http.ok()) return http.status();
  http_ = std::move(*http);
  http_->HandleMetrics(registry_, [this](double s) { self_.ObserveScrape(s); });
  http_->Handle("/healthz", [](const http::Request&, http::Response& r) {
    r.Send(200, "text/plain", "ok\n");
  });

  Uplink::Options uo;
  uo.aggregator = options_.aggregator;
  uo.heartbeat_interval_s = options_.heartbeat_interval_s;
  uplink_ = std::make_unique<Uplink>(
      uo, buffer_, [this] { return MakeHello(); },
      [](const v1::ProbePlan& plan) {
        spdlog::info("msg=\"probe plan received\" version={} peers={}", plan.version(),
                     plan.peers_size());
      },
      registry_);
  uplink_->Start();
  if (options_.test_batches > 0) test_thread_ = std::thread([this] { TestBatchLoop(); });
  spdlog::info("msg=\"agent started\" node={} aggregator={} http_port={} gpus={} nics={}",
               options_.node_name, options_.aggregator, http_port(), inventory_.gpus_size(),
               inventory_.nics_size());
  return Status::Ok();
}

void Agent::TestBatchLoop() {
  auto period = std::chrono::duration<double>(1.0 / std::max(0.1, options_.test_batch_rate));
  auto next = std::chrono::steady_clock::now();
  for (int i = 1; i <= options_.test_batches && !stopping_; ++i) {
    v1::ProbeBatch b;
    b.set_test_id(static_cast<uint64_t>(i));
    v1::ProbeResult* r = b.add_results();
    r->set_peer("test");
    r->set_transport(v1::TRANSPORT_UDP);
    r->set_probe_seq(static_cast<uint64_t>(i));
    buffer_.Push(std::move(b));
    uplink_->Notify();
    next += std::chrono::duration_cast<std::chrono::steady_clock::duration>(period);
    std::this_thread::sleep_until(next);
  }
  spdlog::info("msg=\"test batches queued\" count={}", options_.test_batches);
}

void Agent::Stop() {
  if (stopping_.exchange(true)) return;
  if (test_thread_.joinable()) test_thread_.join();
  if (uplink_) uplink_->Stop();
  if (http_) http_->Stop();
  spdlog::info("msg=\"agent stopped\" node={}", options_.node_name);
}

}  // namespace fw::agent
