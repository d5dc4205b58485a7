// Discovery on the real hwloc exports in tests/testdata/hwloc, checked against what the XML says.
#include "probes/topology/hwloc_discovery.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>

namespace fw::topology {
namespace {

using ::testing::ElementsAre;

std::string Testdata(const std::string& rel) {
  const char* dir = std::getenv("FW_TESTDATA");
  return std::string(dir ? dir : "tests/testdata") + "/" + rel;
}

NodeTopology Load(const std::string& file) {
  auto t = DiscoverFromXmlFile(Testdata("hwloc/" + file));
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  return t.ok() ? *t : NodeTopology{};
}

std::vector<std::string> Names(const std::vector<Nic>& nics, NicKind kind) {
  std::vector<std::string> out;
  for (const Nic& n : nics) {
    if (n.kind == kind) out.push_back(n.name);
  }
  return out;
}

TEST(HwlocDiscovery, Jureca4A100With4ConnectX6AndNoBmcGpu) {
  const NodeTopology t = Load("psmgmt-topo.jrc0386.xml");
  ASSERT_EQ(t.gpus.size(), 4u);  // the ASPEED VGA at 62:00.0 is not a GPU
  EXPECT_EQ(t.gpus[0].bdf, "0000:03:00.0");
  EXPECT_EQ(t.gpus[1].bdf, "0000:44:00.0");
  EXPECT_EQ(t.gpus[2].bdf, "0000:84:00.0");
  EXPECT_EQ(t.gpus[3].bdf, "0000:c4:00.0");
  EXPECT_EQ(t.gpus[1].name, "GPU1");
  EXPECT_EQ(t.gpus[1].vendor_id, 0x10de);
  EXPECT_EQ(t.gpus[1].device_id, 0x20b0);
  EXPECT_THAT(Names(t.nics, NicKind::kRdma), ElementsAre("mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"));
  EXPECT_THAT(Names(t.nics, NicKind::kEthernet), ElementsAre("enp225s0f0", "enp225s0f1"));
  EXPECT_EQ(t.nics[0].bdf, "0000:43:00.0");
  EXPECT_THAT(t.nics[0].netdevs, ElementsAre("ib0"));
  EXPECT_EQ(t.nics[0].class_id, 0x0207);
  EXPECT_EQ(t.packages, 2);
  EXPECT_THAT(t.numa_nodes, ElementsAre(0, 1, 2, 3, 4, 5, 6, 7));
  EXPECT_TRUE(t.nvswitches.empty());
  // GPU 44:00.0 sits below switch downstream port 42:01.0, switch upstream port 41:00.0 and root
  // port 40:01.1.
  EXPECT_THAT(t.BridgesAbove(t.gpus[1].node_index),
              ElementsAre("0000:42:01.0", "0000:41:00.0", "0000:40:01.1"));
  // hwloc reports the Gen4 x16 link as 31.5 GB/s.
  EXPECT_NEAR(t.nodes[t.gpus[1].node_index].link_gbytes, 31.5, 0.01);
}

TEST(HwlocDiscovery, JuwelsBoosterSameShape) {
  const NodeTopology t = Load("psmgmt-topo.jwb0001.xml");
  ASSERT_EQ(t.gpus.size(), 4u);
  EXPECT_THAT(Names(t.nics, NicKind::kRdma), ElementsAre("mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"));
  EXPECT_EQ(t.packages, 2);
}

TEST(HwlocDiscovery, DeepEstOneGpuOneConnectX5) {
  const NodeTopology t = Load("psmgmt-topo.dp-esb01.xml");
  ASSERT_EQ(t.gpus.size(), 1u);
  EXPECT_EQ(t.gpus[0].bdf, "0000:65:00.0");
  EXPECT_EQ(t.gpus[0].device_id, 0x1db6);
  EXPECT_THAT(Names(t.nics, NicKind::kRdma), ElementsAre("mlx5_0"));
  EXPECT_EQ(t.nics[0].bdf, "0000:b3:00.0");
  EXPECT_EQ(t.nics[0].device_id, 0x1017);
  EXPECT_THAT(Names(t.nics, NicKind::kEthernet), ElementsAre("eno1", "eno2"));
  EXPECT_THAT(t.numa_nodes, ElementsAre(0));
}

TEST(HwlocDiscovery, Dgx2SixteenV100TwelveNvSwitchesNoNic) {
  const NodeTopology t = Load("hwloc-nvidiaDGX2.v2.xml");
  ASSERT_EQ(t.gpus.size(), 16u);
  EXPECT_TRUE(t.nics.empty());
  EXPECT_EQ(t.nvswitches.size(), 12u);  // 0000:66:00.0 has class 0000 but subtype NVSwitch
  EXPECT_EQ(t.gpus[0].bdf, "0000:34:00.0");
  EXPECT_EQ(t.gpus[0].os_device, "nvml0");
  EXPECT_EQ(t.gpus[0].model, "Tesla V100-SXM3-32GB-H");
  EXPECT_EQ(t.gpus[15].bdf, "0000:e7:00.0");
  EXPECT_EQ(t.gpus[15].os_device, "nvml15");
  EXPECT_EQ(t.packages, 2);
  EXPECT_THAT(t.numa_nodes, ElementsAre(0, 1));
}

TEST(HwlocDiscovery, MissingFileIsNotFound) {
  auto t = DiscoverFromXmlFile(Testdata("hwloc/no-such-file.xml"));
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), StatusCode::kNotFound);
}

TEST(HwlocDiscovery, GarbageXmlIsInvalidArgument) {
  auto t = DiscoverFromXmlBuffer("<topology><object type=");
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument);
}

TEST(HwlocDiscovery, LiveDiscoveryWorksOnThisMachine) {
  auto t = DiscoverLive();
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->source, "live");
  EXPECT_GE(t->packages, 1);
  for (const Gpu& g : t->gpus) EXPECT_FALSE(g.bdf.empty());
}

}  // namespace
}  // namespace fw::topology
