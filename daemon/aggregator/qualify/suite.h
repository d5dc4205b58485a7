// One qualification run: the time-boxed suite over a set of nodes and the report it produces.
// The aggregator is reached through QualifyEnv (a seam, so the suite's rules are unit-tested with
// a fake fleet), and probe results through QualifyInputs.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/clock.h"
#include "common/status.h"
#include "daemon/aggregator/analysis/tracked_finding.h"
#include "daemon/aggregator/model/name_interner.h"
#include "daemon/aggregator/qualify/burst_schedule.h"
#include "daemon/aggregator/qualify/fleet_history.h"
#include "daemon/aggregator/qualify/inputs.h"
#include "daemon/aggregator/qualify/profile.h"
#include "daemon/aggregator/qualify/verdicts.h"

namespace fw::qualify {

// How hard the mesh step probes. Rates are per flow and ordered pair.
struct SuiteSpec {
  std::string name;
  double rate_pps = 0;
  uint32_t flows = 1;
  // The overlay reaches the agents with the next re-plan (a tick or two); the ramp waits for
  // `ramp_coverage` of the pairs to report, at most `ramp_max_s`, and is not judged.
  double ramp_max_s = 0;
  double ramp_coverage = 0.9;
  double measure_s = 0;
  // The bandwidth step (docs/qualify.md): bursts of bw_bytes in rounds that keep every NIC in at
  // most one burst; a burst not done in bw_timeout_s is reported lost. A round waits for its
  // results at most bw_timeout_s + bw_round_slack_s (the plan's way to the agents, the batch back).
  uint64_t bw_bytes = 8u << 20;
  double bw_timeout_s = 2;
  double bw_round_slack_s = 4;
  // The collective step (docs/qualify.md): one Gloo all-reduce of allreduce_bytes over the set,
  // allreduce_iterations timed iterations; its result is waited for at most allreduce_wait_s.
  uint64_t allreduce_bytes = 1u << 20;
  uint32_t allreduce_iterations = 5;
  double allreduce_wait_s = 10;
};
// "quick" (the default; a Slurm prolog) or "full". Unknown names fail with kInvalidArgument.
StatusOr<SuiteSpec> FindSuite(const std::string& name);

struct NodeResult {
  std::string node;
  Verdict verdict = Verdict::kPass;
  std::vector<std::string> reasons;
};

struct PairResult {
  std::string src, dst;
  Verdict verdict = Verdict::kPass;
  std::vector<std::string> reasons;
};

struct StepResult {
  std::string name;
  std::string state;  // done | skipped | timeout
  double duration_s = 0;
  std::string note;
};

struct QualifyReport {
  std::string id;
  std::string job;  // the scheduler's job id the request named (a Slurm prolog's), or empty
  std::string suite;
  std::string profile;
  std::string state = "done";  // done | timeout | error
  std::string note;            // why it is not done
  int64_t requested_wall_ns = 0;
  int64_t started_wall_ns = 0;
  int64_t finished_wall_ns = 0;
  double queued_s = 0;
  double duration_s = 0;          // from start (after the queue) to the end
  std::vector<NodeResult> nodes;  // in request order
  std::vector<PairResult> pairs;  // only pairs not explained by a failed node
  std::vector<StepResult> steps;
  int exit_code = 3;  // 0 pass, 1 warn, 2 fail, 3 could not qualify
  // Per path class ("intra_leaf", "inter_leaf", "unknown"), the median RTT p99 of the pairs whose
  // both ends passed: what this run adds to the fleet's history (fleet_history.h). Finished runs
  // only; a class without such a pair is absent.
  struct ClassMedian {
    double rtt_p99_s = 0;
    size_t pairs = 0;
  };
  std::map<std::string, ClassMedian> path_classes;
};

// How a collective job the suite started ended (QualifyEnv::AllReduceOutcome).
struct CollectiveOutcome {
  // Per member that answered with an error: the node and its error.
  std::vector<std::pair<std::string, std::string>> errors;
  std::vector<std::string> missing;  // members with no answer (the orchestrator gave up on them)
  double busbw_bps = 0;              // the slowest member's bus bandwidth; 0 when any failed
  // The fleet's last Gloo group across nodes at the same bytes (the collective stage's rotating
  // groups), bit/s; 0: none ran yet.
  double history_busbw_bps = 0;
};

// What the suite needs from the rest of the aggregator. Implemented by the aggregator; the tests
// use a fake.
class QualifyEnv {
 public:
  virtual ~QualifyEnv() = default;
  struct AgentStatus {
    bool known = false;  // an agent for this node has said Hello since the aggregator started
    bool up = false;     // connected and heard from within the heartbeat timeout
    double silent_s = 0;
  };
  // One status per node, in order (one pass over the fleet, however large the set).
  virtual std::vector<AgentStatus> Agents(const std::vector<std::string>& nodes) const = 0;
  virtual std::vector<analysis::TrackedFinding> ActiveFindings() const = 0;
  // Starts dense probing among `nodes` at the suite's rate for run `id` (the plan stage's
  // overlay; over UDP, and over RDMA UD between nodes that both have RDMA), or ends it when
  // `nodes` is empty.
  virtual void SetMesh(const std::string& id, const std::vector<std::string>& nodes,
                       const SuiteSpec& suite) = 0;
  virtual aggregator::NodeId IdOf(const std::string& node) = 0;
  // Asks the round's senders for their bursts now (the plan stage's overlay, ProbePlan.bursts),
  // each once for `round` (non-zero, unique); ends the request when `bursts` is empty. Each burst
  // comes back as a tcp_bw result with seq == round.
  virtual void SetBursts(const std::string& id, const BurstRound& bursts, uint64_t round,
                         const SuiteSpec& suite) = 0;
  // Per node, in order: empty when its agent announced RDMA ports (Hello), so the suite's RDMA
  // step can probe it; else why not ("unavailable: no RDMA devices", as the agent said).
  virtual std::vector<std::string> RdmaUnavailable(const std::vector<std::string>& nodes) const {
    return std::vector<std::string>(nodes.size(), "the aggregator tracks no RDMA ports");
  }
  // As SetBursts, for RDMA RC write bursts on the first rail of each pair; each comes back as an
  // rdma_rc result with seq == round (none when the burst failed: RC retransmits, so a failure is
  // a broken connection, not loss).
  virtual void SetRdmaRcBursts(const std::string& /*id*/, const BurstRound& /*bursts*/,
                               uint64_t /*round*/, const SuiteSpec& /*suite*/) {}
  // The fabric map's class of the path between two nodes: "intra_leaf", "inter_leaf" or
  // "unknown" (no map, or a node outside it).
  virtual std::string PathClassOf(const std::string& /*a*/, const std::string& /*b*/) {
    return "unknown";
  }
  // Starts one Gloo all-reduce over `nodes` (in rank order) through the collective stage and
  // returns its job id; an error's message says why none can run (no collective stage, or no
  // node set of two or more).
  virtual StatusOr<std::string> StartAllReduce(const std::vector<std::string>& /*nodes*/,
                                               uint64_t /*bytes*/, uint32_t /*iterations*/) {
    return Status::Unavailable("this aggregator runs no collective stage");
  }
  // The job's outcome once every member answered or the stage gave up on it; nullopt meanwhile.
  virtual std::optional<CollectiveOutcome> AllReduceOutcome(const std::string& /*job_id*/) {
    return std::nullopt;
  }
  // The collective stage's scheduled jobs on the set (docs/qualify.md, "Quiet fabric"): pauses
  // the schedule on `nodes` and returns those it paused (not the ones paused before, e.g. by a
  // Slurm prolog); resumes those; whether a scheduled job with a member among `nodes` is in
  // flight.
  virtual std::vector<std::string> PauseCollectives(const std::vector<std::string>& /*nodes*/) {
    return {};
  }
  virtual void ResumeCollectives(const std::vector<std::string>& /*nodes*/) {}
  virtual bool CollectivesRunningOn(const std::vector<std::string>& /*nodes*/) { return false; }
  // Abandons a job whose outcome the suite no longer waits for.
  virtual void EndAllReduce(const std::string& /*job_id*/) {}
};

struct SuiteRequest {
  std::string id;
  std::vector<std::string> nodes;
  QualifyProfile profile;
  SuiteSpec suite;
  int64_t deadline_ns = 0;  // monotonic; the suite stops and reports "timeout" here
  // The fleet's history by path class (FleetHistory::Baselines); empty: not judged against it.
  std::map<std::string, PathClassBaseline> fleet_baseline = {};
};

// Runs every step in order on the calling thread (sleeping while the mesh probes) and returns the
// report. Returns early, state "error", when `*stop` becomes true.
QualifyReport RunSuite(QualifyEnv& env, QualifyInputs& inputs, const Clock& clock,
                       const SuiteRequest& req, const std::atomic<bool>& stop);

// The finding kinds a node's own local checks raise (DESIGN.md, node hardware).
bool IsLocalCheckKind(const std::string& kind);

}  // namespace fw::qualify
