// Node metrics: a sampling loop, cached series handles, snapshots for the uplink.
#include "daemon/agent/node/node_metrics.h"

#include <pthread.h>
#include <time.h>

#include <algorithm>

#include "common/log.h"
#include "probes/topology/hwloc_discovery.h"

namespace fw::agent {
namespace {

const std::vector<std::string> kPortLabels = {"device", "port"};

double ThreadCpuSeconds() {
  timespec ts{};
  if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) != 0) return 0;
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

}  // namespace

struct NodeMetrics::PortSeries {
  std::vector<std::string> labels;       // {device, port}
  std::vector<std::string> info_labels;  // {device, port, link_layer, hca_type, fw_ver}
  metrics::Gauge* state = nullptr;
  metrics::Gauge* rate = nullptr;
  // Indexed by CounterRole; null where the role has no metric.
  std::array<metrics::Counter*, static_cast<size_t>(counters::CounterRole::kCount)> by_role{};
};

NodeMetrics::NodeMetrics(NodeMetricsOptions options, metrics::Registry& r, const Clock& clock)
    : options_(std::move(options)),
      clock_(clock),
      sampler_({.sysfs_root = options_.check.sysfs_root,
                .xmit_wait_tick_bytes = options_.check.xmit_wait_tick_bytes,
                .ethernet_stats = options_.check.read_pause_counters ? &ethtool_ : nullptr,
                .slow_every = options_.counter_slow_every},
               clock),
      port_info_(r.AddGauge("fabricwatch_nic_port_info",
                            "NIC port identity; the value is always 1.",
                            {"device", "port", "link_layer", "hca_type", "fw_ver"})),
      port_state_(r.AddGauge("fabricwatch_nic_port_state",
                             "Port state id from sysfs (1 down, 2 init, 3 armed, 4 active).",
                             kPortLabels)),
      port_rate_(r.AddGauge("fabricwatch_nic_port_rate_gbps", "Port signalling rate in Gb/s.",
                            kPortLabels)),
      xmit_bytes_(r.AddCounter("fabricwatch_nic_port_xmit_bytes_total",
                               "Bytes transmitted (sysfs port_xmit_data x 4).", kPortLabels)),
      rcv_bytes_(r.AddCounter("fabricwatch_nic_port_rcv_bytes_total",
                              "Bytes received (sysfs port_rcv_data x 4).", kPortLabels)),
      symbol_errors_(r.AddCounter("fabricwatch_nic_port_symbol_errors_total",
                                  "Minor link errors (sysfs symbol_error).", kPortLabels)),
      link_downed_(r.AddCounter("fabricwatch_nic_port_link_downed_total",
                                "Times the link went down (sysfs link_downed; 8-bit, saturates).",
                                kPortLabels)),
      rcv_errors_(r.AddCounter("fabricwatch_nic_port_rcv_errors_total",
                               "Received packets with errors (sysfs port_rcv_errors).",
                               kPortLabels)),
      xmit_discards_(r.AddCounter("fabricwatch_nic_port_xmit_discards_total",
                                  "Outbound packets discarded (sysfs port_xmit_discards).",
                                  kPortLabels)),
      xmit_wait_(r.AddCounter("fabricwatch_nic_port_xmit_wait_total",
                              "Ticks with data to send but no credit (sysfs port_xmit_wait).",
                              kPortLabels)),
      cnp_sent_(r.AddCounter("fabricwatch_nic_port_cnp_sent_total",
                             "RoCE congestion notifications sent (hw_counters/np_cnp_sent).",
                             kPortLabels)),
      cnp_handled_(r.AddCounter(
          "fabricwatch_nic_port_cnp_handled_total",
          "RoCE congestion notifications handled (hw_counters/rp_cnp_handled).", kPortLabels)),
      ecn_marked_(
          r.AddCounter("fabricwatch_nic_port_ecn_marked_total",
                       "ECN-marked RoCE packets received (hw_counters/np_ecn_marked_roce_packets).",
                       kPortLabels)),
      affinity_(r.AddGauge("fabricwatch_gpu_nic_affinity",
                           "GPU to NIC path class (PIX..SYS); the value is always 1.",
                           {"gpu", "nic", "class"})),
      pcie_speed_(r.AddGauge("fabricwatch_pcie_link_speed_gts", "PCIe link speed per lane in GT/s.",
                             {"bdf", "which"})),
      pcie_width_(
          r.AddGauge("fabricwatch_pcie_link_width", "PCIe link width in lanes.", {"bdf", "which"})),
      read_errors_(r.AddCounter("fabricwatch_node_sysfs_read_errors_total",
                                "Sysfs values that could not be used, by reason.", {"reason"})),
      resets_(r.AddCounter("fabricwatch_node_sysfs_resets_total",
                           "Port counters seen going backwards (cleared).")
                  .WithLabels({})),
      wraps_(
          r.AddCounter("fabricwatch_node_sysfs_wraps_total", "Port counters seen wrapping at 2^32.")
              .WithLabels({})),
      passes_(r.AddCounter("fabricwatch_node_sample_passes_total", "Counter sampling passes.")
                  .WithLabels({})),
      check_errors_(r.AddCounter("fabricwatch_node_check_errors_total",
                                 "Node checks (discovery, profile) that failed.")
                        .WithLabels({})),
      pass_seconds_(r.AddGauge("fabricwatch_node_sample_pass_cpu_seconds",
                               "CPU time of the last counter sampling pass.")
                        .WithLabels({})) {}

NodeMetrics::~NodeMetrics() { Stop(); }

Status NodeMetrics::Recheck() {
  last_check_mono_ns_ = clock_.MonotonicNanos();
  checked_once_ = true;
  if (!profile_) {
    auto p = topology::LoadProfile(options_.check.profile);
    if (!p.ok()) {
      check_errors_.Inc();
      return p.status();
    }
    profile_ = std::make_unique<topology::NodeProfile>(std::move(*p));
  }
  auto topo = topology::Discover(options_.check.hwloc_xml);
  if (!topo.ok()) {
    check_errors_.Inc();
    return topo.status();
  }
  std::vector<counters::PortSample> ports;
  {
    MutexLock lock(mu_);
    ports = latest_.ports;
  }
  auto inv = std::make_shared<NodeInventory>(
      BuildInventory(NodeNameOrHostname(options_.check.node_name), std::move(*topo), *profile_,
                     ports, options_.check.sysfs_root));
  std::vector<Finding> findings = CheckInventory(*inv, *profile_);
  PublishInventory(*inv);
  MutexLock lock(mu_);
  latest_.inventory = std::move(inv);
  inventory_findings_ = std::move(findings);
  return Status::Ok();
}

void NodeMetrics::PublishInventory(const NodeInventory& inv) {
  for (const auto& l : affinity_labels_) affinity_.Remove(l);
  affinity_labels_.clear();
  for (const topology::AffinityEntry& e : inv.affinity.GpuNicEntries()) {
    affinity_labels_.push_back({e.gpu, e.peer, topology::PathClassName(e.path)});
    affinity_.WithLabels(affinity_labels_.back()).Set(1);
  }
  for (const auto& l : pcie_labels_) {
    pcie_speed_.Remove(l);
    pcie_width_.Remove(l);
  }
  pcie_labels_.clear();
  for (const topology::PcieLink& l : inv.pcie) {
    auto put = [&](const char* which, const std::optional<double>& speed,
                   const std::optional<int>& width) {
      std::vector<std::string> labels = {l.target.bdf, which};
      if (speed) pcie_speed_.WithLabels(labels).Set(*speed);
      if (width) pcie_width_.WithLabels(labels).Set(*width);
      if (speed || width) pcie_labels_.push_back(std::move(labels));
    };
    put("current", l.current_speed_gts, l.current_width);
    put("max", l.max_speed_gts, l.max_width);
  }
}

void NodeMetrics::PublishPorts(const std::vector<counters::PortSample>& ports) {
  using counters::CounterRole;
  if (sampler_.stats().rescans != seen_rescans_) {
    seen_rescans_ = sampler_.stats().rescans;
    port_series_.clear();
    std::vector<std::vector<std::string>> live;
    for (const counters::PortSample& p : ports) {
      std::vector<std::string> labels = {p.device, std::to_string(p.port)};
      PortSeries* s = nullptr;
      for (auto& existing : all_series_) {
        if (existing->labels == labels) s = existing.get();
      }
      if (s == nullptr) {
        all_series_.push_back(std::make_unique<PortSeries>());
        s = all_series_.back().get();
        s->labels = labels;
        s->state = &port_state_.WithLabels(labels);
        s->rate = &port_rate_.WithLabels(labels);
      }
      // A series exists only for a counter file the port has: an mlx5 InfiniBand port has no
      // np_cnp_sent, and exporting 0 for it would claim a count nobody made (node_exporter leaves
      // absent counters out too). Handles are resolved here, on rescans, never per pass.
      s->by_role.fill(nullptr);
      auto bind = [&](CounterRole role, metrics::Family<metrics::Counter>& fam) {
        if (p.by_role[static_cast<size_t>(role)] >= 0) {
          s->by_role[static_cast<size_t>(role)] = &fam.WithLabels(labels);
        } else {
          fam.Remove(labels);
        }
      };
      bind(CounterRole::kXmitData, xmit_bytes_);
      bind(CounterRole::kRcvData, rcv_bytes_);
      bind(CounterRole::kSymbolError, symbol_errors_);
      bind(CounterRole::kLinkDowned, link_downed_);
      bind(CounterRole::kRcvErrors, rcv_errors_);
      bind(CounterRole::kXmitDiscards, xmit_discards_);
      bind(CounterRole::kXmitWait, xmit_wait_);
      bind(CounterRole::kCnpSent, cnp_sent_);
      bind(CounterRole::kCnpHandled, cnp_handled_);
      bind(CounterRole::kEcnMarked, ecn_marked_);
      port_series_.push_back(s);
      live.push_back(labels);
    }
    // Ports that went away stop being exported.
    for (const auto& old : published_ports_) {
      if (std::find(live.begin(), live.end(), old) != live.end()) continue;
      for (auto* fam : {&port_state_, &port_rate_}) fam->Remove(old);
      for (auto* fam : {&xmit_bytes_, &rcv_bytes_, &symbol_errors_, &link_downed_, &rcv_errors_,
                        &xmit_discards_, &xmit_wait_, &cnp_sent_, &cnp_handled_, &ecn_marked_}) {
        fam->Remove(old);
      }
      for (auto& s : all_series_) {
        if (s->labels == old && !s->info_labels.empty()) {
          port_info_.Remove(s->info_labels);
          s->info_labels.clear();
        }
      }
    }
    published_ports_ = std::move(live);
  }
  for (size_t i = 0; i < ports.size() && i < port_series_.size(); ++i) {
    const counters::PortSample& p = ports[i];
    PortSeries& s = *port_series_[i];
    if (p.vanished) continue;
    if (s.info_labels.empty() || s.info_labels[2] != p.link_layer || s.info_labels[4] != p.fw_ver) {
      if (!s.info_labels.empty()) port_info_.Remove(s.info_labels);
      s.info_labels = {p.device, std::to_string(p.port), p.link_layer, p.hca_type, p.fw_ver};
      port_info_.WithLabels(s.info_labels).Set(1);
    }
    if (p.state_id >= 0) s.state->Set(p.state_id);
    if (p.rate_gbps) s.rate->Set(*p.rate_gbps);
    for (size_t role = 0; role < s.by_role.size(); ++role) {
      metrics::Counter* c = s.by_role[role];
      const int idx = p.by_role[role];
      if (c == nullptr || idx < 0) continue;
      const counters::CounterReading& r = p.counters[static_cast<size_t>(idx)];
      if (r.valid) c->Set(r.Scaled());
    }
  }
}

void NodeMetrics::PublishSelf() {
  const counters::SamplerStats& st = sampler_.stats();
  read_errors_.WithLabels({"missing"}).Set(static_cast<double>(st.missing));
  read_errors_.WithLabels({"unavailable"}).Set(static_cast<double>(st.unavailable));
  read_errors_.WithLabels({"unparsable"}).Set(static_cast<double>(st.unparsable));
  read_errors_.WithLabels({"io_error"}).Set(static_cast<double>(st.io_errors));
  read_errors_.WithLabels({"vanished"}).Set(static_cast<double>(st.vanished));
  resets_.Set(static_cast<double>(st.resets));
  wraps_.Set(static_cast<double>(st.wraps));
  passes_.Set(static_cast<double>(st.passes));
}

Status NodeMetrics::SampleNow() {
  const double cpu0 = ThreadCpuSeconds();
  const std::vector<counters::PortSample>& ports = sampler_.SampleOnce();
  PublishPorts(ports);
  pass_seconds_.Set(ThreadCpuSeconds() - cpu0);
  PublishSelf();
  std::vector<Finding> port_findings;
  std::string node;
  {
    MutexLock lock(mu_);
    latest_.ports = ports;
    latest_.seq = sampler_.stats().passes;
    latest_.wall_ns = clock_.WallNanos();
    node =
        latest_.inventory ? latest_.inventory->node : NodeNameOrHostname(options_.check.node_name);
  }
  port_findings = counters::CheckPorts(ports, node, options_.check.port_checks);
  Status status;
  const int64_t recheck_ns =
      std::chrono::duration_cast<std::chrono::nanoseconds>(options_.recheck_interval).count();
  if (!checked_once_ || clock_.MonotonicNanos() - last_check_mono_ns_ >= recheck_ns) {
    status = Recheck();
    if (!status.ok()) {
      // Log once per distinct cause; the counter counts every failure.
      MutexLock lock(mu_);
      if (latest_.last_error != status.ToString()) {
        spdlog::warn("component=node_metrics msg=\"node check failed\" error={}",
                     LogQuote(status.ToString()));
      }
      latest_.last_error = status.ToString();
    } else {
      MutexLock lock(mu_);
      latest_.last_error.clear();
    }
  }
  MutexLock lock(mu_);
  latest_.findings = inventory_findings_;
  for (Finding& f : port_findings) latest_.findings.push_back(std::move(f));
  SortFindings(latest_.findings);
  return status;
}

NodeSnapshot NodeMetrics::Latest() const {
  MutexLock lock(mu_);
  return latest_;
}

Status NodeMetrics::Start() {
  Status first = SampleNow();
  {
    MutexLock lock(mu_);
    stop_ = false;
  }
  thread_ = std::thread([this] {
    pthread_setname_np(pthread_self(), "fw-node-sample");
    Loop();
  });
  return first;
}

void NodeMetrics::Loop() {
  MutexLock lock(mu_);
  while (!stop_) {
    const auto until = std::chrono::steady_clock::now() + options_.sample_interval;
    while (!stop_ && cv_.WaitUntil(mu_, until)) {
    }
    if (stop_) break;
    lock.Unlock();
    (void)SampleNow();  // errors are logged and counted inside
    lock.Lock();
  }
}

void NodeMetrics::Stop() {
  {
    MutexLock lock(mu_);
    stop_ = true;
  }
  cv_.NotifyAll();
  if (thread_.joinable()) thread_.join();
}

}  // namespace fw::agent
