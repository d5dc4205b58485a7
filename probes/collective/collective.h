// One interface for collective probes over any backend (Gloo, NCCL): a group, a rank, a rendezvous
// through a KvStore, then an operation that returns per-iteration times, each rank's arrival and
// exit times, and algorithm and bus bandwidth (nccl-tests definitions, docs/collectives.md).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace fw::collective {

enum class OpKind { kAllReduce, kAllGather, kReduceScatter };

std::string_view OpKindName(OpKind kind);  // "all_reduce", "all_gather", "reduce_scatter"

// nccl-tests (doc/PERFORMANCE.md): busbw = algbw x factor, where the factor is 2(n-1)/n for
// all-reduce and (n-1)/n for all-gather and reduce-scatter. 0 for fewer than 2 ranks.
double BusBandwidthFactor(OpKind kind, int ranks);

// Who takes part. The group id is unique per run and prefixes every rendezvous key.
struct GroupSpec {
  std::string group_id;
  int size = 0;   // ranks in the group
  int rank = -1;  // this member's first rank (NCCL: its first local GPU's rank)
};

Status ValidateGroup(const GroupSpec& group);

// The prefix of every rendezvous key of this group in the KvStore: "collective/<group id>/". The
// owner of the store erases it when the group's run is over.
std::string GroupKeyPrefix(const GroupSpec& group);

// What to run. `bytes` follows nccl-tests' "size": the buffer a rank holds after the operation
// (all-reduce: the reduced buffer; all-gather: the gathered output of all ranks). It is rounded
// down to a whole number of 4-byte elements per rank.
struct OpSpec {
  OpKind kind = OpKind::kAllReduce;
  uint64_t bytes = 1 << 20;
  int iterations = 20;
  int warmup = 5;
  // Bound on one operation; a member that does not take part by then fails the run.
  std::chrono::milliseconds timeout{10000};
};

inline constexpr uint64_t kDefaultMaxProbeBytes = 8ull << 20;  // the probe's size ceiling

Status ValidateOp(const OpSpec& op, int ranks, uint64_t max_bytes = 1ull << 30);

// One measured operation on one rank. Arrival and exit are that rank's CLOCK_MONOTONIC; they are
// compared across ranks only through the exit alignment in SummarizeGroup.
struct IterationSample {
  int64_t arrive_ns = 0;  // the rank entered the operation
  int64_t exit_ns = 0;    // the operation completed on this rank
  double op_seconds = 0;  // the backend's own timing (host clock for Gloo, CUDA events for NCCL)
};

struct RankResult {
  std::string backend;  // "gloo" | "nccl"
  std::string group_id;
  int rank = -1;
  int ranks = 0;
  OpKind kind = OpKind::kAllReduce;
  uint64_t bytes = 0;
  std::vector<IterationSample> iterations;  // measured ones only; warm-up is left out
  double median_seconds = 0;
  double min_seconds = 0;
  double algbw_bytes_per_s = 0;  // bytes / median_seconds
  double busbw_bytes_per_s = 0;  // algbw x BusBandwidthFactor
};

// The backend seam. One Communicator is one process's membership in a connected group: Gloo holds
// one rank, NCCL one rank per local GPU. Not thread-safe; one thread drives it.
class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual std::string_view backend() const = 0;
  virtual const GroupSpec& group() const = 0;
  // The global ranks this communicator drives, in the order RunOnce fills samples.
  virtual std::vector<int> local_ranks() const = 0;
  // Allocates and fills buffers for `op` (validated by the caller).
  virtual Status Prepare(const OpSpec& op) = 0;
  // Runs the prepared operation once on every local rank and writes one sample per local rank.
  // Fails (Unavailable) when a member does not take part within op.timeout; the communicator is
  // then unusable and every later call fails with FailedPrecondition.
  virtual Status RunOnce(std::span<IterationSample> samples) = 0;
  // Checks the output of the last RunOnce against the values the inputs imply.
  virtual Status Verify() = 0;
};

// Called before each iteration (warm-up included, numbered from 0). A seam for tests that make a
// rank late; the agent leaves it empty.
using BeforeIteration = std::function<void(int iteration)>;

// Warm-up, then `iterations` measured runs, then a check of the output. One RankResult per local
// rank. Stops at the first failing iteration and returns its status.
StatusOr<std::vector<RankResult>> RunOperation(Communicator& comm, const OpSpec& op,
                                               const BeforeIteration& before = {});

// The group's view, from every rank's result of one run.
struct GroupSummary {
  int ranks = 0;
  // Per iteration, the longest op time over ranks: the time from the first arrival to the last
  // exit, what a training step feels (synchronization amplification included).
  std::vector<double> group_seconds;
  double median_group_seconds = 0;
  // Per iteration, the shortest op time over ranks: the collective once the last rank arrived.
  double median_comm_seconds = 0;
  double algbw_bytes_per_s = 0;  // from median_group_seconds
  double busbw_bytes_per_s = 0;
  // Per rank, the median over iterations of how long after the first rank it arrived. Ranks leave a
  // collective together, so with exits aligned a rank's arrival offset is (longest op time) minus
  // (its op time); no clocks of different hosts are compared.
  std::vector<double> lateness_seconds;
  int latest_rank = -1;  // the rank with the largest median lateness
};

// InvalidArgument when the results do not describe one run (group, op, rank set, iteration count).
StatusOr<GroupSummary> SummarizeGroup(std::span<const RankResult> results);

double Median(std::vector<double> values);  // 0 for an empty vector

}  // namespace fw::collective
