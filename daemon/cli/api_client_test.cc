// Address resolution (flag, deprecated flag, environment, default; http and https), TLS and
// credential options, and fetch errors.
#include "daemon/cli/api_client.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fstream>
#include <vector>

#include "common/testing/temp_dir.h"

namespace fw::cli {
namespace {

std::string Address(const StatusOr<ApiEndpoint>& e) { return e.ok() ? e->address : "error"; }

TEST(ResolveApiAddressTest, PrecedenceIsApiThenAggregatorThenEnvThenDefault) {
  std::string note;
  EXPECT_EQ(Address(ResolveApiAddress(std::nullopt, std::nullopt, nullptr, &note)), kDefaultApi);
  EXPECT_TRUE(note.empty());
  EXPECT_EQ(Address(ResolveApiAddress(std::nullopt, std::nullopt, "", &note)), kDefaultApi);
  EXPECT_EQ(Address(ResolveApiAddress(std::nullopt, std::nullopt, "env:1", &note)), "env:1");
  EXPECT_EQ(Address(ResolveApiAddress(std::nullopt, "agg:2", "env:1", &note)), "agg:2");
  EXPECT_EQ(Address(ResolveApiAddress("api:3", std::nullopt, "env:1", &note)), "api:3");
  EXPECT_TRUE(note.empty());
}

TEST(ResolveApiAddressTest, DeprecatedFlagWorksAndLeavesANote) {
  std::string note;
  auto a = ResolveApiAddress(std::nullopt, "10.0.0.1:9751", nullptr, &note);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->address, "10.0.0.1:9751");
  EXPECT_NE(note.find("--aggregator is deprecated"), std::string::npos);
  EXPECT_NE(note.find("--api"), std::string::npos);
  EXPECT_EQ(note.find('\n'), std::string::npos);  // one line
}

TEST(ResolveApiAddressTest, BothFlagsMustAgree) {
  std::string note;
  EXPECT_EQ(Address(ResolveApiAddress("h:1", "http://h:1/", nullptr, &note)), "h:1");
  auto r = ResolveApiAddress("h:1", "h:2", nullptr, &note);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("disagree"), std::string::npos);
  EXPECT_FALSE(ResolveApiAddress("https://h:1", "h:1", nullptr, &note).ok());
}

TEST(ResolveApiAddressTest, AcceptsHttpAndHttpsUrlsRejectsNonsense) {
  std::string note;
  auto plain = ResolveApiAddress("http://agg.example:9751/", std::nullopt, nullptr, &note);
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain->address, "agg.example:9751");
  EXPECT_FALSE(plain->tls);
  auto tls = ResolveApiAddress(std::nullopt, std::nullopt, "https://agg.example:9751", &note);
  ASSERT_TRUE(tls.ok());
  EXPECT_EQ(tls->address, "agg.example:9751");
  EXPECT_TRUE(tls->tls);
  for (const char* bad : {"agg", "agg:", ":9751", "agg:port", "http://agg:9751/api/v1",
                          "https://agg", "ftp://agg:9751"}) {
    auto r = ResolveApiAddress(bad, std::nullopt, nullptr, &note);
    EXPECT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << bad;
  }
  auto env = ResolveApiAddress(std::nullopt, std::nullopt, "nonsense", &note);
  ASSERT_FALSE(env.ok());
  EXPECT_NE(env.status().message().find(kApiEnv), std::string::npos);
}

TEST(ConfigureTlsTest, HttpsVerifiesWithTheGivenCaOrTheSystemStore) {
  Options o;
  ASSERT_TRUE(ConfigureTls({"agg:9751", true}, "", "", "", &o).ok());
  EXPECT_TRUE(o.web.tls);
  EXPECT_TRUE(o.web.verify_with_system_ca);
  ASSERT_TRUE(ConfigureTls({"agg:9751", true}, "/etc/fw/ca.crt", "c.crt", "c.key", &o).ok());
  EXPECT_FALSE(o.web.verify_with_system_ca);
  EXPECT_EQ(o.web.ca_file, "/etc/fw/ca.crt");
  EXPECT_EQ(o.web.cert_file, "c.crt");
  EXPECT_EQ(o.web.key_file, "c.key");
  // TLS files for a plain address would silently send nothing encrypted: refused.
  auto plain = ConfigureTls({"agg:9751", false}, "/etc/fw/ca.crt", "", "", &o);
  EXPECT_EQ(plain.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(plain.message().find("https://agg:9751"), std::string::npos);
  EXPECT_FALSE(ConfigureTls({"agg:9751", true}, "", "c.crt", "", &o).ok());
}

TEST(BasicAuthHeaderTest, PasswordFromTheFileElseTheEnvironment) {
  fw::testing::TempDir dir("fw-cli-auth");
  const std::string file = dir.path() + "/pw";
  std::ofstream(file) << "correct horse\r\nsecond line ignored\n";
  // "ops:correct horse" in base64.
  const std::string want = "Authorization: Basic b3BzOmNvcnJlY3QgaG9yc2U=";
  EXPECT_EQ(*BasicAuthHeader("ops", file, nullptr), want);
  EXPECT_EQ(*BasicAuthHeader("ops", file, "from-env"), want);  // the file wins
  EXPECT_EQ(*BasicAuthHeader("ops", "", "correct horse"), want);
  EXPECT_EQ(*BasicAuthHeader("", "", "correct horse"), "");  // no user: no header
}

TEST(BasicAuthHeaderTest, RefusesWhatCannotBeSent) {
  fw::testing::TempDir dir("fw-cli-auth");
  const std::string empty = dir.path() + "/empty", big = dir.path() + "/big";
  std::ofstream(empty) << "\nsecret on the second line\n";
  std::ofstream(big) << std::string(5000, 'x');
  struct Case {
    std::string user, file;
    const char* env;
    const char* says;
  };
  for (const Case& c : std::vector<Case>{
           {"ops", "", nullptr, "needs a password"},
           {"ops", "", "", "needs a password"},
           {"", dir.path() + "/pw", nullptr, "--password-file needs --user"},
           {"a:b", "", "pw", "must not hold ':'"},
           {"ops", dir.path() + "/missing", "pw", "cannot read"},
           {"ops", empty, nullptr, "first line is empty"},
           {"ops", big, nullptr, "over 4 KiB"},
       }) {
    auto h = BasicAuthHeader(c.user, c.file, c.env);
    ASSERT_FALSE(h.ok()) << c.says;
    EXPECT_EQ(h.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(h.status().message().find(c.says), std::string::npos) << h.status().message();
  }
}

TEST(PlainCredentialsWarningTest, OnlyForCredentialsOverPlainHttpBeyondLoopback) {
  Options o;
  o.api = "agg.example:9751";
  EXPECT_EQ(PlainCredentialsWarning(o), "");  // no credentials
  o.web.headers = {"Authorization: Basic eDp5"};
  EXPECT_NE(PlainCredentialsWarning(o).find("over plain HTTP"), std::string::npos);
  o.web.tls = true;
  EXPECT_EQ(PlainCredentialsWarning(o), "");
  o.web.tls = false;
  o.api = "127.0.0.1:9751";
  EXPECT_EQ(PlainCredentialsWarning(o), "");
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
  Options o;
  o.api = addr;
  o.timeout_ms = 1000;
  auto r = FetchJson(o, "/api/v1/nodes");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(r.status().message().find("cannot reach the aggregator's HTTP API at " + addr),
            std::string::npos);
}

}  // namespace
}  // namespace fw::cli
