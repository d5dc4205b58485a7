// GPU×NIC and GPU×GPU classes on the real exports, asserted from reading the XML by hand.
#include "probes/topology/affinity.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>

#include "probes/topology/hwloc_discovery.h"

namespace fw::topology {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

NodeTopology Load(const std::string& file) {
  const char* dir = std::getenv("FW_TESTDATA");
  auto t = DiscoverFromXmlFile(std::string(dir ? dir : "tests/testdata") + "/hwloc/" + file);
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  return t.ok() ? *t : NodeTopology{};
}

constexpr PathClass PIX = PathClass::kPix, PXB = PathClass::kPxb, NODE = PathClass::kNode,
                    SYS = PathClass::kSys;

// Each A100 shares a Broadcom PCIe switch (1000:c010) with exactly one ConnectX-6: GPU 03↔mlx5_1
// (04), 44↔mlx5_0 (43), 84↔mlx5_3 (83), c4↔mlx5_2 (c3). Every GPU and NIC pair sits in its own
// NUMA node (NPS4), so everything else is SYS.
void ExpectA100PairsPxb(const Affinity& a) {
  ASSERT_THAT(a.gpus, ElementsAre("GPU0", "GPU1", "GPU2", "GPU3"));
  ASSERT_THAT(a.nics, ElementsAre("mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"));
  EXPECT_THAT(a.gpu_nic[0], ElementsAre(SYS, PXB, SYS, SYS));
  EXPECT_THAT(a.gpu_nic[1], ElementsAre(PXB, SYS, SYS, SYS));
  EXPECT_THAT(a.gpu_nic[2], ElementsAre(SYS, SYS, SYS, PXB));
  EXPECT_THAT(a.gpu_nic[3], ElementsAre(SYS, SYS, PXB, SYS));
  EXPECT_THAT(a.best_nics[0], ElementsAre("mlx5_1"));
  EXPECT_THAT(a.best_nics[1], ElementsAre("mlx5_0"));
  EXPECT_THAT(a.best_nics[2], ElementsAre("mlx5_3"));
  EXPECT_THAT(a.best_nics[3], ElementsAre("mlx5_2"));
  for (size_t g = 0; g < 4; ++g) {
    EXPECT_EQ(a.best_class[g], PXB);
    for (size_t h = 0; h < 4; ++h) {
      if (g != h) {
        EXPECT_EQ(a.gpu_gpu[g][h], SYS) << g << "," << h;
      }
    }
  }
}

TEST(Affinity, JurecaEachA100SharesASwitchWithOneConnectX6) {
  const NodeTopology t = Load("psmgmt-topo.jrc0386.xml");
  ExpectA100PairsPxb(ComputeAffinity(t));
}

TEST(Affinity, JuwelsBoosterSameWiring) {
  const NodeTopology t = Load("psmgmt-topo.jwb0001.xml");
  ExpectA100PairsPxb(ComputeAffinity(t));
}

TEST(Affinity, DeepEstGpuAndNicOnDifferentHostBridgesOfOneNuma) {
  // GPU 65:00.0 under host bridge [64-65], NIC b3:00.0 under host bridge [b2-b3], one NUMA node.
  const NodeTopology t = Load("psmgmt-topo.dp-esb01.xml");
  const Affinity a = ComputeAffinity(t);
  ASSERT_THAT(a.nics, ElementsAre("mlx5_0"));
  EXPECT_THAT(a.gpu_nic[0], ElementsAre(NODE));
  EXPECT_EQ(a.best_class[0], NODE);
}

TEST(Affinity, Dgx2GpuPairsByPlxSwitchHostBridgeAndSocket) {
  const NodeTopology t = Load("hwloc-nvidiaDGX2.v2.xml");
  const Affinity a = ComputeAffinity(t);
  EXPECT_TRUE(a.nics.empty());
  EXPECT_FALSE(a.best_class[0].has_value());
  // 34 and 36 share PLX port 32:00.0; 34 and 39 meet at 2c:00.0: both PXB.
  EXPECT_EQ(a.gpu_gpu[0][1], PXB);
  EXPECT_EQ(a.gpu_gpu[0][2], PXB);
  // 34 and 57 hang off different host bridges of package 0.
  EXPECT_EQ(a.gpu_gpu[0][4], NODE);
  // 34 and b7 are on different sockets.
  EXPECT_EQ(a.gpu_gpu[0][8], SYS);
  EXPECT_EQ(a.gpu_gpu[8][9], PXB);
  EXPECT_EQ(a.gpu_gpu[12][8], NODE);
  EXPECT_EQ(a.gpu_gpu[15][0], SYS);
}

// The whole 16×16 GPU matrix of the DGX-2 export, read off the XML: four blocks of four V100s,
// each block under its own host bridge; inside a block the GPUs meet at a PLX switch (PXB); blocks
// 34-3b and 57-5e hang off package 0 (NUMA 0), b7-be and e0-e7 off package 1 (NUMA 1), so two
// blocks of one package are NODE and blocks of different packages SYS.
TEST(Affinity, Dgx2FullGpuMatrix) {
  const NodeTopology t = Load("hwloc-nvidiaDGX2.v2.xml");
  const Affinity a = ComputeAffinity(t);
  const char* kExpected[16] = {
      "X   PXB PXB PXB NODE NODE NODE NODE SYS SYS SYS SYS SYS SYS SYS SYS",
      "PXB X   PXB PXB NODE NODE NODE NODE SYS SYS SYS SYS SYS SYS SYS SYS",
      "PXB PXB X   PXB NODE NODE NODE NODE SYS SYS SYS SYS SYS SYS SYS SYS",
      "PXB PXB PXB X   NODE NODE NODE NODE SYS SYS SYS SYS SYS SYS SYS SYS",
      "NODE NODE NODE NODE X   PXB PXB PXB SYS SYS SYS SYS SYS SYS SYS SYS",
      "NODE NODE NODE NODE PXB X   PXB PXB SYS SYS SYS SYS SYS SYS SYS SYS",
      "NODE NODE NODE NODE PXB PXB X   PXB SYS SYS SYS SYS SYS SYS SYS SYS",
      "NODE NODE NODE NODE PXB PXB PXB X   SYS SYS SYS SYS SYS SYS SYS SYS",
      "SYS SYS SYS SYS SYS SYS SYS SYS X   PXB PXB PXB NODE NODE NODE NODE",
      "SYS SYS SYS SYS SYS SYS SYS SYS PXB X   PXB PXB NODE NODE NODE NODE",
      "SYS SYS SYS SYS SYS SYS SYS SYS PXB PXB X   PXB NODE NODE NODE NODE",
      "SYS SYS SYS SYS SYS SYS SYS SYS PXB PXB PXB X   NODE NODE NODE NODE",
      "SYS SYS SYS SYS SYS SYS SYS SYS NODE NODE NODE NODE X   PXB PXB PXB",
      "SYS SYS SYS SYS SYS SYS SYS SYS NODE NODE NODE NODE PXB X   PXB PXB",
      "SYS SYS SYS SYS SYS SYS SYS SYS NODE NODE NODE NODE PXB PXB X   PXB",
      "SYS SYS SYS SYS SYS SYS SYS SYS NODE NODE NODE NODE PXB PXB PXB X  ",
  };
  ASSERT_EQ(a.gpus.size(), 16u);
  for (size_t g = 0; g < 16; ++g) {
    std::string row;
    for (size_t h = 0; h < 16; ++h) {
      row += std::string(h ? " " : "") + (g == h ? "X" : PathClassName(a.gpu_gpu[g][h]));
    }
    std::string want = kExpected[g];
    std::string squeezed;  // the table above is padded for reading; compare single-spaced
    for (char ch : want) {
      if (ch != ' ' || (!squeezed.empty() && squeezed.back() != ' ')) squeezed += ch;
    }
    while (!squeezed.empty() && squeezed.back() == ' ') squeezed.pop_back();
    EXPECT_EQ(row, squeezed) << "GPU" << g << " (" << t.gpus[g].bdf << ")";
  }
}

TEST(Affinity, SameBridgeIsPix) {
  // A hand-built tree: host bridge → root port → {GPU, NIC}.
  NodeTopology t;
  t.nodes.push_back({NodeKind::kMachine, -1, "", 0, 0, 0, 0, {0}});
  t.nodes.push_back({NodeKind::kHostBridge, 0, "", 0, 0, 0, 0, {}});
  t.nodes.push_back({NodeKind::kPciBridge, 1, "0000:00:01.0", 0x0604, 0, 0, 0, {}});
  t.nodes.push_back({NodeKind::kPciDevice, 2, "0000:01:00.0", 0x0302, 0x10de, 1, 0, {}});
  t.nodes.push_back({NodeKind::kPciDevice, 2, "0000:01:00.1", 0x0207, 0x15b3, 2, 0, {}});
  t.gpus.push_back({"GPU0", "0000:01:00.0", "", "", 0x10de, 1, 3});
  Nic nic;
  nic.name = "mlx5_0";
  nic.node_index = 4;
  t.nics.push_back(nic);
  const Affinity a = ComputeAffinity(t);
  EXPECT_THAT(a.gpu_nic[0], ElementsAre(PIX));
  EXPECT_EQ(ClassifyPath(t, 3, 99), SYS);  // out of range is unknown locality
}

TEST(Affinity, FabricFilterKeepsOnlyNamedNics) {
  const NodeTopology t = Load("psmgmt-topo.jrc0386.xml");
  const Affinity a = ComputeAffinity(t, {"mlx5_0", "mlx5_3"});
  EXPECT_THAT(a.nics, ElementsAre("mlx5_0", "mlx5_3"));
  EXPECT_EQ(a.best_class[0], SYS);  // GPU0's own NIC (mlx5_1) is not in the fabric set
  EXPECT_THAT(a.best_nics[0], ElementsAre("mlx5_0", "mlx5_3"));
  EXPECT_EQ(a.GpuNicEntries().size(), 8u);
}

TEST(Affinity, TextMatrixLooksLikeNvidiaSmiTopo) {
  const NodeTopology t = Load("psmgmt-topo.jrc0386.xml");
  const std::string text = FormatTopoMatrix(t, ComputeAffinity(t));
  EXPECT_THAT(text,
              HasSubstr("GPU0   GPU1   GPU2   GPU3   NIC0   NIC1   NIC2   NIC3   NUMA Affinity"));
  EXPECT_THAT(text,
              HasSubstr("GPU1   SYS    X      SYS    SYS    PXB    SYS    SYS    SYS    1\n"));
  EXPECT_THAT(text,
              HasSubstr("NIC1   PXB    SYS    SYS    SYS    SYS    X      SYS    SYS    3\n"));
  EXPECT_THAT(text, HasSubstr("  NIC0: mlx5_0\n"));
  EXPECT_THAT(text, HasSubstr("PXB  = joined by several PCIe bridges"));
}

TEST(Affinity, ParsePathClassNames) {
  EXPECT_EQ(ParsePathClass("pxb"), PXB);
  EXPECT_EQ(ParsePathClass("SYS"), SYS);
  EXPECT_FALSE(ParsePathClass("NV4").has_value());
}

}  // namespace
}  // namespace fw::topology
