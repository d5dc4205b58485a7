// The HTTP server with a web config, on real loopback sockets: it really speaks TLS (civetweb's
// run-time loaded OpenSSL), enforces the client-certificate policy, and guards requires_auth
// handlers with basic auth, counting each refusal.
#include <crypt.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <thread>

#include "common/testing/temp_dir.h"
#include "exporter/http_server.h"
#include "common/http/web_client.h"

namespace fw::http {
namespace {

// civetweb counts a refused handshake on its worker thread, possibly after the client gave up.
bool WaitUntilCounted(uint64_t want) {
  for (int i = 0; i < 100 && TlsHandshakeFailures("http").load() < want; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return TlsHandshakeFailures("http").load() >= want;
}

class WebServerTlsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string s = FW_CERTS_SCRIPT, d = dir_.path(), o = other_.path();
    const std::string cmd = s + " ca " + d + " && " + s + " server " + d +
                            " localhost 127.0.0.1 && " + s + " node " + d + " client-a && " + s +
                            " ca " + o + " && " + s + " node " + o + " intruder";
    ASSERT_EQ(std::system((cmd + " >/dev/null").c_str()), 0) << cmd;
  }
  std::string P(const std::string& f) const { return dir_.path() + "/" + f; }

  WebConfig Tls(ClientAuth auth) const {
    WebConfig w;
    w.tls = true;
    w.tls_config.cert_file = P("localhost.crt");
    w.tls_config.key_file = P("localhost.key");
    w.tls_config.client_auth = auth;
    if (auth == ClientAuth::kRequireAndVerifyClientCert) w.tls_config.client_ca_file = P("ca.crt");
    return w;
  }
  static void Routes(Server& s) {
    s.Handle("/healthz", [](const Request&, Response& r) { r.Send(200, "text/plain", "ok\n"); });
    s.Handle(
        "/api/v1/write",
        [](const Request&, Response& r) { r.Send(200, "text/plain", "written\n"); },
        HandlerOptions{.requires_auth = true});
  }
  WebClientOptions Verified() const {
    WebClientOptions o;
    o.tls = true;
    o.ca_file = P("ca.crt");
    return o;
  }

  fw::testing::TempDir dir_{"fw-web"};
  fw::testing::TempDir other_{"fw-web-other"};
};

TEST_F(WebServerTlsTest, ServesHttpsVerifiedByTheFleetCa) {
  WebConfig w = Tls(ClientAuth::kNoClientCert);
  auto s = Server::Start("127.0.0.1:0", 2, &w);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  Routes(**s);
  EXPECT_TRUE((*s)->tls());
  const std::string addr = "127.0.0.1:" + std::to_string((*s)->port());

  auto r = FetchWeb(addr, "GET", "/healthz", Verified());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->body, "ok\n");
  // The certificate names 127.0.0.1 and localhost, nothing else.
  WebClientOptions wrong_name = Verified();
  wrong_name.server_name = "aggregator.example";
  EXPECT_FALSE(FetchWeb(addr, "GET", "/healthz", wrong_name).ok());
  // A CA that did not sign it.
  WebClientOptions wrong_ca = Verified();
  wrong_ca.ca_file = other_.path() + "/ca.crt";
  EXPECT_FALSE(FetchWeb(addr, "GET", "/healthz", wrong_ca).ok());
  // Plaintext HTTP gets no page from a TLS port.
  auto plain = Get(addr, "/healthz", 2000);
  EXPECT_TRUE(!plain.ok() || plain->status != 200);
  EXPECT_TRUE((*s)->SelfCheck("127.0.0.1:0", 2000));
}

TEST_F(WebServerTlsTest, RequireAndVerifyClientCert) {
  WebConfig w = Tls(ClientAuth::kRequireAndVerifyClientCert);
  auto s = Server::Start("127.0.0.1:0", 2, &w);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  Routes(**s);
  const std::string addr = "127.0.0.1:" + std::to_string((*s)->port());

  const uint64_t refused_before = TlsHandshakeFailures("http").load();
  auto anonymous = FetchWeb(addr, "GET", "/healthz", Verified());
  EXPECT_FALSE(anonymous.ok() && anonymous->status == 200);
  WebClientOptions intruder = Verified();
  intruder.cert_file = other_.path() + "/intruder.crt";
  intruder.key_file = other_.path() + "/intruder.key";
  auto foreign = FetchWeb(addr, "GET", "/healthz", intruder);
  EXPECT_FALSE(foreign.ok() && foreign->status == 200);
  // Each refused handshake is counted (fabricwatch_tls_handshake_failures_total{listener="http"}).
  EXPECT_TRUE(WaitUntilCounted(refused_before + 2));
  WebClientOptions member = Verified();
  member.cert_file = P("client-a.crt");
  member.key_file = P("client-a.key");
  auto ok = FetchWeb(addr, "GET", "/healthz", member);
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(ok->status, 200);
  // The watchdog probe has no client certificate; a completed handshake counts as alive.
  EXPECT_TRUE((*s)->SelfCheck("127.0.0.1:0", 2000));
}

std::string Bcrypt(const std::string& password) {
  char setting[CRYPT_GENSALT_OUTPUT_SIZE];
  EXPECT_NE(crypt_gensalt_rn("$2b$", 4, nullptr, 0, setting, sizeof setting), nullptr);
  struct crypt_data data {};
  return crypt_r(password.c_str(), setting, &data);
}

TEST_F(WebServerTlsTest, BasicAuthGuardsWriteEndpointsOverTls) {
  WebConfig w = Tls(ClientAuth::kNoClientCert);
  w.users["ops"] = Bcrypt("correct horse");
  auto s = Server::Start("127.0.0.1:0", 2, &w);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  metrics::Registry registry;
  (*s)->HandleMetrics(registry);
  Routes(**s);
  const std::string addr = "127.0.0.1:" + std::to_string((*s)->port());

  auto none = FetchWeb(addr, "POST", "/api/v1/write", Verified());
  ASSERT_TRUE(none.ok()) << none.status().ToString();
  EXPECT_EQ(none->status, 401);
  WebClientOptions bad = Verified();
  bad.headers = {"Authorization: " + BasicAuthorization("ops", "wrong")};
  EXPECT_EQ(FetchWeb(addr, "POST", "/api/v1/write", bad)->status, 401);
  WebClientOptions good = Verified();
  good.headers = {"Authorization: " + BasicAuthorization("ops", "correct horse")};
  auto written = FetchWeb(addr, "POST", "/api/v1/write", good);
  ASSERT_TRUE(written.ok());
  EXPECT_EQ(written->status, 200);
  EXPECT_EQ(written->body, "written\n");
  // Read endpoints stay open.
  EXPECT_EQ(FetchWeb(addr, "GET", "/healthz", Verified())->status, 200);
  auto m = FetchWeb(addr, "GET", "/metrics", Verified());
  ASSERT_TRUE(m.ok());
  EXPECT_NE(m->body.find("fabricwatch_http_rejected_requests_total{code=\"401\"} 2\n"),
            std::string::npos)
      << m->body;
}

TEST_F(WebServerTlsTest, BasicAuthOverPlainHttpAndOpenWithoutUsers) {
  WebConfig w;
  w.users["ops"] = Bcrypt("pw");
  auto s = Server::Start("127.0.0.1:0", 2, &w);
  ASSERT_TRUE(s.ok());
  Routes(**s);
  const std::string addr = "127.0.0.1:" + std::to_string((*s)->port());
  EXPECT_EQ(Fetch(addr, "POST", "/api/v1/write")->status, 401);
  WebClientOptions good;
  good.headers = {"Authorization: " + BasicAuthorization("ops", "pw")};
  EXPECT_EQ(FetchWeb(addr, "POST", "/api/v1/write", good)->status, 200);

  auto open = Server::Start("127.0.0.1:0", 2);
  ASSERT_TRUE(open.ok());
  Routes(**open);
  EXPECT_EQ(Fetch("127.0.0.1:" + std::to_string((*open)->port()), "POST", "/api/v1/write")->status,
            200);
}

TEST_F(WebServerTlsTest, UnusableCertificateFailsAtStart) {
  WebConfig w = Tls(ClientAuth::kNoClientCert);
  w.tls_config.key_file = P("client-a.key");  // not the server certificate's key
  auto s = Server::Start("127.0.0.1:0", 2, &w);
  EXPECT_FALSE(s.ok());
}

}  // namespace
}  // namespace fw::http
