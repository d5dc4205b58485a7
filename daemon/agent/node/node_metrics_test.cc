// Node metrics: node_exporter parity on the real H100 tree, self-health, snapshots, the loop.
#include "daemon/agent/node/node_metrics.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <map>
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

NodeMetricsOptions H100Options() {
  NodeMetricsOptions o;
  o.check.sysfs_root = Testdata("sysfs/gpud-h100");
  o.check.hwloc_xml = Testdata("hwloc/psmgmt-topo.jrc0386.xml");
  o.check.node_name = "h100";
  return o;
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
  NodeMetricsOptions o;
  o.check.sysfs_root = fs.root();
  o.check.hwloc_xml = Testdata("hwloc/does-not-exist.xml");
  o.check.node_name = "n";
  metrics::Registry registry;
  FakeClock clock;
  NodeMetrics nm(o, registry, clock);
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
