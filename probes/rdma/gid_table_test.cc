// GID tables read from sysfs trees, and the source GID choice (never blindly index 0).
#include "probes/rdma/gid_table.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "common/testing/temp_dir.h"

namespace fw::rdma {
namespace {

void Write(const std::string& path, const std::string& text) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream(path) << text;
}

// A ConnectX port in RoCE mode as the kernel lays it out (Documentation/ABI/testing/
// sysfs-class-infiniband): every address of the netdev appears twice, as RoCE v1 and v2, and
// index 0/1 are the link-local fe80:: GID.
class RoceSysfs : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string port = dir.path() + "/class/infiniband/mlx5_2/ports/1";
    const char* gids[] = {
        "fe80:0000:0000:0000:0ac0:ebff:fe1a:2b3c", "fe80:0000:0000:0000:0ac0:ebff:fe1a:2b3c",
        "0000:0000:0000:0000:0000:ffff:0a00:0005", "0000:0000:0000:0000:0000:ffff:0a00:0005",
        "0000:0000:0000:0000:0000:ffff:c612:0102", "0000:0000:0000:0000:0000:ffff:c612:0102",
        "0000:0000:0000:0000:0000:0000:0000:0000", "2001:0db8:0000:0001:0ac0:ebff:fe1a:2b3c"};
    const char* types[] = {"IB/RoCE v1", "RoCE v2", "IB/RoCE v1", "RoCE v2",
                           "IB/RoCE v1", "RoCE v2", "",           "RoCE v2"};
    const char* ndevs[] = {"eth2", "eth2", "vlan100", "vlan100", "eth2", "eth2", "", "eth2"};
    for (int i = 0; i < 8; ++i) {
      const std::string n = std::to_string(i);
      Write(port + "/gids/" + n, std::string(gids[i]) + "\n");
      if (*types[i] != 0) Write(port + "/gid_attrs/types/" + n, std::string(types[i]) + "\n");
      if (*ndevs[i] != 0) Write(port + "/gid_attrs/ndevs/" + n, std::string(ndevs[i]) + "\n");
    }
    Write(port + "/link_layer", "Ethernet\n");
  }
  fw::testing::TempDir dir{"fw-gid"};
};

TEST_F(RoceSysfs, ReadsEveryNonZeroGidWithItsTypeAndNetdev) {
  auto t = ReadSysfsGidTable(dir.path(), "mlx5_2", 1, LinkLayer::kEthernet);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  ASSERT_EQ(t->size(), 7u) << "the zero GID at index 6 is an unused slot";
  EXPECT_EQ((*t)[0].type, GidType::kRoceV1);
  EXPECT_EQ((*t)[1].type, GidType::kRoceV2);
  EXPECT_EQ((*t)[2].netdev, "vlan100");
  EXPECT_EQ((*t)[6].index, 7);
  EXPECT_EQ(PortNetdev(*t), "eth2");
}

TEST_F(RoceSysfs, ChoosesTheIpv4MappedRoceV2GidOnThePortsNetdev) {
  auto t = ReadSysfsGidTable(dir.path(), "mlx5_2", 1, LinkLayer::kEthernet);
  ASSERT_TRUE(t.ok());
  auto c = ChooseSourceGid(*t, LinkLayer::kEthernet);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->index, 5) << "not 0 (RoCE v1 link-local), not 3 (another netdev)";
  EXPECT_EQ(c->type, GidType::kRoceV2);
  EXPECT_EQ(c->gid.ToString(), "0000:0000:0000:0000:0000:ffff:c612:0102");
  // Asked for the VLAN netdev, it takes that one's v2 GID.
  auto v = ChooseSourceGid(*t, LinkLayer::kEthernet, "vlan100");
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(v->index, 3);
}

TEST_F(RoceSysfs, WithoutAnIpv4AddressItRefusesUnlessIpv6IsAllowed) {
  auto t = ReadSysfsGidTable(dir.path(), "mlx5_2", 1, LinkLayer::kEthernet);
  ASSERT_TRUE(t.ok());
  std::vector<GidEntry> no_v4;
  for (const GidEntry& e : *t) {
    if (!e.gid.IsIpv4Mapped()) no_v4.push_back(e);
  }
  auto c = ChooseSourceGid(no_v4, LinkLayer::kEthernet);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("IPv4-mapped RoCE v2"), std::string::npos);
  auto v6 = ChooseSourceGid(no_v4, LinkLayer::kEthernet, "", /*allow_ipv6=*/true);
  ASSERT_TRUE(v6.ok());
  EXPECT_EQ(v6->index, 7) << "the global IPv6 v2 GID, not the link-local one at index 1";
}

TEST(GidType, IbRoceV1TextDependsOnTheLinkLayer) {
  EXPECT_EQ(ParseGidType("IB/RoCE v1\n", LinkLayer::kInfiniBand), GidType::kIb);
  EXPECT_EQ(ParseGidType("IB/RoCE v1\n", LinkLayer::kEthernet), GidType::kRoceV1);
  EXPECT_EQ(ParseGidType("RoCE v2\n", LinkLayer::kEthernet), GidType::kRoceV2);
  EXPECT_EQ(ParseGidType("garbage", LinkLayer::kEthernet), GidType::kUnknown);
}

// The real H100 tree (../shared/testdata) holds port identity files but no GID table; reading
// it must say so, not invent a GID. An IB port then still works (its AHs route by LID).
TEST(RealSysfs, H100TreeHasNoGidTableAndSaysSo) {
  const char* td = std::getenv("FW_TESTDATA");
  if (td == nullptr) GTEST_SKIP() << "FW_TESTDATA not set";
  const std::string root = std::string(td) + "/sysfs/gpud-h100";
  if (!std::filesystem::exists(root + "/class/infiniband/mlx5_0")) GTEST_SKIP() << "no tree";
  auto t = ReadSysfsGidTable(root, "mlx5_0", 1, LinkLayer::kInfiniBand);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), StatusCode::kNotFound);
  auto bond = ReadSysfsGidTable(root, "mlx5_bond_0", 1, LinkLayer::kEthernet);
  EXPECT_FALSE(bond.ok());
  auto c = ChooseSourceGid({}, LinkLayer::kEthernet);
  EXPECT_FALSE(c.ok()) << "a RoCE port without GIDs cannot probe";
}

}  // namespace
}  // namespace fw::rdma
