// Starting, probing and stopping the aggregator under test.
#include "tests/sim/aggregator_process.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <sstream>
#include <vector>

#include "common/clock.h"
#include "exporter/http_client.h"

namespace fw::sim {

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
                                   "--port-file=" + port_file,
                                   "--log-level=warn"};
  if (!t.fabric_map.empty()) argv.push_back("--fabric-map=" + t.fabric_map);
  std::istringstream extra(t.extra_args);
  for (std::string x; extra >> x;) argv.push_back(x);
  a->process_ = std::make_unique<testing::Process>(argv, a->log_path_);
  if (a->process_->pid() <= 0) return Status::Internal("fork failed for " + t.bin);
  a->pid_ = a->process_->pid();
  int grpc_port = -1, http_port = -1;
  testing::WaitUntil(
      [&] {
        grpc_port = testing::ReadPort(port_file, "grpc_port");
        http_port = testing::ReadPort(port_file, "http_port");
        return (grpc_port > 0 && http_port > 0) || !a->process_->running();
      },
      std::chrono::seconds(20));
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

int AggregatorUnderTest::Stop(double grace_s) {
  if (!process_) return 0;
  int st = process_->Stop(std::chrono::milliseconds(static_cast<int64_t>(grace_s * 1000)));
  process_.reset();
  return st;
}

}  // namespace fw::sim
