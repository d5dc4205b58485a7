// The aggregator's collective stage: schedules jobs, carries their rendezvous, gathers each
// member's result, judges groups (SlowGroupTracker), bisects a group that turned slow and turns
// its culprits into collective_slow findings. gRPC-free: the aggregator sends what Tick returns
// and feeds in what agents send.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "daemon/aggregator/collective/arrivals.h"
#include "daemon/aggregator/collective/bisection.h"
#include "daemon/aggregator/collective/gpu_search.h"
#include "daemon/aggregator/collective/kv_service.h"
#include "daemon/aggregator/collective/scheduler.h"
#include "daemon/aggregator/collective/slow_group.h"

namespace fw::aggregator::collective {

struct OrchestratorConfig {
  SchedulerConfig schedule;
  SlowGroupConfig slow;
  BisectionConfig bisect;
  KvServiceOptions kv;
  int64_t job_timeout_ns = 120'000'000'000;  // a job whose members have not all answered fails
};

// A finding of kind collective_slow.
struct CollectiveSlowFinding {
  std::string location;  // "node h5", "gpu h5/GPU3", "link leaf2-spine", "link leaf2-leaf3"
  std::string node;      // the node, for a node culprit
  std::string cause;
  std::string group;   // the group that was slow
  std::string leaf_a;  // a link culprit: a leaf's uplinks (leaf_b empty) or the leaf pair
  std::string leaf_b;
  double measured_bps = 0;
  double expected_bps = 0;
  // A late host: "arrives 5.0 ms late in 18 of 20 iterations", with the numbers; else empty/0.
  std::string detail;
  double late_s = 0;
  int late_iterations = 0;
  int iterations = 0;
  std::string gpu;  // inside `node`: "GPU3", or "GPU1-GPU2" for the link between two; else empty
};

// One CollectiveJob for one member.
struct OutboundJob {
  std::string node;
  JobSpec job;
};

struct OrchestratorCounters {
  uint64_t runs = 0;        // jobs completed
  uint64_t failures = 0;    // jobs that failed or timed out
  uint64_t skipped = 0;     // jobs a member skipped (its GPUs were busy): neither run nor failed
  uint64_t bisections = 0;  // bisections started
  uint64_t findings = 0;
  // Last group busbw per job kind (Gloo and NCCL groups across nodes are different kinds).
  std::map<std::string, double> busbw_bps_by_kind;
};

// How an on-demand job ended (CollectiveOrchestrator::StartOnDemand).
struct OnDemandOutcome {
  std::map<std::string, std::string> errors;  // by member that answered with an error
  std::vector<std::string> missing;           // members without an answer at the job's timeout
  double busbw_bps = 0;                       // the slowest member's; 0 when the job failed
  double history_busbw_bps = 0;  // LastAcrossNodesBusbw at the job's bytes, when it completed
};

// Not thread-safe except where noted: the aggregator drives it from one thread (or one mutex).
class CollectiveOrchestrator {
 public:
  explicit CollectiveOrchestrator(OrchestratorConfig config = {});

  PauseSet& pauses() { return pauses_; }  // thread-safe

  struct TickOutput {
    std::vector<OutboundJob> jobs;
    std::vector<KvDelivery> kv;
    std::vector<CollectiveSlowFinding> findings;
  };
  // Starts due jobs and bisection runs, fails jobs past their timeout, expires rendezvous waits.
  TickOutput Tick(const std::vector<CollectiveNode>& nodes, int64_t now_ns);
  std::vector<KvDelivery> OnKvRequest(const std::string& node, const std::string& key,
                                      std::string value, int64_t now_ns);
  // A member's CollectiveResult (busbw in bit/s; `times`: its measured iterations, for per-rank
  // arrivals). Findings that the completed job produced.
  std::vector<CollectiveSlowFinding> OnResult(const std::string& node, const std::string& job_id,
                                              double busbw_bps, double latency_s,
                                              const std::string& error, MemberTimes times = {});

  // Starts one Gloo job over `members` (rank order) now, outside the schedule and the slow-group
  // tracking (a qualification's all-reduce); it counts in the fleet's in-flight budget while it
  // runs. The job's id is that of the returned jobs. Its outcome waits for TakeOnDemand.
  TickOutput StartOnDemand(std::vector<std::string> members, uint64_t bytes, uint32_t iterations,
                           int64_t now_ns);
  // The outcome of a completed on-demand job, once; nullopt while it runs (or when unknown).
  std::optional<OnDemandOutcome> TakeOnDemand(const std::string& job_id);
  // Ends an on-demand job nobody waits for any more (its late results are dropped).
  void Abandon(const std::string& job_id);
  // The busbw of the last scheduled Gloo group across nodes (a rotating group) when it moved
  // `bytes` per operation, bit/s; 0 when none did yet.
  double LastAcrossNodesBusbw(uint64_t bytes) const;

  // Groups whose run ended a slow spell since the last call (their findings may resolve).
  std::vector<std::string> TakeRecovered();
  const OrchestratorCounters& counters() const { return counters_; }
  size_t active_bisections() const { return bisections_.size(); }
  size_t jobs_in_flight() const { return jobs_.size(); }
  // Whether a scheduled job (not an on-demand one) with a member in `nodes` is in flight.
  bool ScheduledJobOn(const std::vector<std::string>& nodes) const;

 private:
  struct ActiveJob {
    JobSpec spec;
    int64_t started_ns = 0;
    std::map<std::string, double> busbw;       // by member
    std::map<std::string, MemberTimes> times;  // by member
    double latency_s = 0;
    bool failed = false;
    bool skipped = false;    // a member skipped it (busy GPUs)
    uint64_t bisection = 0;  // non-zero: a run of that bisection
    uint64_t run_id = 0;
    bool on_demand = false;
    std::map<std::string, std::string> errors;  // by member
  };
  struct ActiveBisection {
    std::string group;
    std::unique_ptr<Bisection> search;
    std::string backend;           // the slow group's: its runs use the same
    uint32_t gpus_per_member = 0;  // NCCL: GPU ranks per member, as in the slow group
    // A slow intra-node group: GPU pairs on `node` instead of `search`.
    std::unique_ptr<GpuSearch> gpus;
    std::string node;
  };
  void StartJob(JobSpec spec, int64_t now_ns, TickOutput& out, uint64_t bisection = 0,
                uint64_t run_id = 0);
  std::vector<CollectiveSlowFinding> Complete(ActiveJob job);
  void StartBisection(const ActiveJob& job, const GroupVerdict& v);
  std::vector<CollectiveSlowFinding> Harvest(uint64_t id);

  const OrchestratorConfig config_;
  PauseSet pauses_;
  CollectiveScheduler scheduler_;
  KvService kv_;
  SlowGroupTracker tracker_;
  std::map<std::string, std::string> leaf_of_;  // node -> leaf, from the last Tick
  std::map<std::string, int> nccl_gpus_of_;     // node -> usable NCCL GPUs, from the last Tick
  std::map<std::string, int> gpus_of_;          // node -> GPUs in its inventory, from the last Tick
  // Nodes whose NCCL failed in a job (an "nccl: ..." state error) by the session they had then:
  // left out of NCCL groups across nodes until an NCCL job on them succeeds (their intra-node
  // group) or their agent starts a new session, whatever their Hello said.
  std::map<std::string, uint64_t> nccl_failed_;
  std::map<std::string, uint64_t> session_of_;  // node -> agent session, from the last Tick
  std::map<std::string, ActiveJob> jobs_;       // by job id
  std::map<uint64_t, ActiveBisection> bisections_;
  std::map<std::string, std::vector<std::string>> healthy_members_;  // by group, last healthy run
  std::vector<std::string> recovered_;
  std::map<std::string, OnDemandOutcome> on_demand_done_;  // by job id, until taken
  std::vector<std::string> on_demand_order_;               // completion order, to bound the map
  uint64_t next_bisection_ = 1;
  int64_t now_ns_ = 0;
  OrchestratorCounters counters_;
};

}  // namespace fw::aggregator::collective
