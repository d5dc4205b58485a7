// PCIe link parsing and downtraining checks on synthetic sysfs trees built in temporary dirs.
#include "probes/topology/pcie_link.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "common/testing/temp_dir.h"
#include "probes/topology/hwloc_discovery.h"

namespace fw::topology {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

using TempDir = ::fw::testing::TempDir;

void Write(const fs::path& p, const std::string& text) {
  fs::create_directories(p.parent_path());
  std::ofstream(p) << text;
}

void Link(const fs::path& root, const std::string& bdf, const std::string& cur_speed,
          const std::string& max_speed, const std::string& cur_width,
          const std::string& max_width) {
  const fs::path d = root / "bus/pci/devices" / bdf;
  Write(d / "current_link_speed", cur_speed);
  Write(d / "max_link_speed", max_speed);
  Write(d / "current_link_width", cur_width);
  Write(d / "max_link_width", max_width);
}

TEST(PcieParse, RealFormats) {
  EXPECT_DOUBLE_EQ(*ParsePcieSpeed("16.0 GT/s PCIe\n"), 16.0);
  EXPECT_DOUBLE_EQ(*ParsePcieSpeed("8.0 GT/s PCIe"), 8.0);
  EXPECT_DOUBLE_EQ(*ParsePcieSpeed("2.5 GT/s"), 2.5);
  EXPECT_DOUBLE_EQ(*ParsePcieSpeed("32.0 GT/s PCIe\n"), 32.0);
  EXPECT_EQ(ParsePcieSpeed("Unknown\n").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(ParsePcieSpeed("Unknown speed").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(ParsePcieSpeed("0").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(ParsePcieSpeed("").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(ParsePcieSpeed("fast").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ParsePcieSpeed("16.0 MB/s").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(*ParsePcieWidth("16\n"), 16);
  EXPECT_EQ(ParsePcieWidth("0\n").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(ParsePcieWidth("x16").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ParsePcieWidth("16 lanes").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(PcieGeneration(16.0), 4);
  EXPECT_EQ(PcieGeneration(32.0), 5);
  EXPECT_EQ(PcieGeneration(2.5), 1);
  EXPECT_EQ(PcieGeneration(3.0), 0);
}

class PcieTree : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* dir = std::getenv("FW_TESTDATA");
    auto t = DiscoverFromXmlFile(std::string(dir ? dir : "tests/testdata") +
                                 "/hwloc/psmgmt-topo.jrc0386.xml");
    ASSERT_TRUE(t.ok());
    topo_ = *t;
  }
  TempDir tmp_;
  NodeTopology topo_;
};

TEST_F(PcieTree, TargetsCoverGpusNicsAndBridgesAbove) {
  const auto targets = PcieTargets(topo_, tmp_.path());
  auto find = [&](const std::string& bdf) -> const PcieTarget* {
    for (const auto& t : targets) {
      if (t.bdf == bdf) return &t;
    }
    return nullptr;
  };
  ASSERT_NE(find("0000:44:00.0"), nullptr);
  EXPECT_EQ(find("0000:44:00.0")->role, "gpu");
  EXPECT_TRUE(find("0000:44:00.0")->speed_may_idle);
  ASSERT_NE(find("0000:42:01.0"), nullptr);  // the switch port right above GPU1
  EXPECT_TRUE(find("0000:42:01.0")->speed_may_idle);
  ASSERT_NE(find("0000:41:00.0"), nullptr);  // switch upstream port, shared with mlx5_0
  EXPECT_FALSE(find("0000:41:00.0")->speed_may_idle);
  ASSERT_NE(find("0000:43:00.0"), nullptr);
  EXPECT_EQ(find("0000:43:00.0")->owner, "mlx5_0");
  EXPECT_EQ(find("0000:e1:00.0"), nullptr);  // management Ethernet is not checked
  // 4 GPUs + 4 NICs + per pair: 2 downstream ports, 1 upstream port, 1 root port.
  EXPECT_EQ(targets.size(), 8u + 4u * 4u);
}

TEST_F(PcieTree, DowntrainedGpuWidthIsCriticalNicSpeedIsWarningIdleGpuSpeedIsFine) {
  const fs::path root = tmp_.path();
  Link(root, "0000:44:00.0", "16.0 GT/s PCIe\n", "16.0 GT/s PCIe\n", "8\n", "16\n");
  Link(root, "0000:43:00.0", "8.0 GT/s PCIe\n", "16.0 GT/s PCIe\n", "16\n", "16\n");
  Link(root, "0000:03:00.0", "2.5 GT/s PCIe\n", "16.0 GT/s PCIe\n", "16\n", "16\n");  // idle GPU
  Link(root, "0000:42:00.0", "Unknown\n", "16.0 GT/s PCIe\n", "0\n", "16\n");         // no link
  Link(root, "0000:41:00.0", "fast\n", "16.0 GT/s PCIe\n", "16\n", "16\n");           // garbage
  fs::create_directories(root / "bus/pci/devices/0000:02:01.0");  // files missing
  const auto links = ReadPcieLinks(root.string(), PcieTargets(topo_, root.string()));
  const auto findings = CheckPcieLinks(links, "n1");
  ASSERT_EQ(findings.size(), 2u);
  const Finding& gpu = findings[0].location.device == "0000:44:00.0" ? findings[0] : findings[1];
  const Finding& nic = findings[0].location.device == "0000:43:00.0" ? findings[0] : findings[1];
  EXPECT_EQ(gpu.kind, "pcie_downtrained");
  EXPECT_EQ(gpu.severity, Severity::kCritical);
  EXPECT_EQ(gpu.location.type, "gpu");
  EXPECT_THAT(gpu.summary, HasSubstr("GPU1 (0000:44:00.0) PCIe link trained at x8 of x16"));
  EXPECT_EQ(gpu.evidence.at("current_width"), 8);
  EXPECT_EQ(nic.severity, Severity::kWarning);
  EXPECT_THAT(nic.summary,
              HasSubstr("mlx5_0 (0000:43:00.0) PCIe link trained at 8.0 of 16.0 GT/s"));
  for (const PcieLink& l : links) {
    if (l.target.bdf == "0000:42:00.0") {
      EXPECT_TRUE(l.present);
      EXPECT_FALSE(l.current_speed_gts.has_value());
      EXPECT_FALSE(l.current_width.has_value());
      EXPECT_TRUE(l.problems.empty());  // "Unknown" and "0" are states, not errors
    }
    if (l.target.bdf == "0000:41:00.0") {
      ASSERT_EQ(l.problems.size(), 1u);
      EXPECT_THAT(l.problems[0], HasSubstr("current_link_speed: unparsable"));
    }
    if (l.target.bdf == "0000:02:01.0") {
      EXPECT_EQ(l.problems.size(), 4u);
    }
    if (l.target.bdf == "0000:84:00.0") {
      EXPECT_FALSE(l.present);
    }
  }
}

TEST(PcieSysfsOnly, NicResolvedThroughDeviceLink) {
  TempDir tmp;
  const fs::path root = tmp.path();
  const fs::path dev = root / "devices/pci0000:00/0000:00:01.0/0000:01:00.0";
  fs::create_directories(dev);
  fs::create_directories(root / "class/infiniband/mlx5_7");
  fs::create_symlink(dev, root / "class/infiniband/mlx5_7/device");
  const auto targets = PcieTargets(NodeTopology{}, root.string());
  ASSERT_EQ(targets.size(), 2u);
  EXPECT_EQ(targets[0].bdf, "0000:01:00.0");
  EXPECT_EQ(targets[0].role, "nic");
  EXPECT_EQ(targets[0].owner, "mlx5_7");
  EXPECT_EQ(targets[1].bdf, "0000:00:01.0");
  EXPECT_EQ(targets[1].role, "bridge");
}

}  // namespace
}  // namespace fw::topology
