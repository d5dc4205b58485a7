// `fabricwatch qualify`: exit codes from reports, the request it sends, its text, and the answers
// of a real HTTP server (a report, an error, a hang, basic auth, https) on loopback.
#include "daemon/cli/qualify.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <thread>

#include "common/testing/temp_dir.h"
#include "daemon/cli/collectives.h"
#include "exporter/http_server.h"

namespace fw::cli {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

json Report(const std::string& state, std::vector<std::pair<std::string, std::string>> nodes) {
  json j = {
      {"id", "q1"},        {"suite", "quick"},       {"profile", "generic"},  {"state", state},
      {"duration_s", 9.4}, {"nodes", json::array()}, {"pairs", json::array()}};
  for (auto& [n, v] : nodes) {
    json row = {{"node", n}, {"verdict", v}, {"reasons", json::array()}};
    if (v != "pass") row["reasons"].push_back(n + ": RTT p99 to 5 peers 2.4 ms, 6.1x");
    j["nodes"].push_back(row);
  }
  return j;
}

TEST(QualifyVerdict, WorstNodeOrPairAndThreeUnlessDone) {
  EXPECT_EQ(QualifyReportVerdict(Report("done", {{"a", "pass"}, {"b", "pass"}})), 0);
  EXPECT_EQ(QualifyReportVerdict(Report("done", {{"a", "pass"}, {"b", "warn"}})), 1);
  EXPECT_EQ(QualifyReportVerdict(Report("done", {{"a", "fail"}, {"b", "warn"}})), 2);
  EXPECT_EQ(QualifyReportVerdict(Report("done", {{"a", "pass"}, {"b", "unknown"}})), 3);
  // A timeout or a refusal is never a verdict, whatever the nodes judged so far say.
  EXPECT_EQ(QualifyReportVerdict(Report("timeout", {{"a", "pass"}, {"b", "pass"}})), 3);
  EXPECT_EQ(QualifyReportVerdict(Report("done", {})), 3);
  json r = Report("done", {{"a", "pass"}});
  r["pairs"].push_back({{"src", "a"}, {"dst", "b"}, {"verdict", "fail"}});
  EXPECT_EQ(QualifyReportVerdict(r), 2);
  EXPECT_EQ(QualifyReportVerdict(json::array()), 3);
}

TEST(QualifyVerdict, PerNodeScopeForAPrologOnEachNode) {
  json r = Report("done", {{"a", "pass"}, {"b", "fail"}, {"c", "pass"}});
  r["pairs"].push_back({{"src", "a"}, {"dst", "c"}, {"verdict", "fail"}});
  EXPECT_EQ(QualifyNodeVerdict(r, "b"), 2);
  EXPECT_EQ(QualifyNodeVerdict(r, "a"), 1);  // a bad pair warns both ends, drains neither
  EXPECT_EQ(QualifyNodeVerdict(r, "c"), 1);
  EXPECT_EQ(QualifyNodeVerdict(r, "zz"), 3);
  EXPECT_EQ(QualifyNodeVerdict(Report("timeout", {{"a", "pass"}}), "a"), 3);
}

TEST(QualifyText, SummaryNamesTheFailedNodeWithItsReason) {
  json r = Report("done", {{"gpu1", "pass"}, {"gpu2", "fail"}});
  r["steps"] = json::array({{{"name", "mesh"}, {"state", "done"}, {"duration_s", 6.0}}});
  std::ostringstream out;
  PrintQualifyReport(r, out);
  EXPECT_THAT(out.str(), HasSubstr("QUALIFY FAIL: 2 nodes, suite quick, profile generic, 9.4 s "
                                   "(1 fail, 0 warn, 1 pass, 0 unknown)"));
  EXPECT_THAT(out.str(), HasSubstr("gpu2  fail     gpu2: RTT p99 to 5 peers 2.4 ms"));
  EXPECT_THAT(out.str(), HasSubstr("mesh  done   6.0"));
  std::ostringstream partial;
  json t = Report("timeout", {{"gpu1", "pass"}});
  t["note"] = "the timeout (2 s) came during step mesh";
  PrintQualifyReport(t, partial);
  EXPECT_THAT(partial.str(), HasSubstr("QUALIFY UNKNOWN"));
  EXPECT_THAT(partial.str(), HasSubstr("timeout: the timeout (2 s) came during step mesh"));
}

TEST(QualifyNodes, FlagAndFileMergeAndLimitsHold) {
  fw::testing::TempDir dir("fw-qualify");
  const std::string file = dir.path() + "/nodes";
  std::ofstream(file) << "# job 42\ngpu[2-3]\ndgx1\n";
  auto r = ResolveQualifyNodes("gpu[1-2]", file, 16);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(*r, (std::vector<std::string>{"gpu1", "gpu2", "gpu3", "dgx1"}));
  auto big = ResolveQualifyNodes("gpu[1-3]", file, 3);
  ASSERT_FALSE(big.ok());
  EXPECT_THAT(big.status().message(), HasSubstr("more than 3"));
  EXPECT_THAT(ResolveQualifyNodes("", "", 16).status().message(), HasSubstr("--nodes"));
  EXPECT_THAT(ResolveQualifyNodes("", dir.path() + "/none", 16).status().message(),
              HasSubstr("cannot be opened"));
  EXPECT_THAT(ResolveQualifyNodes("gpu[1", "", 16).status().message(), HasSubstr("--nodes:"));
}

class QualifyHttp : public ::testing::Test {
 protected:
  void SetUp() override {
    auto s = http::Server::Start("127.0.0.1:0", 4);
    ASSERT_TRUE(s.ok()) << s.status().message();
    server_ = std::move(*s);
    o_.api = "127.0.0.1:" + std::to_string(server_->port());
  }
  int Run(const QualifyArgs& a) { return RunQualify(o_, a, out_, err_); }

  std::unique_ptr<http::Server> server_;
  Options o_;
  std::ostringstream out_, err_;
};

TEST_F(QualifyHttp, PostsTheSetAndExitsWithTheReportsVerdict) {
  json got;
  server_->Handle("/api/v1/qualify", [&](const http::Request& req, http::Response& resp) {
    got = json::parse(req.body, nullptr, false);
    got["method"] = req.method;
    resp.Send(200, "application/json", Report("done", {{"a", "pass"}, {"b", "fail"}}).dump());
  });
  QualifyArgs a;
  a.nodes = {"a", "b"};
  a.profile = "generic";
  a.timeout_s = 7;
  o_.format = "json";
  EXPECT_EQ(Run(a), 2);
  EXPECT_EQ(got["method"], "POST");
  EXPECT_EQ(got["nodes"], json::array({"a", "b"}));
  EXPECT_EQ(got["suite"], "quick");
  EXPECT_EQ(got["timeout_s"], 7.0);
  EXPECT_EQ(got["profile"], "generic");
  EXPECT_FALSE(got.contains("job"));
  json printed = json::parse(out_.str());
  EXPECT_EQ(printed["exit_code"], 2);
  EXPECT_EQ(printed["nodes"][1]["node"], "b");
}

TEST(QualifyRequest, FullSuiteAndJobGoIntoTheBody) {
  QualifyArgs a;
  a.nodes = {"a"};
  a.suite = "full";
  a.job = "4711";
  const json j = QualifyRequestJson(a);
  EXPECT_EQ(j["suite"], "full");
  EXPECT_EQ(j["job"], "4711");
  EXPECT_FALSE(j.contains("profile"));
}

TEST_F(QualifyHttp, RefusalIsThreeWithTheAggregatorsReason) {
  server_->Handle("/api/v1/qualify", [](const http::Request&, http::Response& resp) {
    resp.Send(400, "application/json", R"({"error":"unknown profile 'h999'"})");
  });
  QualifyArgs a;
  a.nodes = {"a"};
  EXPECT_EQ(Run(a), 3);
  EXPECT_THAT(err_.str(), HasSubstr("HTTP 400: unknown profile 'h999'"));
  EXPECT_TRUE(out_.str().empty());
}

TEST_F(QualifyHttp, AggregatorThatNeverAnswersIsThreeAfterTimeoutPlusMargin) {
  server_->Handle("/api/v1/qualify", [](const http::Request&, http::Response& resp) {
    std::this_thread::sleep_for(std::chrono::milliseconds(7500));
    resp.Send(200, "application/json", "{}");
  });
  QualifyArgs a;
  a.nodes = {"a"};
  a.timeout_s = 1;  // the CLI waits 1 + 5 s
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(Run(a), 3);
  const double waited =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_GE(waited, 5.5);
  EXPECT_LT(waited, 7.4);
  EXPECT_THAT(err_.str(), HasSubstr("no report from the aggregator"));
}

// An aggregator whose web config has users: POST /api/v1/qualify is a write (requires_auth), so
// the CLI must send --user's credentials; over https it verifies the server with --tls-ca.
class QualifyAuth : public ::testing::Test {
 protected:
  // SHA-256-crypt of "correct horse" (openssl passwd -5 -salt fwtestsalt).
  static constexpr const char* kHash = "$5$fwtestsalt$PiwAEY5vHgAJc2MTOh1lcxjLubLfiKihC5CwF6d3dH5";

  void Start(bool tls) {
    http::WebConfig w;
    w.users["ops"] = kHash;
    if (tls) {
      const std::string s = FW_CERTS_SCRIPT, d = dir_.path();
      const std::string cmd =
          "(" + s + " ca " + d + " && " + s + " server " + d + " localhost 127.0.0.1) >/dev/null";
      ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
      w.tls = true;
      w.tls_config.cert_file = d + "/localhost.crt";
      w.tls_config.key_file = d + "/localhost.key";
    }
    auto s = http::Server::Start("127.0.0.1:0", 4, &w);
    ASSERT_TRUE(s.ok()) << s.status().message();
    server_ = std::move(*s);
    server_->Handle(
        "/api/v1/qualify",
        [](const http::Request&, http::Response& resp) {
          resp.Send(200, "application/json", Report("done", {{"a", "pass"}}).dump());
        },
        http::HandlerOptions{.requires_auth = true});
    server_->Handle("/api/v1/nodes", [](const http::Request&, http::Response& resp) {
      resp.Send(200, "application/json", R"([{"name":"a","connected":true}])");
    });
    o_.api = "127.0.0.1:" + std::to_string(server_->port());
    ASSERT_TRUE(ConfigureTls({o_.api, tls}, tls ? dir_.path() + "/ca.crt" : "", "", "", &o_).ok());
  }
  void Login(const char* password) {
    auto h = BasicAuthHeader("ops", "", password);
    ASSERT_TRUE(h.ok());
    o_.web.headers = {*h};
  }
  int Run() {
    out_.str("");
    err_.str("");
    QualifyArgs a;
    a.nodes = {"a"};
    return RunQualify(o_, a, out_, err_);
  }

  fw::testing::TempDir dir_{"fw-cli-tls"};
  std::unique_ptr<http::Server> server_;
  Options o_;
  std::ostringstream out_, err_;
};

TEST_F(QualifyAuth, WithoutCredentialsIsThreeAndSaysWhatIsMissing) {
  Start(false);
  EXPECT_EQ(Run(), 3);
  EXPECT_THAT(err_.str(), HasSubstr("answered HTTP 401"));
  EXPECT_THAT(err_.str(),
              HasSubstr("--user NAME with --password-file FILE or $FABRICWATCH_PASSWORD"));
  Login("wrong");
  EXPECT_EQ(Run(), 3);
  EXPECT_THAT(err_.str(), HasSubstr("the user or password was not accepted"));
  Login("correct horse");
  EXPECT_EQ(Run(), 0) << err_.str();
  EXPECT_THAT(out_.str(), HasSubstr("QUALIFY PASS"));
}

// Pause/resume of collective probes is the other write: it goes through the same credentials.
TEST_F(QualifyAuth, CollectivesPauseSendsTheCredentials) {
  Start(false);
  server_->Handle(
      "/api/v1/collectives/pause",
      [](const http::Request& req, http::Response& resp) {
        json body = json::parse(req.body, nullptr, false);
        resp.Send(200, "application/json",
                  json{{"changed", body.value("nodes", json::array())}, {"paused", {"a"}}}.dump());
      },
      http::HandlerOptions{.requires_auth = true});
  std::ostringstream out, err;
  EXPECT_EQ(RunCollectivesPause(o_, true, {"a"}, out, err), 3);
  EXPECT_THAT(err.str(), HasSubstr("answered HTTP 401"));
  EXPECT_THAT(err.str(), HasSubstr("--user NAME"));
  Login("correct horse");
  std::ostringstream out2, err2;
  EXPECT_EQ(RunCollectivesPause(o_, true, {"a"}, out2, err2), 0) << err2.str();
  EXPECT_THAT(out2.str(), HasSubstr("paused collective probes on 1 node (1 changed: a)"));
}

TEST_F(QualifyAuth, OverHttpsVerifiedByTheCaWithCredentials) {
  Start(true);
  Login("correct horse");
  EXPECT_EQ(Run(), 0) << err_.str();
  // Read verbs go over https too (without needing the credentials).
  std::ostringstream out, err;
  Options reader = o_;
  reader.web.headers.clear();
  EXPECT_EQ(RunNodes(reader, out, err), 0) << err.str();
  EXPECT_THAT(out.str(), HasSubstr("a     yes"));
  // Plain HTTP to the TLS port, or a CA that did not sign the server's certificate: exit 3.
  QualifyArgs a;
  a.nodes = {"a"};
  Options plain = o_;
  plain.web = {};
  EXPECT_EQ(RunQualify(plain, a, out, err), 3);
  Options system_ca = o_;
  ASSERT_TRUE(ConfigureTls({o_.api, true}, "", "", "", &system_ca).ok());
  system_ca.web.headers = o_.web.headers;
  std::ostringstream err2;
  EXPECT_EQ(RunQualify(system_ca, a, out, err2), 3);
  EXPECT_THAT(err2.str(), HasSubstr("TLS handshake"));
}

TEST(QualifyUnreachable, NoAggregatorIsThree) {
  Options o;
  o.api = "127.0.0.1:1";  // nothing listens on port 1 here
  QualifyArgs a;
  a.nodes = {"a"};
  std::ostringstream out, err;
  EXPECT_EQ(RunQualify(o, a, out, err), 3);
  EXPECT_THAT(err.str(), HasSubstr("could not qualify: no report from the aggregator at "
                                   "127.0.0.1:1"));
}

}  // namespace
}  // namespace fw::cli
