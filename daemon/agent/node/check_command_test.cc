// `check` end to end on the real H100 sysfs tree and real hwloc exports.
#include "daemon/agent/node/check_command.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <sstream>

#include "probes/counters/fake_sysfs.h"

namespace fw::agent {
namespace {

using ::testing::Contains;
using ::testing::HasSubstr;
using ::testing::Not;

std::string Testdata(const std::string& rel) {
  const char* dir = std::getenv("FW_TESTDATA");
  return std::string(dir ? dir : "tests/testdata") + "/" + rel;
}

CheckOptions H100(const std::string& profile, const std::string& format = "json") {
  CheckOptions o;
  o.sysfs_root = Testdata("sysfs/gpud-h100");
  o.hwloc_xml = Testdata("hwloc/psmgmt-topo.jrc0386.xml");
  o.profile = profile;
  o.format = format;
  o.node_name = "gpu-node-7";
  o.counter_interval = std::chrono::milliseconds(0);
  return o;
}

nlohmann::json RunJson(const CheckOptions& o, int& code) {
  std::ostringstream out;
  code = RunCheck(o, out);
  return nlohmann::json::parse(out.str());
}

TEST(CheckCommand, GenericProfileOnH100Tree) {
  int code = -1;
  const auto j = RunJson(H100("generic"), code);
  EXPECT_EQ(code, 1);  // saturated counters are warnings
  EXPECT_EQ(j["node"], "gpu-node-7");
  EXPECT_EQ(j["profile"], "generic");
  EXPECT_EQ(j["gpus"].size(), 4u);
  EXPECT_EQ(j["gpus"][1]["bdf"], "0000:44:00.0");
  EXPECT_EQ(j["gpus"][1]["pci_id"], "10de:20b0");
  EXPECT_EQ(j["gpus"][1]["best_nics"][0], "mlx5_0");
  EXPECT_EQ(j["gpus"][1]["best_class"], "PXB");
  EXPECT_EQ(j["ports"].size(), 9u);
  EXPECT_EQ(j["affinity"].size(), 16u);
  // hwloc's 4 RDMA NICs + 2 management Ethernet + 7 RDMA devices only in sysfs (mlx5_4..9 and
  // the bond).
  EXPECT_EQ(j["nics"].size(), 13u);
  for (const auto& n : j["nics"]) {
    if (n["name"] == "mlx5_bond_0") {
      EXPECT_FALSE(n["fabric"].get<bool>());
    }
    if (n["name"] == "enp225s0f0") {
      EXPECT_EQ(n["kind"], "ethernet");
    }
  }
  const auto& p1 = j["ports"][1];
  EXPECT_EQ(p1["device"], "mlx5_1");
  EXPECT_EQ(p1["state"], "ACTIVE");
  EXPECT_EQ(p1["rate_gbps"], 400.0);
  EXPECT_EQ(p1["counters"]["port_xmit_wait"], 2489603687u);
  EXPECT_THAT(p1["saturated"].get<std::vector<std::string>>(), Contains("link_downed"));
  EXPECT_EQ(j["findings"].size(), 10u);
  EXPECT_EQ(j["verdict"], "WARNING");
}

TEST(CheckCommand, DgxH100ProfileDoesNotCountTheBond) {
  int code = -1;
  const auto j = RunJson(H100("dgx-h100"), code);
  EXPECT_EQ(code, 2);  // this hwloc export has 4 GPUs, not 8
  int gpu_count = 0, nic_count = 0, locality = 0;
  for (const auto& f : j["findings"]) {
    const std::string summary = f["summary"];
    if (f["kind"] == "topology_mismatch" && summary.find("GPUs") != std::string::npos) ++gpu_count;
    if (f["kind"] == "topology_mismatch" && summary.find("fabric NICs") != std::string::npos) {
      ++nic_count;
    }
    if (f["kind"] == "gpu_nic_locality") ++locality;
    // The bond's own saturated counter is a real port finding; it is just never a fabric NIC.
    if (f["kind"] != "port_errors") {
      EXPECT_THAT(summary, Not(HasSubstr("bond"))) << summary;
    }
  }
  EXPECT_EQ(gpu_count, 1);
  EXPECT_EQ(nic_count, 0);  // eight 400G IB ports: exactly what the profile wants
  // Fabric NICs hwloc can place: mlx5_0 and mlx5_1, next to GPU1 and GPU0; GPU2/GPU3 are SYS.
  EXPECT_EQ(locality, 2);
}

TEST(CheckCommand, TextShowsMatrixPortsAndVerdict) {
  std::ostringstream out;
  const int code = RunCheck(H100("dgx-h100", "text"), out);
  EXPECT_EQ(code, 2);
  const std::string text = out.str();
  EXPECT_THAT(text, HasSubstr("node gpu-node-7 · profile dgx-h100"));
  EXPECT_THAT(text, HasSubstr("8 fabric NICs (mlx5_0 mlx5_1 mlx5_4"));
  EXPECT_THAT(text, HasSubstr("GPU0   X      SYS    SYS    SYS    SYS    PXB"));
  EXPECT_THAT(text, HasSubstr("mlx5_bond_0/1 ACTIVE  LinkUp  200G      Ethernet"));
  EXPECT_THAT(text, HasSubstr("link_downed saturated at 255"));
  EXPECT_THAT(text, HasSubstr("verdict: CRITICAL (exit 2)"));
}

TEST(CheckCommand, ErrorsAreUnknown) {
  int code = -1;
  auto o = H100("no-such-profile");
  auto j = RunJson(o, code);
  EXPECT_EQ(code, 3);
  EXPECT_THAT(j["error"].get<std::string>(), HasSubstr("neither a built-in profile"));
  o = H100("generic");
  o.hwloc_xml = Testdata("hwloc/missing.xml");
  j = RunJson(o, code);
  EXPECT_EQ(code, 3);
  EXPECT_EQ(j["verdict"], "UNKNOWN");
  o.format = "yaml";
  std::ostringstream out;
  EXPECT_EQ(RunCheck(o, out), 3);
}

TEST(CheckCommand, JsonHasTheDocumentedShape) {
  int code = -1;
  const auto j = RunJson(H100("generic"), code);
  ASSERT_TRUE(j.is_object());
  EXPECT_TRUE(j["node"].is_string());
  for (const char* key : {"gpus", "nics", "affinity", "pcie", "ports", "findings"}) {
    ASSERT_TRUE(j.contains(key)) << key;
    EXPECT_TRUE(j[key].is_array()) << key;
  }
  const auto& a = j["affinity"][0];
  EXPECT_TRUE(a["gpu"].is_string() && a["nic"].is_string() && a["class"].is_string());
  const auto& f = j["findings"][0];
  for (const char* key : {"kind", "severity", "location", "summary", "evidence"}) {
    EXPECT_TRUE(f.contains(key)) << key;
  }
}

TEST(CheckCommand, HealthyNodeExitsZero) {
  counters::testing::FakeSysfs fs;
  fs.AddPort("mlx5_0", 1, "100 Gb/sec (4X EDR)");
  fs.Counter("mlx5_0", 1, "symbol_error", "0");
  fs.Counter("mlx5_0", 1, "link_downed", "0");
  fs.Counter("mlx5_0", 1, "port_xmit_data", "123456");
  CheckOptions o = H100("generic");
  o.sysfs_root = fs.root();
  o.hwloc_xml = Testdata("hwloc/psmgmt-topo.dp-esb01.xml");
  o.counter_interval = std::chrono::milliseconds(10);
  int code = -1;
  const auto j = RunJson(o, code);
  EXPECT_EQ(code, 0);
  EXPECT_TRUE(j["findings"].empty()) << j["findings"].dump();
  EXPECT_EQ(j["verdict"], "OK");
  EXPECT_EQ(j["gpus"][0]["best_class"], "NODE");
  o.format = "text";
  std::ostringstream out;
  EXPECT_EQ(RunCheck(o, out), 0);
  EXPECT_THAT(out.str(), HasSubstr("verdict: OK (exit 0)"));
}

// Regression: a node with GPUs and no RDMA NIC in the tree (the DGX-2 export) aborted the JSON
// output, because the missing best class reached nlohmann::json as a null char pointer.
TEST(CheckCommand, GpusWithoutAnyNicDoNotCrashTheJson) {
  counters::testing::FakeSysfs empty;
  CheckOptions o = H100("generic");
  o.sysfs_root = empty.root();
  o.hwloc_xml = Testdata("hwloc/hwloc-nvidiaDGX2.v2.xml");
  int code = -1;
  const auto j = RunJson(o, code);
  EXPECT_EQ(code, 0);
  ASSERT_EQ(j["gpus"].size(), 16u);
  for (const auto& g : j["gpus"]) {
    EXPECT_TRUE(g["best_class"].is_null());
    EXPECT_TRUE(g["best_nics"].empty());
  }
  EXPECT_EQ(j["nvswitches"].size(), 12u);
  EXPECT_TRUE(j["affinity"].empty());
  o.sysfs_root = Testdata("sysfs/gpud-h100");  // the command from the benchmark that aborted
  RunJson(o, code);
  EXPECT_EQ(code, 1);
}

TEST(CheckCommand, DowntrainedPcieAndTwoPassRates) {
  counters::testing::FakeSysfs fs;
  fs.AddPort("mlx5_0", 1);
  fs.Counter("mlx5_0", 1, "port_xmit_data", "100");
  auto link = [&](const std::string& bdf, const std::string& cur, const std::string& width) {
    fs.Write("bus/pci/devices/" + bdf + "/current_link_speed", cur + "\n");
    fs.Write("bus/pci/devices/" + bdf + "/max_link_speed", "16.0 GT/s PCIe\n");
    fs.Write("bus/pci/devices/" + bdf + "/current_link_width", width + "\n");
    fs.Write("bus/pci/devices/" + bdf + "/max_link_width", "16\n");
  };
  link("0000:44:00.0", "16.0 GT/s PCIe", "8");
  link("0000:43:00.0", "16.0 GT/s PCIe", "16");
  CheckOptions o = H100("generic");
  o.sysfs_root = fs.root();
  o.counter_interval = std::chrono::milliseconds(20);
  int code = -1;
  const auto j = RunJson(o, code);
  EXPECT_EQ(code, 2);
  ASSERT_EQ(j["findings"].size(), 1u);
  EXPECT_EQ(j["findings"][0]["kind"], "pcie_downtrained");
  EXPECT_EQ(j["findings"][0]["location"]["device"], "0000:44:00.0");
  bool saw = false;
  for (const auto& l : j["pcie"]) {
    if (l["bdf"] == "0000:43:00.0") {
      saw = true;
      EXPECT_EQ(l["current_width"], 16);
      EXPECT_EQ(l["for"], "mlx5_0");
    }
  }
  EXPECT_TRUE(saw);
  EXPECT_EQ(j["ports"][0]["xmit_bytes_per_s"], 0.0);  // two passes, nothing moved
  EXPECT_GT(j["ports"][0]["interval_s"].get<double>(), 0.015);
}

}  // namespace
}  // namespace fw::agent
