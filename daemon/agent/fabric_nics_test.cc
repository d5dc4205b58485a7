// --probe-nics: interfaces and their addresses, explicit addresses, and NICs without one.
#include "daemon/agent/fabric_nics.h"

#include <gtest/gtest.h>

#include <map>

namespace fw::agent {
namespace {

// eth0 and eth1 have addresses, eth2 exists without one; nothing else exists.
std::optional<std::string> FakeLookup(const std::string& name) {
  static const std::map<std::string, std::string> kIfaces = {
      {"eth0", "198.18.1.2"}, {"eth1", "198.19.1.2"}, {"eth2", ""}};
  auto it = kIfaces.find(name);
  if (it == kIfaces.end()) return std::nullopt;
  return it->second;
}

TEST(FabricNicsTest, InterfacesGetTheirAddressAndAreBoundToThemselves) {
  auto nics = ParseFabricNics("eth0,eth1", FakeLookup);
  ASSERT_TRUE(nics.ok()) << nics.status().ToString();
  ASSERT_EQ(nics->size(), 2u);
  EXPECT_EQ((*nics)[0].name, "eth0");
  EXPECT_EQ((*nics)[0].address, "198.18.1.2");
  EXPECT_EQ((*nics)[0].device, "eth0");
  EXPECT_EQ((*nics)[1].address, "198.19.1.2");
  EXPECT_EQ((*nics)[1].device, "eth1");
}

TEST(FabricNicsTest, AnExplicitAddressNamesAMapNicThatNeedNotBeAnInterface) {
  auto nics = ParseFabricNics("mlx5_0=10.0.0.5,eth1=10.0.1.5", FakeLookup);
  ASSERT_TRUE(nics.ok()) << nics.status().ToString();
  EXPECT_EQ((*nics)[0].address, "10.0.0.5");
  EXPECT_EQ((*nics)[0].device, "");  // no such interface: by address and route
  EXPECT_EQ((*nics)[1].address, "10.0.1.5");
  EXPECT_EQ((*nics)[1].device, "eth1");
}

TEST(FabricNicsTest, ANicWithoutAnAddressStaysWithAReason) {
  auto nics = ParseFabricNics("eth2,eth9,eth0", FakeLookup);
  ASSERT_TRUE(nics.ok()) << nics.status().ToString();
  ASSERT_EQ(nics->size(), 3u);
  EXPECT_EQ((*nics)[0].address, "");
  EXPECT_EQ((*nics)[0].skip_reason, "interface eth2 has no IPv4 address");
  EXPECT_EQ((*nics)[1].address, "");
  EXPECT_EQ((*nics)[1].skip_reason, "no interface named eth9");
  EXPECT_EQ((*nics)[2].address, "198.18.1.2");
}

TEST(FabricNicsTest, BadSpecsAreRefused) {
  for (const char* bad : {"", ",", "eth0,eth0", "=10.0.0.1", "eth0=not-an-address", "a b"}) {
    EXPECT_FALSE(ParseFabricNics(bad, FakeLookup).ok()) << bad;
  }
}

}  // namespace
}  // namespace fw::agent
