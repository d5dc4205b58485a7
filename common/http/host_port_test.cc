#include "common/http/host_port.h"

#include <gtest/gtest.h>

namespace fw::http {
namespace {

TEST(HostPort, SplitsAtTheLastColon) {
  std::string host;
  int port = 0;
  ASSERT_TRUE(SplitHostPort("127.0.0.1:9750", &host, &port));
  EXPECT_EQ(host, "127.0.0.1");
  EXPECT_EQ(port, 9750);
  ASSERT_TRUE(SplitHostPort(":80", &host, &port));
  EXPECT_EQ(host, "");
  EXPECT_EQ(port, 80);
  ASSERT_TRUE(SplitHostPort("gpu-01.example:65535", &host, &port));
  EXPECT_EQ(host, "gpu-01.example");
  EXPECT_EQ(port, 65535);
}

TEST(HostPort, RefusesMalformedAddresses) {
  std::string host;
  int port = 0;
  for (const char* bad : {"", "127.0.0.1", "host:", "host:65536", "host:8x", "host:-1",
                          "host:99999999999999999999"}) {
    EXPECT_FALSE(SplitHostPort(bad, &host, &port)) << bad;
  }
}

}  // namespace
}  // namespace fw::http
