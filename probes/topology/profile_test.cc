// Profile parsing, fabric NIC selection, and the comparison of a node with its profile.
#include "probes/topology/profile.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>

#include "probes/topology/hwloc_discovery.h"

namespace fw::topology {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::UnorderedElementsAre;

TEST(Profile, BuiltinsParseAndMatchTheShippedFiles) {
  EXPECT_THAT(BuiltinProfileNames(), UnorderedElementsAre("dgx-a100", "dgx-h100", "generic"));
  const char* env = std::getenv("FW_SOURCE_DIR");
  const std::string src = env ? env : FW_TEST_SOURCE_DIR;
  for (const std::string& name : BuiltinProfileNames()) {
    std::ifstream in(std::string(src) + "/probes/topology/profiles/" + name + ".yaml");
    const std::string file((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_EQ(*BuiltinProfileYaml(name), file) << name;
    auto p = LoadProfile(name);
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    EXPECT_EQ(p->name, name);
  }
  auto h100 = LoadProfile("dgx-h100");
  EXPECT_EQ(h100->gpu_count, 8);
  EXPECT_EQ(h100->fabric_nic_count, 8);
  EXPECT_EQ(h100->rate_gbps, 400.0);
  EXPECT_EQ(h100->link_layer, "InfiniBand");
  EXPECT_EQ(h100->max_gpu_nic_class, PathClass::kPxb);
  EXPECT_EQ(h100->gpu_pcie.gen, 5);
  EXPECT_EQ(h100->nic_pcie.width, 16);
  EXPECT_THAT(h100->fabric.exclude, ElementsAre("*bond*"));
  EXPECT_EQ(LoadProfile("")->name, "generic");
}

TEST(Profile, ErrorsNameTheProblem) {
  auto bad = [](const std::string& yaml) {
    auto p = ParseProfile(yaml, "test.yaml");
    EXPECT_FALSE(p.ok()) << yaml;
    return p.ok() ? std::string() : p.status().message();
  };
  EXPECT_THAT(bad("name: x\ngpu: {count: 8}\n"), HasSubstr("unknown key 'gpu' in profile"));
  EXPECT_THAT(bad("name: x\ngpus: {count: eight}\n"), HasSubstr("gpus.count: bad value 'eight'"));
  EXPECT_THAT(bad("name: x\ngpus: {count: -1}\n"), HasSubstr("gpus.count must be between"));
  EXPECT_THAT(bad("name: x\ngpus: {max_nic_class: NV12}\n"), HasSubstr("max_nic_class"));
  EXPECT_THAT(bad("name: x\nfabric_nics: {link_layer: Ether}\n"),
              HasSubstr("InfiniBand or Ethernet"));
  EXPECT_THAT(bad("name: x\nfabric_nics: {select: {devices: mlx5_0}}\n"),
              HasSubstr("must be a list"));
  EXPECT_THAT(bad("description: no name\n"), HasSubstr("profile.name is required"));
  EXPECT_THAT(bad("[1, 2]"), HasSubstr("must be a YAML mapping"));
  EXPECT_THAT(bad("name: [unclosed"), HasSubstr("not valid YAML"));
  EXPECT_THAT(bad(std::string(70000, '#')), HasSubstr("larger than 64 KiB"));
  EXPECT_EQ(LoadProfile("/no/such/profile.yaml").status().code(), StatusCode::kNotFound);
}

TEST(Profile, GlobAndFabricSelection) {
  EXPECT_TRUE(GlobMatch("mlx5_*", "mlx5_10"));
  EXPECT_TRUE(GlobMatch("*bond*", "mlx5_bond_0"));
  EXPECT_TRUE(GlobMatch("mlx5_?", "mlx5_4"));
  EXPECT_FALSE(GlobMatch("mlx5_?", "mlx5_10"));
  EXPECT_FALSE(GlobMatch("mlx4_*", "mlx5_0"));
  NicSelector s;
  s.link_layer = "InfiniBand";
  s.exclude = {"*bond*"};
  EXPECT_TRUE(IsFabricPort(s, {"mlx5_0", 1, "InfiniBand", 400.0, 4, "ACTIVE", {}, ""}));
  EXPECT_FALSE(IsFabricPort(s, {"mlx5_bond_0", 1, "Ethernet", 200.0, 4, "ACTIVE", {}, ""}));
  EXPECT_FALSE(IsFabricPort(s, {"mlx5_2", 1, "Ethernet", 100.0, 4, "ACTIVE", {}, ""}));
  s.link_layer.reset();
  s.min_rate_gbps = 400;
  EXPECT_FALSE(IsFabricPort(s, {"mlx5_2", 1, "Ethernet", 100.0, 4, "ACTIVE", {}, ""}));
  EXPECT_FALSE(IsFabricPort(s, {"mlx5_3", 0, "", std::nullopt, -1, "", {}, ""}));
  s.devices = {"mlx5_2"};
  EXPECT_TRUE(IsFabricPort(s, {"mlx5_2", 1, "Ethernet", 100.0, 4, "ACTIVE", {}, ""}));
}

std::vector<PortFacts> H100Ports() {
  std::vector<PortFacts> out;
  for (const char* d :
       {"mlx5_0", "mlx5_1", "mlx5_4", "mlx5_5", "mlx5_6", "mlx5_7", "mlx5_8", "mlx5_9"}) {
    out.push_back({d, 1, "InfiniBand", 400.0, 4, "ACTIVE", {}, ""});
  }
  out.push_back({"mlx5_bond_0", 1, "Ethernet", 200.0, 4, "ACTIVE", {}, ""});
  return out;
}

TEST(ProfileCheck, H100PortsWithBondMatchDgxH100Fabric) {
  auto p = LoadProfile("dgx-h100");
  ProfileInputs in;
  in.node = "h100";
  in.ports = H100Ports();
  // No topology: only the NIC checks run.
  EXPECT_TRUE(CheckProfile(*p, in).empty());
}

TEST(ProfileCheck, MissingDegradedDownAndWrongLayerPorts) {
  auto p = LoadProfile("dgx-h100");
  ProfileInputs in;
  in.node = "h100";
  in.ports = H100Ports();
  in.ports.erase(in.ports.begin() + 7);  // mlx5_9 gone
  in.ports[2].rate_gbps = 200.0;         // mlx5_4 trained at half rate
  in.ports[3].state_id = 1;              // mlx5_5 DOWN
  in.ports[3].state = "DOWN";
  in.ports[4].link_layer = "Ethernet";  // mlx5_6 flipped to Ethernet: no longer fabric
  auto f = CheckProfile(*p, in);
  SortFindings(f);
  ASSERT_EQ(f.size(), 3u);
  EXPECT_EQ(f[0].kind, "nic_down");
  EXPECT_EQ(f[0].severity, Severity::kCritical);
  EXPECT_EQ(f[0].location.device, "mlx5_5");
  EXPECT_THAT(f[0].summary, HasSubstr("mlx5_5 port 1 is DOWN"));
  EXPECT_EQ(f[1].kind, "topology_mismatch");
  EXPECT_EQ(f[1].severity, Severity::kCritical);
  EXPECT_THAT(f[1].summary, HasSubstr("has 6 fabric NICs"));
  EXPECT_THAT(f[1].summary, HasSubstr("not counted as fabric: mlx5_6, mlx5_bond_0"));
  EXPECT_EQ(f[1].evidence.at("expected_fabric_nics"), 8);
  EXPECT_EQ(f[2].severity, Severity::kWarning);
  EXPECT_THAT(f[2].summary, HasSubstr("mlx5_4 port 1 runs at 200 Gb/s"));
}

NodeTopology Jureca() {
  const char* dir = std::getenv("FW_TESTDATA");
  return *DiscoverFromXmlFile(std::string(dir ? dir : "tests/testdata") +
                              "/hwloc/psmgmt-topo.jrc0386.xml");
}

TEST(ProfileCheck, GpuCountAndLocality) {
  const NodeTopology t = Jureca();
  auto p = ParseProfile("name: strict\ngpus: {count: 8, max_nic_class: PIX}\n", "strict");
  ASSERT_TRUE(p.ok());
  const Affinity a = ComputeAffinity(t);
  ProfileInputs in{"jrc0386", &t, &a, nullptr, {}};
  auto f = CheckProfile(*p, in);
  SortFindings(f);
  ASSERT_EQ(f.size(), 5u);
  EXPECT_EQ(f[0].kind, "topology_mismatch");
  EXPECT_THAT(f[0].summary, HasSubstr("has 4 GPUs on its PCIe bus; the strict profile expects 8"));
  EXPECT_EQ(f[1].kind, "gpu_nic_locality");
  EXPECT_THAT(f[1].summary, HasSubstr("GPU0's nearest fabric NIC (mlx5_1) is PXB away"));
  // PXB is within what dgx-a100 allows.
  auto a100 = LoadProfile("dgx-a100");
  a100->gpu_count = 4;
  a100->fabric_nic_count.reset();  // no sysfs ports in this test
  EXPECT_TRUE(CheckProfile(*a100, in).empty());
}

TEST(ProfileCheck, PcieCapabilityBelowProfile) {
  auto p = LoadProfile("dgx-h100");
  std::vector<PcieLink> links(2);
  links[0].target = {"0000:44:00.0", "gpu", "GPU1", true};
  links[0].max_speed_gts = 16.0;
  links[0].max_width = 16;
  links[1].target = {"0000:43:00.0", "nic", "mlx5_0", false};
  links[1].max_speed_gts = 32.0;
  links[1].max_width = 16;
  ProfileInputs in;
  in.node = "n";
  in.pcie = &links;
  in.ports = {{"mlx5_0", 1, "InfiniBand", 400.0, 4, "ACTIVE", {}, ""}};
  p->fabric_nic_count.reset();
  auto f = CheckProfile(*p, in);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_THAT(f[0].summary, HasSubstr("GPU1 (0000:44:00.0) can link at most at Gen4 x16"));
  EXPECT_THAT(f[0].summary, HasSubstr("expects Gen5 x16"));
}

TEST(ProfileCheck, MtuMismatchOnlyWhenKnown) {
  auto p = ParseProfile("name: roce\nfabric_nics: {mtu: 9000}\n", "roce");
  ProfileInputs in;
  in.node = "n";
  in.ports = {{"mlx5_0", 1, "Ethernet", 200.0, 4, "ACTIVE", 1500, "eth0"},
              {"mlx5_1", 1, "Ethernet", 200.0, 4, "ACTIVE", {}, ""}};
  auto f = CheckProfile(*p, in);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_THAT(f[0].summary, HasSubstr("mlx5_0 port 1 (eth0) has MTU 1500"));
}

}  // namespace
}  // namespace fw::topology
