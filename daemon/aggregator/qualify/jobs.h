// Qualification jobs: validation, the queue (overlapping sets wait, disjoint sets run side by
// side), the recent reports, and fabricwatch_qualification_result{node,suite}.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "common/status.h"
#include "daemon/aggregator/qualify/inputs.h"
#include "daemon/aggregator/qualify/suite.h"
#include "exporter/registry.h"

namespace fw::qualify {

struct QualifyJobRequest {
  std::vector<std::string> nodes;
  std::string profile;    // empty: "generic"
  std::string suite;      // empty: "quick"
  double timeout_s = 30;  // queueing included
};

class QualifyJobs {
 public:
  struct Options {
    size_t max_nodes = 4096;    // a larger set is refused
    size_t max_in_flight = 16;  // running and queued together; more are refused
    size_t history = 50;        // reports kept for GET /api/v1/qualifications
    double max_timeout_s = 600;
    double time_scale = 1.0;  // multiplies the suites' ramp and measure times (tests)
  };
  QualifyJobs(QualifyEnv& env, QualifyInputs& inputs, const Clock& clock,
              metrics::Registry& registry, Options options);
  ~QualifyJobs();

  // Validates, waits for overlapping runs to finish (within the timeout), runs the suite and
  // returns its report. Refusals (empty or oversized set, bad name, unknown profile or suite, too
  // many in flight) are kInvalidArgument / kResourceExhausted, logged and counted. Blocks.
  StatusOr<QualifyReport> Run(const QualifyJobRequest& request);
  // The same on a thread of its own; `done` runs on that thread (the gRPC reactor's path).
  void RunAsync(QualifyJobRequest request, std::function<void(StatusOr<QualifyReport>)> done);
  // The recent reports, newest first.
  std::vector<QualifyReport> Recent() const;
  // Ends running suites early (state "error") and joins the async threads. Idempotent.
  void Shutdown();

 private:
  Status Refuse(const char* reason, std::string message);
  void Publish(const QualifyReport& report);

  QualifyEnv& env_;
  QualifyInputs& inputs_;
  const Clock& clock_;
  Options options_;
  metrics::Family<metrics::Gauge>& result_;
  metrics::Family<metrics::Counter>& refused_;
  std::atomic<bool> stop_{false};

  mutable std::mutex mu_;
  std::condition_variable cv_;
  uint64_t next_id_ = 0;      // GUARDED_BY(mu_)
  uint64_t next_ticket_ = 0;  // GUARDED_BY(mu_)
  struct Entry {
    uint64_t ticket;
    std::string id;
    std::set<std::string> nodes;
    bool running = false;
  };
  std::vector<Entry> in_flight_;      // GUARDED_BY(mu_), in arrival order
  std::deque<QualifyReport> recent_;  // GUARDED_BY(mu_), newest first
  struct Worker {
    std::thread thread;
    std::shared_ptr<std::atomic<bool>> finished;
  };
  std::vector<Worker> workers_;  // GUARDED_BY(mu_)
};

}  // namespace fw::qualify
