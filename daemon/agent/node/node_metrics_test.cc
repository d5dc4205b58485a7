// Node metrics: node_exporter parity on the real H100 tree, self-health, snapshots, the loop.
#include "daemon/agent/node/node_metrics.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <thread>

#include "probes/counters/fake_sysfs.h"

namespace fw::agent {
namespace {

using namespace std::chrono_literals;
using ::testing::HasSubstr;
using ::testing::Not;

std::string Testdata(const std::string& rel) {
  const char* dir = std::getenv("FW_TESTDATA");
  return std::string(dir ? dir : "tests/testdata") + "/" + rel;
}

// name{labels} → value, from the exposition text.
std::map<std::string, double> Scrape(const metrics::Registry& r) {
  std::map<std::string, double> out;
  std::istringstream in(r.RenderToString());
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    const size_t sp = line.rfind(' ');
    out[line.substr(0, sp)] = std::strtod(line.c_str() + sp + 1, nullptr);
  }
  return out;
}

uint64_t ReadU64(const std::string& path) {
  std::ifstream in(path);
  uint64_t v = 0;
  in >> v;
  EXPECT_TRUE(static_cast<bool>(in) || in.eof()) << path;
  return v;
}

NodeMetricsOptions Options(const std::string& sysfs_root, const std::string& xml,
                           const std::string& node) {
  NodeMetricsOptions o;
  o.check.sysfs_root = sysfs_root;
  o.check.hwloc_xml = xml;
  o.check.node_name = node;
  return o;
}

NodeMetricsOptions H100Options() {
  return Options(Testdata("sysfs/gpud-h100"), Testdata("hwloc/psmgmt-topo.jrc0386.xml"), "h100");
}

// node_exporter's InfiniBand collector (prometheus/node_exporter collector/infiniband_linux.go,
// parsing in prometheus/procfs sysfs/class_infiniband.go) exports, per device and port:
// port_data_{transmitted,received}_bytes_total = port_{xmit,rcv}_data × 4, link_downed_total,
// port_errors_received_total = port_rcv_errors, port_discards_transmitted_total =
// port_xmit_discards, port_transmit_wait_total = port_xmit_wait, state_id, and
// rate_bytes_per_second = Gb/s × 125000000. Ours must be the same numbers.
TEST(NodeMetrics, NodeExporterParityOnH100Tree) {
  metrics::Registry registry;
  FakeClock clock;
  NodeMetrics nm(H100Options(), registry, clock);
  ASSERT_TRUE(nm.SampleNow().ok());
  const auto m = Scrape(registry);
  const std::string ib = Testdata("sysfs/gpud-h100/class/infiniband/");
  int ports = 0;
  for (const char* dev : {"mlx5_0", "mlx5_1", "mlx5_4", "mlx5_5", "mlx5_6", "mlx5_7", "mlx5_8",
                          "mlx5_9", "mlx5_bond_0"}) {
    ++ports;
    const std::string c = ib + dev + "/ports/1/counters/";
    const std::string l = std::string("{device=\"") + dev + "\",port=\"1\"}";
    auto ours = [&](const std::string& name) {
      auto it = m.find("fabricwatch_" + name + l);
      EXPECT_NE(it, m.end()) << name << l;
      return it == m.end() ? -1.0 : it->second;
    };
    EXPECT_EQ(ours("nic_port_xmit_bytes_total"),
              static_cast<double>(ReadU64(c + "port_xmit_data") * 4));
    EXPECT_EQ(ours("nic_port_rcv_bytes_total"),
              static_cast<double>(ReadU64(c + "port_rcv_data") * 4));
    EXPECT_EQ(ours("nic_port_link_downed_total"), static_cast<double>(ReadU64(c + "link_downed")));
    EXPECT_EQ(ours("nic_port_rcv_errors_total"),
              static_cast<double>(ReadU64(c + "port_rcv_errors")));
    EXPECT_EQ(ours("nic_port_xmit_discards_total"),
              static_cast<double>(ReadU64(c + "port_xmit_discards")));
    EXPECT_EQ(ours("nic_port_xmit_wait_total"), static_cast<double>(ReadU64(c + "port_xmit_wait")));
    EXPECT_EQ(ours("nic_port_symbol_errors_total"),
              static_cast<double>(ReadU64(c + "symbol_error")));
    EXPECT_EQ(ours("nic_port_state"), 4.0);  // node_exporter state_id
    const double expected_rate = std::string(dev) == "mlx5_bond_0" ? 200 : 400;
    EXPECT_EQ(ours("nic_port_rate_gbps") * 125000000.0, expected_rate * 125000000.0);
  }
  EXPECT_EQ(ports, 9);
  // Spot-check literal numbers from the files.
  EXPECT_EQ(m.at("fabricwatch_nic_port_xmit_bytes_total{device=\"mlx5_0\",port=\"1\"}"),
            921770677727356.0);
  EXPECT_EQ(m.at("fabricwatch_nic_port_link_downed_total{device=\"mlx5_1\",port=\"1\"}"), 255.0);
  EXPECT_EQ(m.at("fabricwatch_nic_port_xmit_wait_total{device=\"mlx5_4\",port=\"1\"}"),
            2489603687.0);
  EXPECT_EQ(m.count("fabricwatch_nic_port_info{device=\"mlx5_bond_0\",port=\"1\",link_layer="
                    "\"Ethernet\",hca_type=\"MT41692\",fw_ver=\"32.38.3056\"}"),
            1u);
  EXPECT_EQ(m.at("fabricwatch_gpu_nic_affinity{gpu=\"GPU1\",nic=\"mlx5_0\",class=\"PXB\"}"), 1.0);
  EXPECT_EQ(m.at("fabricwatch_node_sample_passes_total"), 1.0);
  EXPECT_EQ(m.at("fabricwatch_node_sysfs_read_errors_total{reason=\"unparsable\"}"), 0.0);
}

// The same comparison against what node_exporter itself printed for this tree (its 1.5.0 output,
// captured in testdata/). Every node_exporter series with a fabricwatch counterpart in DESIGN.md
// must hold the same number: 9 names × 9 ports. The other 16 node_exporter names (packets,
// multicast, constraint, relay, VL15, link_error_recovery, local_link_integrity, buffer overrun,
// physical_state_id, info) have no agent metric in DESIGN.md; their values are in `check`'s JSON.
TEST(NodeMetrics, SameNumbersAsNodeExporterOutputForTheH100Tree) {
  const std::string path =
      std::string(FW_NODE_TESTDATA_DIR) + "/node_exporter-1.5.0-gpud-h100.prom";
  std::ifstream golden(path);
  ASSERT_TRUE(golden.good()) << path;
  // node_exporter name → (our name, factor that turns ours into theirs).
  const std::map<std::string, std::pair<std::string, double>> kParity = {
      {"node_infiniband_port_data_transmitted_bytes_total",
       {"fabricwatch_nic_port_xmit_bytes_total", 1}},
      {"node_infiniband_port_data_received_bytes_total",
       {"fabricwatch_nic_port_rcv_bytes_total", 1}},
      {"node_infiniband_symbol_error_total", {"fabricwatch_nic_port_symbol_errors_total", 1}},
      {"node_infiniband_link_downed_total", {"fabricwatch_nic_port_link_downed_total", 1}},
      {"node_infiniband_port_errors_received_total", {"fabricwatch_nic_port_rcv_errors_total", 1}},
      {"node_infiniband_port_discards_transmitted_total",
       {"fabricwatch_nic_port_xmit_discards_total", 1}},
      {"node_infiniband_port_transmit_wait_total", {"fabricwatch_nic_port_xmit_wait_total", 1}},
      {"node_infiniband_state_id", {"fabricwatch_nic_port_state", 1}},
      {"node_infiniband_rate_bytes_per_second", {"fabricwatch_nic_port_rate_gbps", 125000000}},
  };
  metrics::Registry registry;
  FakeClock clock;
  NodeMetrics nm(H100Options(), registry, clock);
  ASSERT_TRUE(nm.SampleNow().ok());
  const auto ours = Scrape(registry);
  std::set<std::string> their_names;
  int compared = 0;
  std::string line;
  while (std::getline(golden, line)) {
    if (line.empty() || line[0] == '#') continue;
    const size_t brace = line.find('{'), sp = line.rfind(' ');
    ASSERT_NE(brace, std::string::npos) << line;
    const std::string name = line.substr(0, brace);
    their_names.insert(name);
    const auto it = kParity.find(name);
    if (it == kParity.end()) continue;
    // node_exporter's labels are {device, port}, in that order, like ours.
    const std::string labels = line.substr(brace, sp - brace);
    const double theirs = std::strtod(line.c_str() + sp + 1, nullptr);
    const auto mine = ours.find(it->second.first + labels);
    ASSERT_NE(mine, ours.end()) << it->second.first << labels;
    EXPECT_EQ(mine->second * it->second.second, theirs) << line;
    ++compared;
  }
  EXPECT_EQ(compared, 9 * 9);
  EXPECT_EQ(their_names.size(), 25u);  // the collector's names present for this tree
}

TEST(NodeMetrics, CountersAPortDoesNotHaveAreNotExportedAsZero) {
  // The H100 tree's mlx5 InfiniBand ports have no np_cnp_sent, rp_cnp_handled or
  // np_ecn_marked_roce_packets: no series, rather than a 0 that reads as "no CNPs".
  metrics::Registry registry;
  FakeClock clock;
  NodeMetrics nm(H100Options(), registry, clock);
  ASSERT_TRUE(nm.SampleNow().ok());
  const std::string text = registry.RenderToString();
  EXPECT_THAT(text, Not(HasSubstr("fabricwatch_nic_port_cnp_sent_total{")));
  EXPECT_THAT(text, Not(HasSubstr("fabricwatch_nic_port_cnp_handled_total{")));
  EXPECT_THAT(text, Not(HasSubstr("fabricwatch_nic_port_ecn_marked_total{")));
  // A RoCE port that has them exports them.
  counters::testing::FakeSysfs fs;
  fs.AddPort("mlx5_2", 1, "200 Gb/sec (4X HDR)", "Ethernet");
  fs.HwCounter("mlx5_2", 1, "np_cnp_sent", "12");
  fs.HwCounter("mlx5_2", 1, "rp_cnp_handled", "34");
  fs.HwCounter("mlx5_2", 1, "np_ecn_marked_roce_packets", "56");
  metrics::Registry r2;
  NodeMetrics roce(Options(fs.root(), Testdata("hwloc/psmgmt-topo.dp-esb01.xml"), "roce"), r2,
                   clock);
  ASSERT_TRUE(roce.SampleNow().ok());
  const auto m = Scrape(r2);
  EXPECT_EQ(m.at("fabricwatch_nic_port_cnp_sent_total{device=\"mlx5_2\",port=\"1\"}"), 12.0);
  EXPECT_EQ(m.at("fabricwatch_nic_port_cnp_handled_total{device=\"mlx5_2\",port=\"1\"}"), 34.0);
  EXPECT_EQ(m.at("fabricwatch_nic_port_ecn_marked_total{device=\"mlx5_2\",port=\"1\"}"), 56.0);
  EXPECT_EQ(m.count("fabricwatch_nic_port_symbol_errors_total{device=\"mlx5_2\",port=\"1\"}"), 0u);
}

TEST(NodeMetrics, PcieLinkSpeedAndWidthOfADowntrainedGpu) {
  counters::testing::FakeSysfs fs;
  const std::string dev = "bus/pci/devices/0000:44:00.0/";  // GPU1 of the JURECA export
  fs.Write(dev + "current_link_speed", "16.0 GT/s PCIe\n");
  fs.Write(dev + "max_link_speed", "16.0 GT/s PCIe\n");
  fs.Write(dev + "current_link_width", "8\n");
  fs.Write(dev + "max_link_width", "16\n");
  metrics::Registry registry;
  FakeClock clock;
  NodeMetrics nm(Options(fs.root(), Testdata("hwloc/psmgmt-topo.jrc0386.xml"), "jrc"), registry,
                 clock);
  ASSERT_TRUE(nm.SampleNow().ok());
  const auto m = Scrape(registry);
  const std::string l = "{bdf=\"0000:44:00.0\",which=";
  EXPECT_EQ(m.at("fabricwatch_pcie_link_width" + l + "\"current\"}"), 8.0);
  EXPECT_EQ(m.at("fabricwatch_pcie_link_width" + l + "\"max\"}"), 16.0);
  EXPECT_EQ(m.at("fabricwatch_pcie_link_speed_gts" + l + "\"current\"}"), 16.0);
  EXPECT_EQ(m.at("fabricwatch_pcie_link_speed_gts" + l + "\"max\"}"), 16.0);
  // Links without sysfs data (every other device here) get no series.
  EXPECT_EQ(m.count("fabricwatch_pcie_link_width{bdf=\"0000:43:00.0\",which=\"current\"}"), 0u);
  const NodeSnapshot snap = nm.Latest();
  ASSERT_FALSE(snap.findings.empty());
  EXPECT_EQ(snap.findings.front().kind, "pcie_downtrained");
  EXPECT_EQ(snap.findings.front().severity, Severity::kCritical);
}

TEST(NodeMetrics, SnapshotCarriesInventoryFindingsAndPorts) {
  metrics::Registry registry;
  FakeClock clock;
  NodeMetrics nm(H100Options(), registry, clock);
  ASSERT_TRUE(nm.SampleNow().ok());
  clock.Advance(1s);
  ASSERT_TRUE(nm.SampleNow().ok());
  const NodeSnapshot s = nm.Latest();
  EXPECT_EQ(s.seq, 2u);
  ASSERT_NE(s.inventory, nullptr);
  EXPECT_EQ(s.inventory->node, "h100");
  EXPECT_EQ(s.inventory->profile, "generic");
  EXPECT_EQ(s.inventory->topology.gpus.size(), 4u);
  ASSERT_EQ(s.ports.size(), 9u);
  EXPECT_EQ(s.ports[0].xmit_bytes_per_s, 0.0);
  EXPECT_EQ(s.findings.size(), 10u);  // saturated link_downed + 9 saturated buffer-overrun counters
  EXPECT_TRUE(s.last_error.empty());
}

TEST(NodeMetrics, ReadErrorsVanishingPortsAndCheckFailuresAreCounted) {
  counters::testing::FakeSysfs fs;
  fs.AddPort("mlx5_0", 1);
  fs.Counter("mlx5_0", 1, "symbol_error", "garbage");
  fs.AddPort("mlx5_1", 1);
  fs.Counter("mlx5_1", 1, "port_xmit_data", "10");
  metrics::Registry registry;
  FakeClock clock;
  NodeMetrics nm(Options(fs.root(), Testdata("hwloc/does-not-exist.xml"), "n"), registry, clock);
  EXPECT_EQ(nm.SampleNow().code(), StatusCode::kNotFound);  // counters still sampled
  auto m = Scrape(registry);
  EXPECT_EQ(m.at("fabricwatch_node_sysfs_read_errors_total{reason=\"unparsable\"}"), 1.0);
  EXPECT_EQ(m.at("fabricwatch_node_check_errors_total"), 1.0);
  EXPECT_EQ(m.at("fabricwatch_nic_port_xmit_bytes_total{device=\"mlx5_1\",port=\"1\"}"), 40.0);
  EXPECT_THAT(nm.Latest().last_error, HasSubstr("does-not-exist.xml"));
  fs.Remove("class/infiniband/mlx5_1");
  clock.Advance(1s);
  (void)nm.SampleNow();
  EXPECT_EQ(nm.Latest().findings.front().kind, "nic_down");
  clock.Advance(1s);
  (void)nm.SampleNow();  // rescan drops mlx5_1 and its series
  m = Scrape(registry);
  EXPECT_EQ(m.at("fabricwatch_node_sysfs_read_errors_total{reason=\"vanished\"}"), 1.0);
  EXPECT_EQ(m.count("fabricwatch_nic_port_xmit_bytes_total{device=\"mlx5_1\",port=\"1\"}"), 0u);
  EXPECT_THAT(registry.RenderToString(), Not(HasSubstr("device=\"mlx5_1\"")));
}

TEST(NodeMetrics, BackgroundLoopSamplesUntilStopped) {
  NodeMetricsOptions o = H100Options();
  o.sample_interval = 10ms;
  metrics::Registry registry;
  NodeMetrics nm(o, registry, RealClock::Get());
  ASSERT_TRUE(nm.Start().ok());
  for (int i = 0; i < 200 && nm.Latest().seq < 3; ++i) std::this_thread::sleep_for(10ms);
  nm.Stop();
  const uint64_t seq = nm.Latest().seq;
  EXPECT_GE(seq, 3u);
  std::this_thread::sleep_for(30ms);
  EXPECT_EQ(nm.Latest().seq, seq);  // stopped means stopped
}

}  // namespace
}  // namespace fw::agent
