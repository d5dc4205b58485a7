// The backend-independent part of a collective probe: validation, the iteration loop, bandwidth
// and the group summary.
#include "probes/collective/collective.h"

#include <algorithm>

namespace fw::collective {

std::string_view OpKindName(OpKind kind) {
  switch (kind) {
    case OpKind::kAllReduce:
      return "all_reduce";
    case OpKind::kAllGather:
      return "all_gather";
    case OpKind::kReduceScatter:
      return "reduce_scatter";
  }
  return "unknown";
}

double BusBandwidthFactor(OpKind kind, int ranks) {
  if (ranks < 2) return 0;
  const double n = ranks;
  switch (kind) {
    case OpKind::kAllReduce:
      return 2.0 * (n - 1) / n;
    case OpKind::kAllGather:
    case OpKind::kReduceScatter:
      return (n - 1) / n;
  }
  return 0;
}

Status ValidateGroup(const GroupSpec& group) {
  if (group.group_id.empty() || group.group_id.size() > 128) {
    return Status::InvalidArgument("collective: group id must have 1 to 128 characters");
  }
  if (group.size < 1 || group.size > 65536) {
    return Status::InvalidArgument("collective: group size " + std::to_string(group.size) +
                                   " outside 1..65536");
  }
  if (group.rank < 0 || group.rank >= group.size) {
    return Status::InvalidArgument("collective: rank " + std::to_string(group.rank) +
                                   " outside 0.." + std::to_string(group.size - 1));
  }
  return Status::Ok();
}

std::string GroupKeyPrefix(const GroupSpec& group) { return "collective/" + group.group_id + "/"; }

Status ValidateOp(const OpSpec& op, int ranks, uint64_t max_bytes) {
  if (op.iterations < 1 || op.iterations > 10000) {
    return Status::InvalidArgument("collective: iterations must be 1..10000");
  }
  if (op.warmup < 0 || op.warmup > 1000) {
    return Status::InvalidArgument("collective: warm-up must be 0..1000");
  }
  if (op.timeout.count() <= 0) return Status::InvalidArgument("collective: timeout must be > 0");
  if (op.bytes > max_bytes) {
    return Status::InvalidArgument("collective: " + std::to_string(op.bytes) +
                                   " bytes exceeds the limit of " + std::to_string(max_bytes));
  }
  const uint64_t per_rank_unit = 4ull * static_cast<uint64_t>(std::max(ranks, 1));
  if (op.bytes < per_rank_unit) {
    return Status::InvalidArgument("collective: " + std::to_string(op.bytes) +
                                   " bytes is less than one 4-byte element per rank");
  }
  return Status::Ok();
}

double Median(std::vector<double> values) {
  if (values.empty()) return 0;
  const size_t mid = values.size() / 2;
  std::nth_element(values.begin(), values.begin() + mid, values.end());
  double m = values[mid];
  if (values.size() % 2 == 0) {
    m = (m + *std::max_element(values.begin(), values.begin() + mid)) / 2;
  }
  return m;
}

StatusOr<std::vector<RankResult>> RunOperation(Communicator& comm, const OpSpec& op,
                                               const BeforeIteration& before) {
  const GroupSpec& group = comm.group();
  if (Status s = ValidateOp(op, group.size); !s.ok()) return s;
  if (Status s = comm.Prepare(op); !s.ok()) return s;
  const std::vector<int> ranks = comm.local_ranks();
  std::vector<RankResult> results(ranks.size());
  for (size_t i = 0; i < ranks.size(); ++i) {
    RankResult& r = results[i];
    r.backend = std::string(comm.backend());
    r.group_id = group.group_id;
    r.rank = ranks[i];
    r.ranks = group.size;
    r.kind = op.kind;
    // The size nccl-tests reports: whole elements per rank.
    const uint64_t unit = 4ull * static_cast<uint64_t>(group.size);
    r.bytes = op.bytes / unit * unit;
    r.iterations.reserve(static_cast<size_t>(op.iterations));
  }
  std::vector<IterationSample> samples(ranks.size());
  for (int it = 0; it < op.warmup + op.iterations; ++it) {
    if (before) before(it);
    if (Status s = comm.RunOnce(samples); !s.ok()) return s;
    if (it < op.warmup) continue;
    for (size_t i = 0; i < ranks.size(); ++i) results[i].iterations.push_back(samples[i]);
  }
  if (Status s = comm.Verify(); !s.ok()) return s;
  const double factor = BusBandwidthFactor(op.kind, group.size);
  for (RankResult& r : results) {
    std::vector<double> times;
    times.reserve(r.iterations.size());
    for (const IterationSample& s : r.iterations) times.push_back(s.op_seconds);
    r.min_seconds = *std::min_element(times.begin(), times.end());
    r.median_seconds = Median(std::move(times));
    if (r.median_seconds > 0) {
      r.algbw_bytes_per_s = static_cast<double>(r.bytes) / r.median_seconds;
      r.busbw_bytes_per_s = r.algbw_bytes_per_s * factor;
    }
  }
  return results;
}

StatusOr<GroupSummary> SummarizeGroup(std::span<const RankResult> results) {
  if (results.empty()) return Status::InvalidArgument("collective: no rank results");
  const RankResult& first = results.front();
  const int n = first.ranks;
  if (static_cast<int>(results.size()) != n) {
    return Status::InvalidArgument("collective: " + std::to_string(results.size()) +
                                   " results for a group of " + std::to_string(n));
  }
  std::vector<const RankResult*> by_rank(static_cast<size_t>(n), nullptr);
  for (const RankResult& r : results) {
    if (r.group_id != first.group_id || r.ranks != n || r.kind != first.kind ||
        r.bytes != first.bytes || r.iterations.size() != first.iterations.size()) {
      return Status::InvalidArgument("collective: rank " + std::to_string(r.rank) +
                                     " reports a different run");
    }
    if (r.rank < 0 || r.rank >= n || by_rank[static_cast<size_t>(r.rank)] != nullptr) {
      return Status::InvalidArgument("collective: rank " + std::to_string(r.rank) +
                                     " missing, repeated or out of range");
    }
    by_rank[static_cast<size_t>(r.rank)] = &r;
  }
  const size_t iters = first.iterations.size();
  if (iters == 0) return Status::InvalidArgument("collective: no iterations");

  GroupSummary sum;
  sum.ranks = n;
  std::vector<double> comm_seconds;
  std::vector<std::vector<double>> lateness(static_cast<size_t>(n));
  for (size_t i = 0; i < iters; ++i) {
    double longest = 0;
    double shortest = by_rank[0]->iterations[i].op_seconds;
    for (const RankResult* r : by_rank) {
      longest = std::max(longest, r->iterations[i].op_seconds);
      shortest = std::min(shortest, r->iterations[i].op_seconds);
    }
    sum.group_seconds.push_back(longest);
    comm_seconds.push_back(shortest);
    for (size_t k = 0; k < by_rank.size(); ++k) {
      lateness[k].push_back(longest - by_rank[k]->iterations[i].op_seconds);
    }
  }
  sum.median_group_seconds = Median(sum.group_seconds);
  sum.median_comm_seconds = Median(std::move(comm_seconds));
  if (sum.median_group_seconds > 0) {
    sum.algbw_bytes_per_s = static_cast<double>(first.bytes) / sum.median_group_seconds;
    sum.busbw_bytes_per_s = sum.algbw_bytes_per_s * BusBandwidthFactor(first.kind, n);
  }
  double worst = -1;
  for (size_t k = 0; k < lateness.size(); ++k) {
    sum.lateness_seconds.push_back(Median(std::move(lateness[k])));
    if (sum.lateness_seconds.back() > worst) {
      worst = sum.lateness_seconds.back();
      sum.latest_rank = static_cast<int>(k);
    }
  }
  return sum;
}

}  // namespace fw::collective
