// Topo report: matrix from the inventory, PCIe marks from the node's findings, one verdict for
// both formats, and a readable fallback when the node has sent no check report.
#include "daemon/cli/topo.h"

#include <gtest/gtest.h>

#include "daemon/cli/verdict.h"

namespace fw::cli {
namespace {

using nlohmann::json;

// One element of /api/v1/nodes as the aggregator renders it (two GPUs, two NICs).
json Node(bool with_check_report) {
  json inv = {{"source", "psmgmt-topo.jrc0386.xml"},
              {"gpus",
               {{{"bus_id", "0000:03:00.0"},
                 {"name", "GPU0"},
                 {"numa_node", 3},
                 {"best_nic", "mlx5_1"},
                 {"affinity_class", "PXB"}},
                {{"bus_id", "0000:44:00.0"},
                 {"name", "GPU1"},
                 {"numa_node", 1},
                 {"best_nic", "mlx5_0"},
                 {"affinity_class", "PXB"}}}},
              {"nics",
               {{{"bus_id", "0000:43:00.0"},
                 {"device", "mlx5_0"},
                 {"netdev", "ib0"},
                 {"numa_node", 1},
                 {"fabric", true}},
                {{"bus_id", "0000:04:00.0"},
                 {"device", "mlx5_1"},
                 {"netdev", "ib1"},
                 {"numa_node", 3},
                 {"fabric", true}}}}};
  if (with_check_report) {
    inv["affinity"] = json::parse(R"([
      {"gpu": "GPU0", "nic": "mlx5_0", "class": "SYS"}, {"gpu": "GPU0", "nic": "mlx5_1", "class": "PXB"},
      {"gpu": "GPU1", "nic": "mlx5_0", "class": "PXB"}, {"gpu": "GPU1", "nic": "mlx5_1", "class": "SYS"}])");
    inv["pcie"] = json::parse(R"([
      {"bdf": "0000:03:00.0", "role": "gpu", "for": "GPU0", "present": true,
       "current_speed_gts": 2.5, "max_speed_gts": 16.0, "current_width": 16, "max_width": 16},
      {"bdf": "0000:44:00.0", "role": "gpu", "for": "GPU1", "present": true,
       "current_speed_gts": 16.0, "max_speed_gts": 16.0, "current_width": 8, "max_width": 16},
      {"bdf": "0000:43:00.0", "role": "nic", "for": "mlx5_0", "present": true,
       "current_speed_gts": 16.0, "max_speed_gts": 16.0, "current_width": 16, "max_width": 16},
      {"bdf": "0000:42:00.0", "role": "bridge", "for": "GPU1", "present": false,
       "current_speed_gts": null, "max_speed_gts": null, "current_width": null, "max_width": null}])");
  }
  return {{"name", "n1"}, {"connected", true}, {"health", "critical"}, {"inventory", inv}};
}

json Findings() {
  return json::parse(R"([
    {"kind": "pcie_downtrained", "severity": "critical", "active": true,
     "location": {"type": "gpu", "id": "n1/0000:44:00.0", "node": "n1", "device": "0000:44:00.0"},
     "summary": "GPU1 (0000:44:00.0) PCIe link trained at x8 of x16"},
    {"kind": "pcie_downtrained", "severity": "critical", "active": true,
     "location": {"type": "gpu", "id": "n2/0000:03:00.0", "node": "n2", "device": "0000:03:00.0"},
     "summary": "another node's GPU"}])");
}

TEST(TopoTest, ReportHasMatrixInNicOrderWithNumaAndBusIds) {
  const json r = TopoReport(Node(true), Findings());
  EXPECT_EQ(r["affinity"]["nics"], json({"mlx5_0", "mlx5_1"}));
  ASSERT_EQ(r["affinity"]["rows"].size(), 2u);
  EXPECT_EQ(r["affinity"]["rows"][0]["gpu"], "GPU0");
  EXPECT_EQ(r["affinity"]["rows"][0]["classes"], json({"SYS", "PXB"}));
  EXPECT_EQ(r["affinity"]["rows"][1]["classes"], json({"PXB", "SYS"}));
  EXPECT_EQ(r["gpus"][1]["bdf"], "0000:44:00.0");
  EXPECT_EQ(r["gpus"][1]["numa_node"], 1);
}

TEST(TopoTest, PcieStatesComeFromTheNodesOwnFindings) {
  const json r = TopoReport(Node(true), Findings());
  ASSERT_EQ(r["pcie"].size(), 4u);
  // GPU0 at 2.5 of 16 GT/s without a finding: a GPU link idling, not a fault.
  EXPECT_EQ(r["pcie"][0]["state"], "idle_speed");
  EXPECT_EQ(r["pcie"][1]["state"], "downtrained");
  EXPECT_EQ(r["pcie"][1]["severity"], "critical");
  EXPECT_EQ(r["pcie"][2]["state"], "ok");
  EXPECT_EQ(r["pcie"][3]["state"], "no_data");
  // Only n1's finding is listed; n2's critical one neither shows nor counts.
  ASSERT_EQ(r["findings"].size(), 1u);
  EXPECT_EQ(r["verdict"], "critical");
  EXPECT_EQ(r["exit_code"], kCritical);
}

TEST(TopoTest, TextShowsMatrixLegendMarksAndTheSameVerdict) {
  const std::string text = TopoText(TopoReport(Node(true), Findings()));
  EXPECT_NE(text.find("      NIC0  NIC1  NUMA Affinity\n"), std::string::npos) << text;
  EXPECT_NE(text.find("GPU0  SYS   PXB   3\n"), std::string::npos) << text;
  EXPECT_NE(text.find("GPU1  PXB   SYS   1\n"), std::string::npos) << text;
  EXPECT_NE(text.find("NIC0: mlx5_0 (ib0)"), std::string::npos);
  EXPECT_NE(text.find("PXB  = joined by several PCIe bridges"), std::string::npos);
  EXPECT_NE(text.find("0000:44:00.0  gpu   GPU1    16.0 / 16.0  x8 / x16   << DOWNTRAINED "
                      "(critical)"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("2.5 / 16.0"), std::string::npos);
  EXPECT_NE(text.find("1 of 4 links without data"), std::string::npos);
  EXPECT_NE(text.find("verdict: CRITICAL (exit 2)"), std::string::npos);
}

TEST(TopoTest, WithoutCheckReportFallsBackToBestNicAndSaysSo) {
  const json r = TopoReport(Node(false), json::array());
  EXPECT_TRUE(r["affinity"].is_null());
  EXPECT_TRUE(r["pcie"].is_null());
  EXPECT_EQ(r["gpus"][0]["best_nic"], "mlx5_1");
  EXPECT_EQ(r["exit_code"], kOk);
  const std::string text = TopoText(r);
  EXPECT_NE(text.find("no affinity matrix"), std::string::npos);
  EXPECT_NE(text.find("no PCIe data"), std::string::npos);
  EXPECT_NE(text.find("verdict: OK (exit 0)"), std::string::npos);
}

TEST(TopoTest, GpusWithoutFabricNicsAreStillListed) {
  // A DGX-2-like node: GPUs and NVSwitches but no NIC, so the check report's affinity is [].
  json n = Node(true);
  n["inventory"]["affinity"] = json::array();
  const json r = TopoReport(n, json::array());
  EXPECT_TRUE(r["affinity"]["rows"].empty());
  ASSERT_EQ(r["gpus"].size(), 2u);
  EXPECT_EQ(r["gpus"][1]["bdf"], "0000:44:00.0");
  const std::string text = TopoText(r);
  EXPECT_NE(text.find("2 GPUs"), std::string::npos) << text;
  EXPECT_NE(text.find("no GPU-NIC matrix"), std::string::npos) << text;
  EXPECT_NE(text.find("0000:44:00.0"), std::string::npos) << text;
}

TEST(TopoTest, DisconnectedNodeIsAWarningWithItsLastSeenTime) {
  json n = Node(true);
  n["connected"] = false;
  n["last_seen"] = "2026-12-03T12:00:00Z";
  const json r = TopoReport(n, json::array());
  EXPECT_EQ(r["exit_code"], kWarning);
  EXPECT_NE(TopoText(r).find("DISCONNECTED (last seen 2026-12-03T12:00:00Z)"), std::string::npos);
}

}  // namespace
}  // namespace fw::cli
