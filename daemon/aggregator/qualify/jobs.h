// Qualification jobs: validation, the queue (overlapping sets wait, disjoint sets run side by
// side), the recent reports, and fabricwatch_qualification_result{node,suite}.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "common/mutex.h"
#include "common/status.h"
#include "daemon/aggregator/qualify/fleet_history.h"
#include "daemon/aggregator/qualify/inputs.h"
#include "daemon/aggregator/qualify/suite.h"
#include "exporter/registry.h"

namespace fw::qualify {

struct QualifyJobRequest {
  std::vector<std::string> nodes;
  std::string profile;    // empty: "generic"
  std::string suite;      // empty: "quick"
  double timeout_s = 30;  // queueing included
  // The scheduler's job id (Slurm's $SLURM_JOB_ID), or empty. Requests of one job for the same
  // set, suite and profile share one run: a Slurm prolog runs on every node of the job and each
  // copy asks for the whole set (docs/slurm.md).
  std::string job;
};

class QualificationStore;  // qualify_store.h

// Which stored reports GET /api/v1/qualifications lists; empty fields match everything.
struct ReportQuery {
  std::string id;
  std::string node;  // reports that judged this node
  std::string job;
  size_t limit = 50;
};

class QualifyJobs {
 public:
  struct Options {
    size_t max_nodes = 4096;    // a larger set is refused
    size_t max_in_flight = 16;  // running and queued together; more are refused
    size_t history = 50;        // reports kept for GET /api/v1/qualifications
    double max_timeout_s = 600;
    double time_scale = 1.0;  // multiplies the suites' ramp and measure times (tests)
    // A finished report of a job is answered again, without a run, to a request of the same job,
    // set, suite and profile for this long (a prolog that starts after the others finished).
    double job_reuse_s = 120;
  };
  // `store` (nullable: memory only) keeps every report in the findings history (SQLite).
  QualifyJobs(QualifyEnv& env, QualifyInputs& inputs, const Clock& clock,
              metrics::Registry& registry, Options options, QualificationStore* store = nullptr);
  ~QualifyJobs();

  // Validates, waits for overlapping runs to finish (within the timeout), runs the suite and
  // returns its report. Refusals (empty or oversized set, bad name, unknown profile or suite, too
  // many in flight) are kInvalidArgument / kResourceExhausted, logged and counted. Blocks.
  StatusOr<QualifyReport> Run(const QualifyJobRequest& request);
  // The same on a thread of its own; `done` runs on that thread (the gRPC reactor's path).
  void RunAsync(QualifyJobRequest request, std::function<void(StatusOr<QualifyReport>)> done);
  // The recent reports, newest first (kept in memory since the start).
  std::vector<QualifyReport> Recent() const;
  // The fleet's history per path class that new runs are held to.
  const FleetHistory& history() const { return history_; }
  // The reports that match `q`, newest first, as JSON: from the findings history when there is
  // one (so runs before a restart are listed too), else from memory.
  nlohmann::json Find(const ReportQuery& q) const;
  // Ends running suites early (state "error") and joins the async threads. Idempotent.
  void Shutdown();

 private:
  Status Refuse(const char* reason, std::string message);
  void Publish(const QualifyReport& report);
  // The run to join for `key`: a running or queued one, or a finished one young enough (nullptr
  // when none).
  struct Outcome;
  std::shared_ptr<Outcome> JoinableLocked(const std::string& key, int64_t now_ns) FW_REQUIRES(mu_);
  // Waits (releasing mu_ while blocked) for `o` to finish by `deadline` (monotonic); the report,
  // or a timeout report for `nodes` when it did not finish in time.
  QualifyReport AwaitLocked(const std::shared_ptr<Outcome>& o,
                            const std::vector<std::string>& nodes, int64_t deadline)
      FW_REQUIRES(mu_);
  // True while an entry that arrived before `ticket` (running or queued) shares a node with `set`.
  bool BlockedLocked(uint64_t ticket, const std::set<std::string>& set) const FW_REQUIRES(mu_);

  QualifyEnv& env_;
  QualifyInputs& inputs_;
  const Clock& clock_;
  Options options_;
  metrics::Family<metrics::Gauge>& result_;
  metrics::Family<metrics::Counter>& refused_;
  QualificationStore* store_;
  // Loaded from the store at construction, fed by every finished run (fleet_history.h).
  FleetHistory history_;
  metrics::Counter& history_skipped_;
  std::atomic<bool> stop_{false};

  mutable Mutex mu_;
  CondVar cv_;
  uint64_t next_id_ FW_GUARDED_BY(mu_) = 0;
  uint64_t next_ticket_ FW_GUARDED_BY(mu_) = 0;
  struct Entry {
    uint64_t ticket;
    std::string id;
    std::set<std::string> nodes;
    bool running = false;
    std::string key;  // JobKey(): empty without a job
    std::shared_ptr<Outcome> outcome;
  };
  struct Outcome {  // its fields after construction: under mu_
    std::string id;
    bool done = false;
    int64_t finished_ns = 0;  // monotonic
    QualifyReport report;
  };
  // Finished runs of jobs, for job_reuse_s, by key.
  std::vector<std::pair<std::string, std::shared_ptr<Outcome>>> finished_jobs_ FW_GUARDED_BY(mu_);
  std::vector<Entry> in_flight_ FW_GUARDED_BY(mu_);      // in arrival order
  std::deque<QualifyReport> recent_ FW_GUARDED_BY(mu_);  // newest first
  struct Worker {
    std::thread thread;
    std::shared_ptr<std::atomic<bool>> finished;
  };
  std::vector<Worker> workers_ FW_GUARDED_BY(mu_);
};

}  // namespace fw::qualify
