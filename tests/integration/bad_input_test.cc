// Bad input against real daemons on loopback: garbage and slow clients on the gRPC and HTTP ports,
// a stream that breaks the protocol, and an agent whose aggregator is unreachable.
#include <arpa/inet.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <regex>
#include <thread>

#include "exporter/http_server.h"
#include "fabricwatch.grpc.pb.h"
#include "tests/integration/fleet.h"

namespace fw::testing {
namespace {

namespace v1 = fabricwatch::v1;
using std::chrono::milliseconds;
using std::chrono::seconds;

// Client sockets opened by a test, closed when it ends.
class Sockets {
 public:
  ~Sockets() {
    for (int fd : fds_) close(fd);
  }
  // A connected TCP socket to 127.0.0.1:port that first sends `bytes`; -1 on failure.
  int Open(int port, const std::string& bytes = "") {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    fds_.push_back(fd);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) return -1;
    size_t sent = 0;
    while (sent < bytes.size()) {
      ssize_t n = send(fd, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
      if (n <= 0) break;  // the server may close on garbage before reading it all
      sent += static_cast<size_t>(n);
    }
    return fd;
  }

 private:
  std::vector<int> fds_;
};

std::string RandomBytes(std::mt19937& rng, size_t n) {
  std::string s(n, '\0');
  for (auto& c : s) c = static_cast<char>(rng() & 0xff);
  return s;
}

// A GET that must answer within `limit`; returns the body, or "" when it failed or was late.
std::string GetWithin(const std::string& addr, const std::string& path, milliseconds limit) {
  auto start = std::chrono::steady_clock::now();
  auto r = http::Get(addr, path, static_cast<int>(limit.count()));
  auto took = std::chrono::steady_clock::now() - start;
  EXPECT_LE(took, limit) << path << " on " << addr;
  if (!r.ok() || r->status != 200) {
    ADD_FAILURE() << path << " on " << addr << ": "
                  << (r.ok() ? std::to_string(r->status) : r.status().ToString());
    return "";
  }
  return r->body;
}

// The value of one sample line, or -1 when the series is absent.
double MetricValue(const std::string& metrics, const std::string& series) {
  std::string line = "\n" + series + " ";
  auto pos = metrics.find(line);
  if (pos == std::string::npos) return -1;
  return std::strtod(metrics.c_str() + pos + line.size(), nullptr);
}

// Thread names (/proc/PID/task/*/comm, 15 characters at most) of a running process, with counts.
std::map<std::string, int> ThreadNames(pid_t pid) {
  std::map<std::string, int> names;
  std::error_code ec;
  for (const auto& t :
       std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/task", ec)) {
    std::ifstream in(t.path() / "comm");
    std::string name;
    if (std::getline(in, name)) ++names[name];
  }
  return names;
}

TEST(BadInputTest, GarbageAndSlowClientsOnBothPortsCrashNothingAndHangNobody) {
  TempDir dir;
  Fleet fleet(dir);
  fleet.StartAggregator();
  fleet.StartAgent("node-a");
  ASSERT_TRUE(WaitUntil([&] { return fleet.ConnectedCount() == 1; }, seconds(20)));
  int agent_http = fleet.AgentHttpPort("node-a");
  ASSERT_GT(agent_http, 0);
  int agg_http = std::stoi(fleet.http_.substr(fleet.http_.rfind(':') + 1));
  std::string agent_addr = "127.0.0.1:" + std::to_string(agent_http);

  // The agent's steady threads (docs/performance.md): one HTTP worker, so the slow clients below
  // are what that one worker must survive, the report loop on the main thread (no "fw-report"),
  // and of libgrpc's own threads only the default executor: its timers tick on fw-grpc-ee and
  // its resolver executor is stopped (daemon/agent/grpc_threads.h); the path tracer and the TCP
  // connect probes run on the prober's thread (no "fw-path-trace" or "fw-sched-slow"; bursts get
  // "fw-sched-burst" only while they run). A collective job may add its own threads for a while;
  // they are not counted.
  const std::map<std::string, int> steady = {
      {"fabricwatch-age", 1}, {"civetweb-master", 1}, {"civetweb-worker", 1},
      {"fw-uplink", 1},       {"fw-udp-prober", 1},   {"fw-responder", 1},
      {"fw-grpc-ee", 1},      {"default-executo", 1}};
  const std::map<std::string, int> threads = ThreadNames(fleet.agents_["node-a"]->pid());
  int counted = 0;
  std::string listing;
  for (const auto& [name, n] : threads) {
    listing += name + " x" + std::to_string(n) + "; ";
    if (auto it = steady.find(name); it != steady.end()) {
      EXPECT_LE(n, it->second) << name << " in " << listing;
      counted += n;
    }
  }
  EXPECT_EQ(threads.count("civetweb-worker") ? threads.at("civetweb-worker") : 0, 1) << listing;
  for (const char* gone : {"fw-report", "fw-path-trace", "fw-sched-slow", "grpc_global_tim",
                           "resolver-execut"}) {
    EXPECT_EQ(threads.count(gone), 0u) << gone << " in " << listing;
  }
  EXPECT_LE(counted, 8) << listing;

  std::mt19937 rng(20240601);
  Sockets held;
  // Slow clients that stay open for the rest of the test: a request cut off mid-header, a
  // connection that never says anything, an HTTP/2 preface that never finishes. On the
  // aggregator the HTTP counts stay below its worker count (see http::Server); the agent has one
  // worker and a 250 ms request timeout (daemon/agent/agent.cc), so its five slow clients hold it
  // about 1.25 s in all before the /metrics below is served.
  for (int i = 0; i < 12; ++i) held.Open(agg_http, "GET /metrics HTTP/1.1\r\nHost: x\r\n");
  for (int i = 0; i < 8; ++i) held.Open(agg_http);
  for (int i = 0; i < 3; ++i) held.Open(agent_http, "GET /metrics HTTP/1.1\r\nHost: x\r\n");
  for (int i = 0; i < 2; ++i) held.Open(agent_http);
  for (int i = 0; i < 50; ++i) held.Open(fleet.grpc_port_, "PRI * HTTP/2.0\r\n");
  for (int i = 0; i < 50; ++i) held.Open(fleet.grpc_port_);
  // Random bytes, each on its own connection.
  {
    Sockets garbage;
    for (int i = 0; i < 10; ++i) garbage.Open(agg_http, RandomBytes(rng, 4096));
    for (int i = 0; i < 10; ++i) garbage.Open(agent_http, RandomBytes(rng, 4096));
    for (int i = 0; i < 10; ++i) garbage.Open(fleet.grpc_port_, RandomBytes(rng, 64 << 10));
    std::this_thread::sleep_for(milliseconds(500));
  }

  // With all of that still open, other clients are served at once...
  std::string m = GetWithin(fleet.http_, "/metrics", milliseconds(2000));
  EXPECT_NE(m.find("fabricwatch_agent_up{node=\"node-a\"} 1\n"), std::string::npos) << m;
  GetWithin(fleet.http_, "/api/v1/nodes", milliseconds(2000));
  GetWithin(agent_addr, "/metrics", milliseconds(2000));
  // ...and a new agent can still open its gRPC session.
  fleet.StartAgent("node-b");
  EXPECT_TRUE(WaitUntil([&] { return fleet.ConnectedCount() == 2; }, seconds(20)))
      << fleet.Nodes().dump(2);

  // Malformed HTTP requests are counted, on both daemons.
  EXPECT_TRUE(WaitUntil(
      [&] {
        return MetricValue(fleet.Metrics(),
                           "fabricwatch_http_rejected_requests_total{code=\"400\"}") >= 10;
      },
      seconds(5)))
      << fleet.Metrics();
  auto am = http::Get(agent_addr, "/metrics", 2000);
  ASSERT_TRUE(am.ok());
  EXPECT_GE(MetricValue(am->body, "fabricwatch_http_rejected_requests_total{code=\"400\"}"), 10)
      << am->body;
  // The slow HTTP clients are timed out and counted too (civetweb answers a request cut off
  // mid-header with 400; a connection that never sends anything is closed without a status).
  EXPECT_TRUE(WaitUntil(
      [&] {
        return MetricValue(fleet.Metrics(),
                           "fabricwatch_http_rejected_requests_total{code=\"400\"}") >= 10 + 12;
      },
      milliseconds(http::Server::kRequestTimeoutMs + 5000)))
      << fleet.Metrics();

  EXPECT_TRUE(fleet.agg_->running());
  EXPECT_TRUE(fleet.agents_["node-a"]->running());
  EXPECT_NE(fleet.Metrics().find("fabricwatch_agent_up{node=\"node-a\"} 1\n"), std::string::npos);
}

TEST(BadInputTest, ProbeBatchBeforeHelloEndsOnlyThatStream) {
  TempDir dir;
  Fleet fleet(dir);
  fleet.StartAggregator();
  fleet.StartAgent("node-a");
  ASSERT_TRUE(WaitUntil([&] { return fleet.ConnectedCount() == 1; }, seconds(20)));

  auto channel = grpc::CreateChannel("127.0.0.1:" + std::to_string(fleet.grpc_port_),
                                     grpc::InsecureChannelCredentials());
  auto stub = v1::Aggregator::NewStub(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + seconds(10));
  auto stream = stub->Connect(&ctx);
  v1::AgentMessage batch;
  batch.mutable_probe_batch()->set_seq(1);
  ASSERT_TRUE(stream->Write(batch));
  v1::AggregatorMessage in;
  EXPECT_FALSE(stream->Read(&in)) << "the aggregator answered a stream without Hello: "
                                  << in.DebugString();
  grpc::Status st = stream->Finish();
  EXPECT_EQ(st.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << st.error_message();
  EXPECT_NE(st.error_message().find("Hello"), std::string::npos) << st.error_message();

  std::string m = fleet.Metrics();
  EXPECT_EQ(MetricValue(m, "fabricwatch_ingest_protocol_errors_total{reason=\"no_hello\"}"), 1)
      << m;
  // The well-behaved agent never noticed.
  EXPECT_NE(m.find("fabricwatch_agent_up{node=\"node-a\"} 1\n"), std::string::npos) << m;
  EXPECT_NE(m.find("fabricwatch_agents_connected 1\n"), std::string::npos) << m;
  auto am = http::Get("127.0.0.1:" + std::to_string(fleet.AgentHttpPort("node-a")), "/metrics");
  ASSERT_TRUE(am.ok());
  EXPECT_EQ(MetricValue(am->body, "fabricwatch_uplink_connected"), 1) << am->body;
  EXPECT_EQ(MetricValue(am->body, "fabricwatch_uplink_reconnects_total"), 0) << am->body;
}

TEST(BadInputTest, AgentWithoutAggregatorKeepsRunningLogsEachBackoffStepOnceAndSaysSo) {
  TempDir dir;
  Fleet fleet(dir);
  // A port nothing listens on: bound once to learn a free number, then released.
  int port = 0;
  {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    socklen_t len = sizeof a;
    getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
    port = ntohs(a.sin_port);
    close(fd);
  }
  fleet.StartAgent("node-a", 0, "127.0.0.1:" + std::to_string(port));
  std::string addr = "127.0.0.1:" + std::to_string(fleet.AgentHttpPort("node-a"));
  std::string m;
  ASSERT_TRUE(WaitUntil(
      [&] {
        auto r = http::Get(addr, "/metrics", 2000);
        m = r.ok() ? r->body : "";
        return MetricValue(m, "fabricwatch_uplink_connect_failures_total") >= 4;
      },
      seconds(30)))
      << m;
  EXPECT_EQ(MetricValue(m, "fabricwatch_uplink_connected"), 0) << m;
  EXPECT_TRUE(fleet.agents_["node-a"]->running());

  // One "reconnecting" line per backoff step, numbered 1, 2, 3, ... with growing delays.
  std::string log = fleet.AgentLog("node-a");
  std::regex step("msg=\"reconnecting\".* in_s=([0-9.]+) attempt=([0-9]+)");
  std::vector<int> attempts;
  std::vector<double> delays;
  for (auto it = std::sregex_iterator(log.begin(), log.end(), step); it != std::sregex_iterator();
       ++it) {
    delays.push_back(std::stod((*it)[1]));
    attempts.push_back(std::stoi((*it)[2]));
  }
  ASSERT_GE(attempts.size(), 3u) << log;
  for (size_t i = 0; i < attempts.size(); ++i)
    EXPECT_EQ(attempts[i], static_cast<int>(i) + 1) << log;
  EXPECT_LT(delays[0], delays[2]) << log;

  // Once an aggregator appears at that address, the agent connects by itself.
  fleet.StartAggregator(port);
  EXPECT_TRUE(WaitUntil([&] { return fleet.ConnectedCount() == 1; }, seconds(40)))
      << fleet.AgentLog("node-a");
}

// Runs `argv` to completion and returns its exit status; its output lands in `log`.
int RunToExit(std::vector<std::string> argv, const std::string& log) {
  Process p(std::move(argv), log);
  int st = p.Wait(seconds(20));
  return st >= 0 && WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

TEST(BadInputTest, BadConfigIsAClearErrorNamingTheKeyOrFile) {
  TempDir dir;
  std::string bad = dir.path() + "/bad.yaml";
  std::ofstream(bad) << "log-level: info\nbogus-key: 3\n";
  auto read = [](const std::string& path) {
    std::ifstream in(path);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  for (const char* bin : {FW_AGENT_BIN, FW_AGGREGATOR_BIN}) {
    std::string log = dir.path() + "/unknown.log";
    EXPECT_EQ(RunToExit({bin, "--config", bad}, log), 3) << bin;
    EXPECT_NE(read(log).find("'bogus-key' (line 2)"), std::string::npos) << read(log);
    std::filesystem::remove(log);
    EXPECT_EQ(RunToExit({bin, "--config", dir.path() + "/missing.yaml"}, log), 3) << bin;
    EXPECT_NE(read(log).find("missing.yaml: cannot read"), std::string::npos) << read(log);
    std::filesystem::remove(log);
  }
  // A value out of its range in the file, where the command line's range check does not apply.
  std::string queues = dir.path() + "/queues.yaml";
  std::ofstream(queues) << "grpc-queues: 9\n";
  std::string log = dir.path() + "/queues.log";
  EXPECT_EQ(RunToExit({FW_AGGREGATOR_BIN, "--insecure", "--config", queues, "--grpc-listen",
                       "127.0.0.1:0", "--http-listen", "127.0.0.1:0"},
                      log),
            3);
  EXPECT_NE(read(log).find("grpc-queues must be 0..4"), std::string::npos) << read(log);
}

}  // namespace
}  // namespace fw::testing
