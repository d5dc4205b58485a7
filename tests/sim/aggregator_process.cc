// Starting, probing and stopping the aggregator under test.
#include "tests/sim/aggregator_process.h"

#include <fcntl.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "common/http/http_client.h"

namespace fw::sim {

namespace {

// Reads one port from the {"grpc_port": N, "http_port": M} file; -1 while absent or partial.
int ReadPort(const std::string& path, const char* key) {
  std::ifstream in(path);
  if (!in) return -1;
  std::stringstream ss;
  ss << in.rdbuf();
  auto j = nlohmann::json::parse(ss.str(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.contains(key) || !j[key].is_number_integer()) return -1;
  return j[key].get<int>();
}

}  // namespace

StatusOr<std::unique_ptr<AggregatorUnderTest>> AggregatorUnderTest::StartOrAttach(
    const AggregatorTarget& t) {
  auto a = std::unique_ptr<AggregatorUnderTest>(new AggregatorUnderTest());
  if (t.bin.empty()) {
    if (t.grpc.empty() || t.http.empty()) {
      return Status::InvalidArgument("give --aggregator-bin, or both --grpc and --http");
    }
    a->grpc_ = t.grpc;
    a->http_ = t.http;
    a->pid_ = t.pid;
    return a;
  }
  struct stat st {};
  if (::stat(t.bin.c_str(), &st) != 0 || !(st.st_mode & S_IXUSR)) {
    return Status::NotFound("aggregator binary " + t.bin + " is missing or not executable");
  }
  std::string port_file = t.work_dir + "/ports.json";
  a->log_path_ = t.work_dir + "/aggregator.log";
  // A port file left by an earlier run in the same directory would point at a dead aggregator.
  if (::unlink(port_file.c_str()) != 0 && errno != ENOENT) {
    return Status::FailedPrecondition("cannot remove stale " + port_file + ": " +
                                      std::strerror(errno));
  }
  std::vector<std::string> argv = {t.bin,
                                   "--grpc-listen=127.0.0.1:0",
                                   "--http-listen=127.0.0.1:0",
                                   "--state-dir=" + t.work_dir + "/state",
                                   "--port-file=" + port_file};
  if (t.tls_dir.empty()) {
    argv.push_back("--insecure");
  } else {
    argv.push_back("--tls-cert=" + t.tls_dir + "/server.crt");
    argv.push_back("--tls-key=" + t.tls_dir + "/server.key");
    argv.push_back("--tls-ca=" + t.tls_dir + "/ca.crt");
  }
  if (!t.fabric_map.empty()) argv.push_back("--fabric-map=" + t.fabric_map);
  // The aggregator logs at warn unless the extra flags name a level (`--log-level debug` shows
  // the analyzer's per-tick timeline).
  std::istringstream extra(t.extra_args);
  bool level = false;
  for (std::string x; extra >> x;) {
    level = level || x.starts_with("--log-level");
    argv.push_back(x);
  }
  if (!level) argv.push_back("--log-level=warn");
  int log_fd = ::open(a->log_path_.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (log_fd < 0) {
    return Status::FailedPrecondition("cannot open " + a->log_path_ + ": " + std::strerror(errno));
  }
  std::vector<char*> args;
  for (auto& x : argv) args.push_back(x.data());
  args.push_back(nullptr);
  pid_t parent = ::getpid();
  pid_t pid = ::fork();
  if (pid < 0) {
    int e = errno;
    ::close(log_fd);
    return Status::Unavailable(std::string("fork: ") + std::strerror(e));
  }
  if (pid == 0) {
    // The aggregator must not outlive a simulator that crashes or is killed.
    if (::prctl(PR_SET_PDEATHSIG, SIGTERM) != 0 || ::getppid() != parent) _exit(126);
    if (::dup2(log_fd, 1) < 0 || ::dup2(log_fd, 2) < 0) _exit(126);
    ::execv(args[0], args.data());
    _exit(127);
  }
  ::close(log_fd);
  a->pid_ = pid;
  a->started_ = true;
  int grpc_port = -1, http_port = -1;
  for (int i = 0; i < 400 && !a->Exited(); ++i) {  // up to 20 s
    grpc_port = ReadPort(port_file, "grpc_port");
    http_port = ReadPort(port_file, "http_port");
    if (grpc_port > 0 && http_port > 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  if (grpc_port <= 0 || http_port <= 0) {
    return Status::Unavailable("the aggregator did not write its ports within 20 s; see " +
                               a->log_path_);
  }
  a->grpc_ = "127.0.0.1:" + std::to_string(grpc_port);
  a->http_ = "127.0.0.1:" + std::to_string(http_port);
  return a;
}

AggregatorUnderTest::~AggregatorUnderTest() { Stop(5); }

StatusOr<IngestSnapshot> AggregatorUnderTest::Snapshot() const {
  IngestSnapshot s;
  auto r = http::Get(http_, "/metrics", 10000);
  if (!r.ok()) return r.status();
  if (r->status != 200) {
    return Status::Unavailable("/metrics answered HTTP " + std::to_string(r->status));
  }
  s.unix_s = static_cast<double>(RealClock::Get().WallNanos()) * 1e-9;
  s.results = SumMetric(r->body, "fabricwatch_probe_results_received_total").value_or(0);
  s.batches = SumMetric(r->body, "fabricwatch_ingest_batches_total").value_or(0);
  s.heartbeats = SumMetric(r->body, "fabricwatch_ingest_heartbeats_total").value_or(0);
  s.connected = SumMetric(r->body, "fabricwatch_agents_connected").value_or(0);
  if (pid_ > 0) {
    auto p = ReadProc(pid_);
    if (p.ok()) s.proc = *p;
  }
  return s;
}

StatusOr<std::string> AggregatorUnderTest::Findings() const {
  auto r = http::Get(http_, "/api/v1/findings", 10000);
  if (!r.ok()) return r.status();
  if (r->status == 404) return Status::NotFound("/api/v1/findings does not exist (HTTP 404)");
  if (r->status != 200) {
    return Status::Unavailable("/api/v1/findings answered HTTP " + std::to_string(r->status));
  }
  return r->body;
}

bool AggregatorUnderTest::Exited() {
  if (!started_) return true;
  int st = 0;
  pid_t r = ::waitpid(pid_, &st, WNOHANG);
  if (r == pid_ || (r < 0 && errno == ECHILD)) {
    started_ = false;
    exit_status_ = r == pid_ ? st : -1;
    return true;
  }
  return false;
}

int AggregatorUnderTest::Stop(double grace_s) {
  if (!started_) return exit_status_;
  if (!Exited() && ::kill(pid_, SIGTERM) != 0 && errno != ESRCH) {
    spdlog::warn("msg=\"kill SIGTERM failed\" pid={} error=\"{}\"", pid_, std::strerror(errno));
  }
  auto deadline = std::chrono::steady_clock::now() +
                  std::chrono::milliseconds(static_cast<int64_t>(grace_s * 1000));
  while (!Exited() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (started_) {
    spdlog::warn("msg=\"aggregator ignored SIGTERM; killing\" pid={}", pid_);
    if (::kill(pid_, SIGKILL) != 0 && errno != ESRCH) {
      spdlog::error("msg=\"kill SIGKILL failed\" pid={} error=\"{}\"", pid_, std::strerror(errno));
    }
    int st = 0;
    if (::waitpid(pid_, &st, 0) == pid_) exit_status_ = st;
    started_ = false;
  }
  return exit_status_;
}

}  // namespace fw::sim
