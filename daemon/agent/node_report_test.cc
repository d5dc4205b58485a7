// Node snapshot → wire messages, on the real H100 sysfs tree and a real hwloc export.
#include "daemon/agent/node_report.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>

namespace fw::agent {
namespace {

std::string TestData() {
  const char* d = std::getenv("FW_TESTDATA");
  return d ? d : "tests/testdata";
}

TEST(NodeReportTest, RealTreeBecomesWireMessages) {
  FakeClock clock;
  metrics::Registry registry;
  NodeMetricsOptions o;
  o.check.sysfs_root = TestData() + "/sysfs/gpud-h100";
  o.check.hwloc_xml = TestData() + "/hwloc/psmgmt-topo.jrc0386.xml";
  o.check.node_name = "h100-test";
  NodeMetrics node(o, registry, clock);
  ASSERT_TRUE(node.SampleNow().ok());
  NodeSnapshot snap = node.Latest();
  ASSERT_TRUE(snap.inventory);

  auto inv = InventoryToProto(*snap.inventory);
  EXPECT_EQ(inv.gpus_size(), 4);
  EXPECT_EQ(inv.numa_nodes(), 8u);
  EXPECT_EQ(inv.gpus(0).affinity_class(), "PXB");  // each A100 shares a switch with one HCA

  auto counters = CounterBatchToProto(snap);
  ASSERT_EQ(counters.ports_size(), 9);  // 8 NDR ports and the bond
  bool saw_saturated = false;
  for (const auto& p : counters.ports()) {
    // A single pass has no rates: unknown must travel as NaN, never as a false zero.
    EXPECT_TRUE(std::isnan(p.xmit_bytes_per_s())) << p.device();
    if (p.device() == "mlx5_1") {
      EXPECT_EQ(p.counters().at("link_downed"), 255);
      saw_saturated = true;
    }
    if (p.device() == "mlx5_0") {
      EXPECT_EQ(p.rate_gbps(), 400);
      EXPECT_EQ(p.state(), "ACTIVE");
    }
  }
  EXPECT_TRUE(saw_saturated);

  auto report = CheckReportToProto(snap);
  EXPECT_FALSE(report.json().empty());
  EXPECT_GE(report.exit_code(), 1);  // link_downed saturated at 255 is at least a warning
  bool saturated_finding = false;
  for (const auto& f : report.findings()) {
    if (f.location().device() == "mlx5_1" && f.summary().find("255") != std::string::npos) {
      saturated_finding = true;
    }
  }
  EXPECT_TRUE(saturated_finding) << report.DebugString();
}

}  // namespace
}  // namespace fw::agent
