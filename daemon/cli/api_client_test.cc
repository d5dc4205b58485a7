// Address resolution (flag, deprecated flag, environment, default) and fetch errors.
#include "daemon/cli/api_client.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

namespace fw::cli {
namespace {

TEST(ResolveApiAddressTest, PrecedenceIsApiThenAggregatorThenEnvThenDefault) {
  std::string note;
  EXPECT_EQ(*ResolveApiAddress(std::nullopt, std::nullopt, nullptr, &note), kDefaultApi);
  EXPECT_TRUE(note.empty());
  EXPECT_EQ(*ResolveApiAddress(std::nullopt, std::nullopt, "", &note), kDefaultApi);
  EXPECT_EQ(*ResolveApiAddress(std::nullopt, std::nullopt, "env:1", &note), "env:1");
  EXPECT_EQ(*ResolveApiAddress(std::nullopt, "agg:2", "env:1", &note), "agg:2");
  EXPECT_EQ(*ResolveApiAddress("api:3", std::nullopt, "env:1", &note), "api:3");
  EXPECT_TRUE(note.empty());
}

TEST(ResolveApiAddressTest, DeprecatedFlagWorksAndLeavesANote) {
  std::string note;
  auto a = ResolveApiAddress(std::nullopt, "10.0.0.1:9751", nullptr, &note);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(*a, "10.0.0.1:9751");
  EXPECT_NE(note.find("--aggregator is deprecated"), std::string::npos);
  EXPECT_NE(note.find("--api"), std::string::npos);
  EXPECT_EQ(note.find('\n'), std::string::npos);  // one line
}

TEST(ResolveApiAddressTest, BothFlagsMustAgree) {
  std::string note;
  EXPECT_EQ(*ResolveApiAddress("h:1", "http://h:1/", nullptr, &note), "h:1");
  auto r = ResolveApiAddress("h:1", "h:2", nullptr, &note);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("disagree"), std::string::npos);
}

TEST(ResolveApiAddressTest, AcceptsHttpUrlsRejectsHttpsAndNonsense) {
  std::string note;
  EXPECT_EQ(*ResolveApiAddress("http://agg.example:9751/", std::nullopt, nullptr, &note),
            "agg.example:9751");
  for (const char* bad :
       {"https://agg:9751", "agg", "agg:", ":9751", "agg:port", "http://agg:9751/api/v1"}) {
    auto r = ResolveApiAddress(bad, std::nullopt, nullptr, &note);
    EXPECT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << bad;
  }
  auto env = ResolveApiAddress(std::nullopt, std::nullopt, "nonsense", &note);
  ASSERT_FALSE(env.ok());
  EXPECT_NE(env.status().message().find(kApiEnv), std::string::npos);
}

TEST(FetchJsonTest, RefusedConnectionIsUnavailableAndNamesTheAddress) {
  // A port that was just free: bind, read it, close.
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  socklen_t len = sizeof(a);
  ASSERT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len), 0);
  close(fd);
  const std::string addr = "127.0.0.1:" + std::to_string(ntohs(a.sin_port));
  auto r = FetchJson(addr, "/api/v1/nodes", 1000);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(r.status().message().find("cannot reach the aggregator's HTTP API at " + addr),
            std::string::npos);
}

}  // namespace
}  // namespace fw::cli
