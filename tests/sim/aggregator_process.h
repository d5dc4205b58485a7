// The aggregator under test: started by the simulator (and stopped by its PID) or an existing one,
// plus snapshots of its /metrics counters and /proc figures.
#pragma once

#include <sys/types.h>

#include <memory>
#include <optional>
#include <string>

#include "common/status.h"
#include "common/tls/tls_config.h"
#include "tests/sim/scorer.h"

namespace fw::sim {

struct AggregatorTarget {
  std::string bin;         // start this binary, or
  std::string grpc;        // attach: host:port of gRPC,
  std::string http;        //         host:port of HTTP,
  pid_t pid = 0;           //         and its PID (0: no CPU/RSS figures)
  std::string fabric_map;  // passed as --fabric-map when starting
  std::string work_dir;    // logs, port file and --state-dir when starting
  std::string extra_args;  // appended to the command line when starting (space-separated)
  // mTLS (--tls-dir): ca.crt, server.{crt,key} for a started aggregator (it must name
  // 127.0.0.1), and the simulator's client material (one certificate naming every simulated
  // node). Empty dir and nullopt: plaintext, the aggregator started with --insecure.
  std::string tls_dir;
  std::optional<tls::TlsMaterial> tls;
};

struct IngestSnapshot {
  double unix_s = 0;
  double results = 0;     // fabricwatch_probe_results_received_total, all transports
  double batches = 0;     // fabricwatch_ingest_batches_total
  double heartbeats = 0;  // fabricwatch_ingest_heartbeats_total
  double connected = 0;   // fabricwatch_agents_connected
  std::optional<ProcSample> proc;
};

class AggregatorUnderTest {
 public:
  static StatusOr<std::unique_ptr<AggregatorUnderTest>> StartOrAttach(const AggregatorTarget& t);
  ~AggregatorUnderTest();

  const std::string& grpc() const { return grpc_; }
  const std::string& http() const { return http_; }
  pid_t pid() const { return pid_; }
  const std::string& log_path() const { return log_path_; }

  StatusOr<IngestSnapshot> Snapshot() const;
  // GET /api/v1/findings: the body, NotFound while the endpoint does not exist (HTTP 404).
  StatusOr<std::string> Findings() const;
  // SIGTERM by PID, then SIGKILL after `grace_s`; only for an aggregator this object started.
  // Returns the exit status as waitpid reports it (0 when there is nothing to stop).
  int Stop(double grace_s);

 private:
  bool Exited();  // reaps the child when it has exited; REQUIRES: started_
  std::string grpc_, http_, log_path_;
  pid_t pid_ = 0;
  bool started_ = false;  // this object forked the aggregator and has not reaped it yet
  int exit_status_ = 0;
};

}  // namespace fw::sim
