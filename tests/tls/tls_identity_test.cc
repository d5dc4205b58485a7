// The aggregator with --tls-cert/--tls-key/--tls-ca: a client without a certificate from the fleet
// CA is refused at the handshake, and a client whose certificate names node A cannot report as
// node B (PERMISSION_DENIED, counted in fabricwatch_ingest_protocol_errors_total and logged).
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <regex>

#include "common/tls/grpc_credentials.h"
#include "common/tls/tls_config.h"
#include "common/http/http_client.h"
#include "fabricwatch.grpc.pb.h"
#include "tests/integration/process.h"

namespace fw::testing {
namespace {

namespace v1 = fabricwatch::v1;
using std::chrono::seconds;

double Metric(const std::string& text, const std::string& series) {
  std::smatch m;
  std::regex re("(^|\n)" + std::regex_replace(series, std::regex(R"([{}"\\.])"), R"(\$&)") +
                " ([0-9.e+]+)");
  return std::regex_search(text, m, re) ? std::stod(m[2]) : -1;
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

class TlsIdentityTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    const std::string s = FW_CERTS_SCRIPT, d = dir_->path() + "/fleet", o = dir_->path() + "/other";
    const std::string cmd = s + " ca " + d + " && " + s + " server " + d +
                            " localhost 127.0.0.1 && " + s + " node " + d + " node-a node-b && " +
                            s + " ca " + o + " && " + s + " node " + o + " node-a";
    ASSERT_EQ(std::system((cmd + " >/dev/null 2>&1").c_str()), 0) << cmd;
    const std::string ports = dir_->path() + "/agg.ports";
    agg_ = new Process({FW_AGGREGATOR_BIN, "--grpc-listen", "127.0.0.1:0", "--http-listen",
                        "127.0.0.1:0", "--tls-cert", d + "/localhost.crt", "--tls-key",
                        d + "/localhost.key", "--tls-ca", d + "/ca.crt", "--port-file", ports},
                       dir_->path() + "/aggregator.log");
    ASSERT_TRUE(WaitUntil([&] { return ReadPort(ports, "grpc_port") > 0; }, seconds(20)))
        << ReadAll(dir_->path() + "/aggregator.log");
    grpc_ = "127.0.0.1:" + std::to_string(ReadPort(ports, "grpc_port"));
    http_ = "127.0.0.1:" + std::to_string(ReadPort(ports, "http_port"));
  }
  static void TearDownTestSuite() {
    delete agg_;
    delete dir_;
  }

  static std::string Fleet(const std::string& f) { return dir_->path() + "/fleet/" + f; }
  static std::string Other(const std::string& f) { return dir_->path() + "/other/" + f; }
  static std::string Metrics() {
    auto r = http::Get(http_, "/metrics", 5000);
    return r.ok() ? r->body : "";
  }

  // Opens a Connect stream, sends Hello{node}, and returns the stream's status once it ends, or
  // OK when the aggregator acknowledged the Hello.
  static grpc::Status HelloAs(std::shared_ptr<grpc::ChannelCredentials> creds,
                              const std::string& node) {
    auto stub = v1::Aggregator::NewStub(grpc::CreateChannel(grpc_, creds));
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + seconds(10));
    auto stream = stub->Connect(&ctx);
    v1::AgentMessage hello;
    hello.mutable_hello()->set_node(node);
    hello.mutable_hello()->set_session_id(42);
    stream->Write(hello);
    v1::AggregatorMessage in;
    if (stream->Read(&in) && in.has_ack()) {
      ctx.TryCancel();
      return grpc::Status::OK;
    }
    return stream->Finish();
  }

  static std::shared_ptr<grpc::ChannelCredentials> Creds(const std::string& cert,
                                                         const std::string& key,
                                                         const std::string& ca) {
    auto m = tls::LoadTlsFiles({cert, key, ca, false});
    EXPECT_TRUE(m.ok()) << m.status().ToString();
    return tls::ChannelCredentials(*m);
  }

  static TempDir* dir_;
  static Process* agg_;
  static std::string grpc_, http_;
};

TempDir* TlsIdentityTest::dir_ = nullptr;
Process* TlsIdentityTest::agg_ = nullptr;
std::string TlsIdentityTest::grpc_, TlsIdentityTest::http_;

TEST_F(TlsIdentityTest, ClientWithoutAFleetCertificateIsRefused) {
  // Plaintext to a TLS port.
  grpc::Status plain = HelloAs(grpc::InsecureChannelCredentials(), "node-a");
  EXPECT_FALSE(plain.ok());
  EXPECT_EQ(plain.error_code(), grpc::StatusCode::UNAVAILABLE) << plain.error_message();
  // TLS, the server verified, but no client certificate.
  grpc::SslCredentialsOptions anon;
  anon.pem_root_certs = ReadAll(Fleet("ca.crt"));
  grpc::Status anonymous = HelloAs(grpc::SslCredentials(anon), "node-a");
  EXPECT_FALSE(anonymous.ok());
  EXPECT_EQ(anonymous.error_code(), grpc::StatusCode::UNAVAILABLE) << anonymous.error_message();
  // A certificate named node-a, but from another CA.
  grpc::SslCredentialsOptions foreign;
  foreign.pem_root_certs = ReadAll(Fleet("ca.crt"));
  foreign.pem_cert_chain = ReadAll(Other("node-a.crt"));
  foreign.pem_private_key = ReadAll(Other("node-a.key"));
  grpc::Status impostor = HelloAs(grpc::SslCredentials(foreign), "node-a");
  EXPECT_FALSE(impostor.ok());
  EXPECT_EQ(impostor.error_code(), grpc::StatusCode::UNAVAILABLE) << impostor.error_message();

  // Each refused handshake is counted (gRPC logs it; common/tls counts it).
  EXPECT_TRUE(WaitUntil(
      [] {
        return Metric(Metrics(), "fabricwatch_tls_handshake_failures_total{listener=\"grpc\"}") >=
               3;
      },
      seconds(5)))
      << Metrics();
  const std::string m = Metrics();
  EXPECT_EQ(Metric(m, "fabricwatch_agents_connected"), 0) << m;
  EXPECT_EQ(m.find("node=\"node-a\""), std::string::npos) << m;
}

TEST_F(TlsIdentityTest, CertificateForNodeACannotReportAsNodeB) {
  const double before = std::max(
      0.0,
      Metric(Metrics(), "fabricwatch_ingest_protocol_errors_total{reason=\"identity_mismatch\"}"));
  auto creds = Creds(Fleet("node-a.crt"), Fleet("node-a.key"), Fleet("ca.crt"));
  grpc::Status as_b = HelloAs(creds, "node-b");
  EXPECT_EQ(as_b.error_code(), grpc::StatusCode::PERMISSION_DENIED) << as_b.error_message();
  EXPECT_NE(as_b.error_message().find("node-b"), std::string::npos) << as_b.error_message();

  const std::string m = Metrics();
  EXPECT_EQ(Metric(m, "fabricwatch_ingest_protocol_errors_total{reason=\"identity_mismatch\"}"),
            before + 1)
      << m;
  EXPECT_EQ(m.find("node=\"node-b\""), std::string::npos) << "node-b appeared:\n" << m;
  const std::string log = ReadAll(dir_->path() + "/aggregator.log");
  EXPECT_NE(log.find("claimed_node=\"node-b\" cert_names=\"node-a,node-a\""), std::string::npos)
      << log;

  // The same certificate may report as its own node.
  grpc::Status as_a = HelloAs(creds, "node-a");
  EXPECT_TRUE(as_a.ok()) << as_a.error_message();
}

TEST_F(TlsIdentityTest, RealAgentConnectsWithItsCertificateAndRefusesAnother) {
  TempDir work;
  const std::string data = FW_TESTDATA;
  auto agent_argv = [&](const std::string& cert, const std::string& node) {
    return std::vector<std::string>{FW_AGENT_BIN,
                                    "--aggregator",
                                    grpc_,
                                    "--node-name",
                                    node,
                                    "--tls-cert",
                                    Fleet(cert + ".crt"),
                                    "--tls-key",
                                    Fleet(cert + ".key"),
                                    "--tls-ca",
                                    Fleet("ca.crt"),
                                    "--http-listen",
                                    "127.0.0.1:0",
                                    "--probes",
                                    "false",
                                    "--heartbeat-interval",
                                    "500ms",
                                    "--hwloc-xml",
                                    data + "/hwloc/psmgmt-topo.jrc0386.xml",
                                    "--sysfs-root",
                                    data + "/sysfs/gpud-h100"};
  };
  // Its certificate names node-b, not the node it would report as: it refuses to start.
  Process wrong(agent_argv("node-b", "node-a"), work.path() + "/wrong.log");
  const int wrong_status = wrong.Wait(seconds(20));
  EXPECT_TRUE(WIFEXITED(wrong_status) && WEXITSTATUS(wrong_status) == 3) << wrong_status;
  EXPECT_NE(ReadAll(work.path() + "/wrong.log").find("does not name this node"), std::string::npos)
      << ReadAll(work.path() + "/wrong.log");

  Process agent(agent_argv("node-b", "node-b"), work.path() + "/agent.log");
  EXPECT_TRUE(WaitUntil(
      [&] {
        return Metrics().find("fabricwatch_agent_up{node=\"node-b\"} 1\n") != std::string::npos;
      },
      seconds(30)))
      << Metrics() << "\nagent log:\n"
      << ReadAll(work.path() + "/agent.log");
  EXPECT_NE(ReadAll(dir_->path() + "/aggregator.log").find("gRPC uses mTLS"), std::string::npos);
}

TEST(TlsFlagsTest, DaemonsRefusePlaintextUnlessAskedAndWarnWhenAsked) {
  TempDir work;
  Process agg({FW_AGGREGATOR_BIN, "--grpc-listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0"},
              work.path() + "/refused.log");
  const int agg_status = agg.Wait(seconds(20));
  EXPECT_TRUE(WIFEXITED(agg_status) && WEXITSTATUS(agg_status) == 3) << agg_status;
  EXPECT_NE(ReadAll(work.path() + "/refused.log").find("--insecure"), std::string::npos);

  const std::string ports = work.path() + "/p.json";
  Process plain({FW_AGGREGATOR_BIN, "--insecure", "--grpc-listen", "127.0.0.1:0", "--http-listen",
                 "127.0.0.1:0", "--port-file", ports},
                work.path() + "/plain.log");
  ASSERT_TRUE(WaitUntil([&] { return ReadPort(ports, "grpc_port") > 0; }, seconds(20)));
  const std::string log = ReadAll(work.path() + "/plain.log");
  EXPECT_NE(log.find("level=warn"), std::string::npos) << log;
  EXPECT_NE(log.find("plaintext (--insecure)"), std::string::npos) << log;
}

}  // namespace
}  // namespace fw::testing
