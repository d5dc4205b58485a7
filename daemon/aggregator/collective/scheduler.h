// Which collective jobs run when: groups of all GPUs inside a node, rail groups across leaves and
// rotating groups across leaves, each run once per interval within a fleet budget, never on a
// paused node. Pause and resume are per node, for a scheduler's prolog and epilog.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "common/mutex.h"

namespace fw::aggregator::collective {

struct CollectiveNode {
  std::string name;
  std::string leaf;  // empty when the fabric map does not place it
  int gpus = 0;      // in the inventory
  // GPUs NCCL can drive in a group across nodes: the count the agent announced with NCCL ready
  // (Hello.collective), else 0.
  int nccl_gpus = 0;
  uint64_t session = 0;  // the agent's session id: a new one is a restarted agent
};

struct JobSpec {
  std::string job_id;
  // intra_node | rail | rotating (Gloo) | nccl_rail | nccl_rotating | bisection | qualify
  std::string kind;
  std::string backend;               // nccl | gloo
  std::vector<std::string> members;  // rank order
  std::vector<uint32_t> member_gpus;  // NCCL across nodes: GPU ranks per member; else empty
  std::vector<uint32_t> devices;      // NCCL, one node: its CUDA devices (GPU search); else all
  std::string group;                 // stable name across runs, for SlowGroupTracker
  std::string shape;  // e.g. "rail/4", "nccl_rail/4x8": groups expected to perform alike
  uint64_t bytes = 0;
  uint32_t iterations = 0;
  std::string op = "all_reduce";  // all_reduce | all_gather
  double timeout_s = 0;           // rendezvous and per-operation bound on the agent; 0: its own
};

struct SchedulerConfig {
  int64_t interval_ns = 300'000'000'000;  // each group runs once per interval
  size_t max_in_flight = 2;               // fleet budget: jobs running at once
  size_t max_jobs_per_interval = 64;      // fleet budget: jobs started per interval
  uint64_t bytes = 1 << 20;               // <= 8 MiB (kDefaultMaxProbeBytes)
  uint32_t iterations = 20;
  std::string op = "all_reduce";  // the operation every scheduled job runs
  double op_timeout_s = 10;       // CollectiveJob.timeout_s
  size_t rotating_group_size = 8;
  bool intra_node = true;
  bool rail_groups = true;
  bool rotating_groups = true;
  // A rail or rotating group whose members all announced NCCL ready runs NCCL with the same number
  // of GPU ranks on every member (the fewest any member has); any other group runs Gloo.
  bool nccl_across_nodes = true;
};

// Nodes whose collective probes are paused. Thread-safe (the HTTP API writes, the tick reads).
class PauseSet {
 public:
  // Returns false when the node was already paused (resp. not paused).
  bool Pause(const std::string& node);
  bool Resume(const std::string& node);
  bool paused(const std::string& node) const;
  std::vector<std::string> list() const;

 private:
  mutable Mutex mu_;
  std::set<std::string> paused_ FW_GUARDED_BY(mu_);
};

// The tick thread owns it.
class CollectiveScheduler {
 public:
  explicit CollectiveScheduler(SchedulerConfig config, const PauseSet& pauses)
      : config_(config), pauses_(pauses) {}

  // Jobs to start now. At each interval's start the candidate groups are rebuilt from `nodes`
  // (rotating groups shift by one position per interval); then they start as the budget allows,
  // the group started longest ago (or never) first.
  // A group with a paused member is held back until the member is resumed or the interval ends.
  std::vector<JobSpec> Due(const std::vector<CollectiveNode>& nodes, int64_t now_ns);
  // A job ended (result, failure or timeout); frees its slot.
  void OnJobDone(const std::string& job_id);
  // Starts an extra job outside the schedule (bisection runs); it counts against max_in_flight.
  // An NCCL job with `gpus_per_member` > 0 gives every member that many GPU ranks.
  JobSpec Adhoc(std::vector<std::string> members, const std::string& kind,
                const std::string& backend = "gloo", uint32_t gpus_per_member = 0);
  size_t in_flight() const { return in_flight_.size(); }

 private:
  std::vector<JobSpec> BuildGroups(const std::vector<CollectiveNode>& nodes);
  std::string NextId();

  const SchedulerConfig config_;
  const PauseSet& pauses_;
  int64_t interval_start_ns_ = -1;
  uint64_t epoch_ = 0;
  uint64_t seq_ = 0;
  size_t started_this_interval_ = 0;
  std::vector<JobSpec> queue_;
  std::set<std::string> in_flight_;
  std::map<std::string, int64_t> last_started_;  // by group name, of the groups built last
};

}  // namespace fw::aggregator::collective
