// The one-shot node check and its text and JSON renderings.
#include "daemon/agent/node/check_command.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <set>
#include <sstream>
#include <thread>

#include "common/finding_json.h"
#include "probes/counters/ethtool_stats.h"
#include "probes/counters/sysfs_value.h"
#include "probes/topology/hwloc_discovery.h"

namespace fw::agent {
namespace {

std::optional<int> ReadMtu(const std::string& sysfs_root, const std::string& netdev) {
  if (netdev.empty()) return std::nullopt;
  std::ifstream in(std::filesystem::path(sysfs_root) / "class" / "net" / netdev / "mtu");
  std::string text;
  if (!std::getline(in, text)) return std::nullopt;
  auto v = counters::ParseCounterValue(text);
  if (!v.ok() || *v > (1u << 20)) return std::nullopt;
  return static_cast<int>(*v);
}

const char* VerdictName(int code) {
  switch (code) {
    case 0:
      return "OK";
    case 1:
      return "WARNING";
    case 2:
      return "CRITICAL";
    default:
      return "UNKNOWN";
  }
}

nlohmann::json OptNum(const std::optional<double>& v) {
  return v ? nlohmann::json(*v) : nlohmann::json(nullptr);
}

}  // namespace

std::string NodeNameOrHostname(const std::string& name) {
  if (!name.empty()) return name;
  char buf[256] = {};
  if (gethostname(buf, sizeof(buf) - 1) != 0) return "unknown";
  return buf;
}

std::vector<topology::PortFacts> PortFactsFrom(const std::vector<counters::PortSample>& ports,
                                               const topology::NodeTopology& topo,
                                               const std::string& sysfs_root) {
  std::vector<topology::PortFacts> out;
  std::set<std::string> seen;
  for (const counters::PortSample& p : ports) {
    if (p.vanished) continue;
    topology::PortFacts f;
    f.device = p.device;
    f.port = p.port;
    f.link_layer = p.link_layer;
    f.rate_gbps = p.rate_gbps;
    f.state_id = p.state_id;
    f.state = p.state;
    f.netdev = p.netdev;
    f.mtu = ReadMtu(sysfs_root, p.netdev);
    seen.insert(p.device);
    out.push_back(std::move(f));
  }
  for (const topology::Nic& n : topo.nics) {
    if (n.kind != topology::NicKind::kRdma || seen.count(n.name)) continue;
    topology::PortFacts f;
    f.device = n.name;
    if (!n.netdevs.empty()) f.netdev = n.netdevs.front();
    out.push_back(std::move(f));
  }
  return out;
}

NodeInventory BuildInventory(std::string node, topology::NodeTopology topo,
                             const topology::NodeProfile& profile,
                             const std::vector<counters::PortSample>& ports,
                             const std::string& sysfs_root) {
  NodeInventory inv;
  inv.node = std::move(node);
  inv.profile = profile.name;
  inv.port_facts = PortFactsFrom(ports, topo, sysfs_root);
  std::set<std::string> fabric;
  for (const topology::PortFacts& f : inv.port_facts) {
    if (topology::IsFabricPort(profile.fabric, f)) fabric.insert(f.device);
  }
  inv.fabric_nics.assign(fabric.begin(), fabric.end());
  // The matrix covers the fabric NICs hwloc can place; if it places none of them, all of its
  // RDMA NICs, so the matrix still shows the machine.
  std::vector<std::string> columns;
  for (const topology::Nic& n : topo.nics) {
    if (n.kind == topology::NicKind::kRdma && fabric.count(n.name)) columns.push_back(n.name);
  }
  inv.affinity = topology::ComputeAffinity(topo, columns);
  inv.pcie = topology::ReadPcieLinks(sysfs_root, topology::PcieTargets(topo, sysfs_root));
  inv.topology = std::move(topo);
  return inv;
}

std::vector<Finding> CheckInventory(const NodeInventory& inv,
                                    const topology::NodeProfile& profile) {
  std::vector<Finding> out = topology::CheckPcieLinks(inv.pcie, inv.node);
  topology::ProfileInputs in;
  in.node = inv.node;
  in.topology = &inv.topology;
  in.affinity = &inv.affinity;
  in.pcie = &inv.pcie;
  in.ports = inv.port_facts;
  for (Finding& f : topology::CheckProfile(profile, in)) out.push_back(std::move(f));
  return out;
}

StatusOr<NodeCheckResult> CheckNode(const CheckOptions& options, const Clock& clock) {
  auto profile = topology::LoadProfile(options.profile);
  if (!profile.ok()) return profile.status();
  auto topo = topology::Discover(options.hwloc_xml);
  if (!topo.ok()) return topo.status();
  counters::EthtoolStatsReader ethtool;
  counters::Sampler sampler({.sysfs_root = options.sysfs_root,
                             .xmit_wait_tick_bytes = options.xmit_wait_tick_bytes,
                             .ethernet_stats = options.read_pause_counters ? &ethtool : nullptr},
                            clock);
  const std::vector<counters::PortSample>* samples = &sampler.SampleOnce();
  if (options.counter_interval.count() > 0) {
    std::this_thread::sleep_for(options.counter_interval);
    samples = &sampler.SampleOnce();
  }
  NodeCheckResult result;
  result.ports = *samples;
  result.inventory = BuildInventory(NodeNameOrHostname(options.node_name), std::move(*topo),
                                    *profile, result.ports, options.sysfs_root);
  result.findings = CheckInventory(result.inventory, *profile);
  for (Finding& f :
       counters::CheckPorts(result.ports, result.inventory.node, options.port_checks)) {
    result.findings.push_back(std::move(f));
  }
  SortFindings(result.findings);
  return result;
}

nlohmann::json CheckResultToJson(const NodeCheckResult& r) {
  const NodeInventory& inv = r.inventory;
  const topology::Affinity& a = inv.affinity;
  nlohmann::json j;
  j["node"] = inv.node;
  j["profile"] = inv.profile;
  j["source"] = inv.topology.source;
  j["gpus"] = nlohmann::json::array();
  for (size_t g = 0; g < inv.topology.gpus.size(); ++g) {
    const topology::Gpu& gpu = inv.topology.gpus[g];
    nlohmann::json e = {
        {"name", gpu.name}, {"bdf", gpu.bdf}, {"model", gpu.model}, {"os_device", gpu.os_device}};
    std::ostringstream id;
    id << std::hex << std::setfill('0') << std::setw(4) << gpu.vendor_id << ":" << std::setw(4)
       << gpu.device_id;
    e["pci_id"] = id.str();
    if (g < a.best_nics.size()) {
      e["best_nics"] = a.best_nics[g];
      // A GPU with no fabric NIC in the tree (the DGX-2 export) has no best class: null, not a
      // null char pointer (which nlohmann::json cannot take).
      e["best_class"] = a.best_class[g] ? nlohmann::json(topology::PathClassName(*a.best_class[g]))
                                        : nlohmann::json(nullptr);
    }
    j["gpus"].push_back(std::move(e));
  }
  j["nics"] = nlohmann::json::array();
  std::set<std::string> listed;
  for (const topology::Nic& n : inv.topology.nics) {
    listed.insert(n.name);
    j["nics"].push_back(
        {{"name", n.name},
         {"kind", n.kind == topology::NicKind::kRdma ? "rdma" : "ethernet"},
         {"bdf", n.bdf},
         {"netdevs", n.netdevs},
         {"fabric", std::count(inv.fabric_nics.begin(), inv.fabric_nics.end(), n.name) > 0}});
  }
  for (const topology::PortFacts& f : inv.port_facts) {
    if (!listed.insert(f.device).second) continue;  // an RDMA device hwloc did not show
    j["nics"].push_back(
        {{"name", f.device},
         {"kind", "rdma"},
         {"bdf", ""},
         {"netdevs",
          f.netdev.empty() ? std::vector<std::string>{} : std::vector<std::string>{f.netdev}},
         {"fabric", std::count(inv.fabric_nics.begin(), inv.fabric_nics.end(), f.device) > 0}});
  }
  j["nvswitches"] = inv.topology.nvswitches;
  j["affinity"] = nlohmann::json::array();
  for (const topology::AffinityEntry& e : a.GpuNicEntries()) {
    j["affinity"].push_back(
        {{"gpu", e.gpu}, {"nic", e.peer}, {"class", topology::PathClassName(e.path)}});
  }
  j["pcie"] = nlohmann::json::array();
  for (const topology::PcieLink& l : inv.pcie) {
    j["pcie"].push_back(
        {{"bdf", l.target.bdf},
         {"role", l.target.role},
         {"for", l.target.owner},
         {"present", l.present},
         {"current_speed_gts", OptNum(l.current_speed_gts)},
         {"max_speed_gts", OptNum(l.max_speed_gts)},
         {"current_width",
          l.current_width ? nlohmann::json(*l.current_width) : nlohmann::json(nullptr)},
         {"max_width", l.max_width ? nlohmann::json(*l.max_width) : nlohmann::json(nullptr)},
         {"problems", l.problems}});
  }
  j["ports"] = nlohmann::json::array();
  for (const counters::PortSample& p : r.ports) {
    nlohmann::json counters = nlohmann::json::object(), rates = nlohmann::json::object();
    std::vector<std::string> saturated, unreadable;
    for (const counters::CounterReading& c : p.counters) {
      if (!c.valid) {
        unreadable.push_back(c.name + ": " + counters::ReadErrorName(c.error));
        continue;
      }
      counters[c.name] = c.value;
      if (c.rate) rates[c.name] = *c.rate;
      if (c.saturated) saturated.push_back(c.name);
    }
    j["ports"].push_back({{"device", p.device},
                          {"port", p.port},
                          {"state", p.state},
                          {"state_id", p.state_id},
                          {"phys_state", p.phys_state},
                          {"rate_gbps", OptNum(p.rate_gbps)},
                          {"link_layer", p.link_layer},
                          {"vanished", p.vanished},
                          {"interval_s", p.interval_s},
                          {"xmit_bytes_per_s", OptNum(p.xmit_bytes_per_s)},
                          {"rcv_bytes_per_s", OptNum(p.rcv_bytes_per_s)},
                          {"xmit_wait_ratio", OptNum(p.xmit_wait_ratio)},
                          {"counters", counters},
                          {"rates", rates},
                          {"saturated", saturated},
                          {"unreadable", unreadable}});
  }
  j["findings"] = nlohmann::json::array();
  for (const Finding& f : r.findings) j["findings"].push_back(FindingToJson(f));
  j["verdict"] = VerdictName(ExitCodeForFindings(r.findings));
  return j;
}

std::string CheckResultToText(const NodeCheckResult& r) {
  const NodeInventory& inv = r.inventory;
  std::ostringstream os;
  os << "node " << inv.node << " · profile " << inv.profile << " · topology " << inv.topology.source
     << "\n";
  os << inv.topology.gpus.size() << " GPUs, " << inv.fabric_nics.size() << " fabric NICs ("
     << (inv.fabric_nics.empty() ? std::string("none") : "");
  for (size_t i = 0; i < inv.fabric_nics.size(); ++i) os << (i ? " " : "") << inv.fabric_nics[i];
  os << "), " << inv.topology.nvswitches.size() << " NVSwitches, " << inv.topology.packages
     << " packages, " << inv.topology.numa_nodes.size() << " NUMA nodes\n\n";
  if (!inv.topology.gpus.empty() || !inv.affinity.nics.empty()) {
    os << topology::FormatTopoMatrix(inv.topology, inv.affinity) << "\n";
  }
  size_t unknown = 0;
  for (const topology::PcieLink& l : inv.pcie) unknown += !l.present || !l.current_width;
  os << "PCIe links: " << inv.pcie.size() << " checked, " << unknown << " without link data\n\n";
  if (!r.ports.empty()) os << "Ports:\n";
  for (const counters::PortSample& p : r.ports) {
    os << "  " << std::left << std::setw(14) << (p.device + "/" + std::to_string(p.port))
       << std::setw(8) << (p.vanished ? "GONE" : p.state) << std::setw(8) << p.phys_state;
    if (p.rate_gbps) os << std::setw(10) << (std::to_string(static_cast<int>(*p.rate_gbps)) + "G");
    os << std::setw(11) << p.link_layer;
    if (p.xmit_bytes_per_s) os << " tx " << *p.xmit_bytes_per_s / 1e9 << " GB/s";
    if (p.xmit_wait_ratio) os << " wait " << 100 * *p.xmit_wait_ratio << "%";
    os << "\n";
  }
  os << "\nFindings:" << (r.findings.empty() ? " none\n" : "\n");
  for (const Finding& f : r.findings) {
    os << "  " << (f.severity == Severity::kCritical ? "CRITICAL " : "WARNING  ") << std::setw(18)
       << f.kind << " " << f.summary << "\n";
  }
  const int code = ExitCodeForFindings(r.findings);
  os << "\nverdict: " << VerdictName(code) << " (exit " << code << ")\n";
  return os.str();
}

int RunCheck(const CheckOptions& options, std::ostream& out) {
  if (options.format != "text" && options.format != "json") {
    out << "unknown --format '" << options.format << "' (text or json)\n";
    return 3;
  }
  auto result = CheckNode(options, RealClock::Get());
  if (!result.ok()) {
    if (options.format == "json") {
      out << nlohmann::json{{"error", result.status().ToString()}, {"verdict", "UNKNOWN"}}.dump(2)
          << "\n";
    } else {
      out << "check failed: " << result.status().ToString() << "\nverdict: UNKNOWN (exit 3)\n";
    }
    return 3;
  }
  if (options.format == "json") {
    out << CheckResultToJson(*result).dump(2) << "\n";
  } else {
    out << CheckResultToText(*result);
  }
  return ExitCodeForFindings(result->findings);
}

}  // namespace fw::agent
