// LoadTlsFiles against certificates made by packaging/certs/fabricwatch-certs (the script the
// docs tell operators to use), and the flag combinations it refuses.
#include "common/tls/tls_config.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>

#include "common/testing/temp_dir.h"

namespace fw::tls {
namespace {

class TlsConfigTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string cmd = std::string(FW_CERTS_SCRIPT) + " ca " + dir_.path() +
                            " >/dev/null && " + FW_CERTS_SCRIPT + " node " + dir_.path() +
                            " node-a node-b >/dev/null";
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  }
  std::string P(const std::string& f) const { return dir_.path() + "/" + f; }
  fw::testing::TempDir dir_{"fw-tls"};
};

TEST_F(TlsConfigTest, LoadsAFleetCertificateAndItsNames) {
  auto m = LoadTlsFiles({P("node-a.crt"), P("node-a.key"), P("ca.crt"), false});
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  ASSERT_TRUE(m->has_value());
  EXPECT_TRUE(NamesNode((*m)->names, "node-a"));
  EXPECT_FALSE(NamesNode((*m)->names, "node-b"));
  EXPECT_FALSE(NamesNode((*m)->names, "node-"));
  EXPECT_FALSE(NamesNode((*m)->names, ""));
  EXPECT_GT((*m)->not_after_unix, 0);
}

TEST_F(TlsConfigTest, InsecureIsExplicitAndExclusive) {
  auto none = LoadTlsFiles({});
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("--insecure"), std::string::npos);
  auto plain = LoadTlsFiles({"", "", "", true});
  ASSERT_TRUE(plain.ok());
  EXPECT_FALSE(plain->has_value());
  EXPECT_FALSE(LoadTlsFiles({P("node-a.crt"), P("node-a.key"), P("ca.crt"), true}).ok());
  EXPECT_FALSE(LoadTlsFiles({P("node-a.crt"), P("node-a.key"), "", false}).ok());
}

TEST_F(TlsConfigTest, RefusesWrongFiles) {
  auto swapped = LoadTlsFiles({P("node-a.crt"), P("node-b.key"), P("ca.crt"), false});
  ASSERT_FALSE(swapped.ok());
  EXPECT_NE(swapped.status().message().find("does not belong"), std::string::npos);
  auto missing = LoadTlsFiles({P("nope.crt"), P("node-a.key"), P("ca.crt"), false});
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("nope.crt"), std::string::npos);
  { std::ofstream(P("junk.pem")) << "-----BEGIN CERTIFICATE-----\nnot base64\n"; }
  EXPECT_FALSE(LoadTlsFiles({P("junk.pem"), P("node-a.key"), P("ca.crt"), false}).ok());
  EXPECT_FALSE(LoadTlsFiles({P("node-a.crt"), P("node-a.key"), P("junk.pem"), false}).ok());
  EXPECT_FALSE(LoadTlsFiles({P("node-a.key"), P("node-a.key"), P("ca.crt"), false}).ok());
}

}  // namespace
}  // namespace fw::tls
