// Collective job schedule: group construction, budget, pause.
#include "daemon/aggregator/collective/scheduler.h"

#include <algorithm>

namespace fw::aggregator::collective {

bool PauseSet::Pause(const std::string& node) {
  MutexLock lock(mu_);
  return paused_.insert(node).second;
}

bool PauseSet::Resume(const std::string& node) {
  MutexLock lock(mu_);
  return paused_.erase(node) > 0;
}

bool PauseSet::paused(const std::string& node) const {
  MutexLock lock(mu_);
  return paused_.contains(node);
}

std::vector<std::string> PauseSet::list() const {
  MutexLock lock(mu_);
  return {paused_.begin(), paused_.end()};
}

std::string CollectiveScheduler::NextId() { return "coll-" + std::to_string(++seq_); }

std::vector<JobSpec> CollectiveScheduler::BuildGroups(const std::vector<CollectiveNode>& nodes) {
  std::vector<JobSpec> groups;
  auto add = [&](std::string kind, std::string backend, std::vector<std::string> members,
                 std::string group, std::string shape) {
    JobSpec j;
    j.kind = std::move(kind);
    j.backend = std::move(backend);
    j.members = std::move(members);
    j.group = std::move(group);
    j.shape = std::move(shape);
    j.bytes = config_.bytes;
    j.iterations = config_.iterations;
    j.op = config_.op;
    j.timeout_s = config_.op_timeout_s;
    groups.push_back(std::move(j));
  };
  if (config_.intra_node) {
    for (const CollectiveNode& n : nodes) {
      if (n.gpus >= 2) {
        add("intra_node", "nccl", {n.name}, "node/" + n.name,
            "intra_node/" + std::to_string(n.gpus));
      }
    }
  }
  // Nodes by leaf, each leaf's in name order.
  std::map<std::string, std::vector<std::string>> by_leaf;
  std::map<std::string, int> nccl_gpus;
  for (const CollectiveNode& n : nodes) {
    if (!n.leaf.empty()) by_leaf[n.leaf].push_back(n.name);
    nccl_gpus[n.name] = n.nccl_gpus;
  }
  // A group across leaves: NCCL when every member can drive GPUs with it, else Gloo. NCCL and
  // Gloo groups have their own names and shapes, so their histories and peers never mix.
  auto add_across = [&](const std::string& kind, std::vector<std::string> members,
                        const std::string& name) {
    int g = config_.nccl_across_nodes ? 64 : 0;
    for (const std::string& m : members) g = std::min(g, nccl_gpus[m]);
    const std::string n = std::to_string(members.size());
    if (g < 1) {
      add(kind, "gloo", std::move(members), kind + "/" + name, kind + "/" + n);
      return;
    }
    const size_t count = members.size();
    add("nccl_" + kind, "nccl", std::move(members), "nccl_" + kind + "/" + name,
        "nccl_" + kind + "/" + n + "x" + std::to_string(g));
    groups.back().member_gpus.assign(count, static_cast<uint32_t>(g));
  };
  for (auto& [leaf, names] : by_leaf) std::sort(names.begin(), names.end());
  if (by_leaf.size() < 2) return groups;
  if (config_.rail_groups) {
    // Rail i: the i-th node of every leaf (rail-aligned placement puts like positions together).
    size_t widest = 0;
    for (const auto& [leaf, names] : by_leaf) widest = std::max(widest, names.size());
    for (size_t i = 0; i < widest; ++i) {
      std::vector<std::string> members;
      for (const auto& [leaf, names] : by_leaf) {
        if (i < names.size()) members.push_back(names[i]);
      }
      if (members.size() >= 2) add_across("rail", std::move(members), std::to_string(i));
    }
  }
  if (config_.rotating_groups && config_.rotating_group_size >= 2) {
    // Interleave the leaves, rotate by the interval's epoch, cut into groups: each group spans
    // leaves, and over intervals every node meets different partners.
    std::vector<std::string> order;
    for (size_t i = 0;; ++i) {
      bool any = false;
      for (const auto& [leaf, names] : by_leaf) {
        if (i < names.size()) {
          order.push_back(names[i]);
          any = true;
        }
      }
      if (!any) break;
    }
    std::rotate(order.begin(), order.begin() + static_cast<long>(epoch_ % order.size()),
                order.end());
    for (size_t i = 0; i + 1 < order.size(); i += config_.rotating_group_size) {
      std::vector<std::string> members(
          order.begin() + static_cast<long>(i),
          order.begin() +
              static_cast<long>(std::min(order.size(), i + config_.rotating_group_size)));
      if (members.size() < 2) break;
      std::vector<std::string> sorted = members;
      std::sort(sorted.begin(), sorted.end());
      std::string key;
      for (const std::string& m : sorted) key += (key.empty() ? "" : "/") + m;
      add_across("rotating", std::move(members), key);
    }
  }
  return groups;
}

std::vector<JobSpec> CollectiveScheduler::Due(const std::vector<CollectiveNode>& nodes,
                                              int64_t now_ns) {
  if (interval_start_ns_ < 0 || now_ns - interval_start_ns_ >= config_.interval_ns) {
    interval_start_ns_ = now_ns;
    started_this_interval_ = 0;
    // The group started longest ago (or never) goes first, so a budget smaller than the fleet's
    // groups serves every group in turn instead of the first ones of each interval.
    queue_ = BuildGroups(nodes);
    auto last = [&](const JobSpec& j) {
      auto it = last_started_.find(j.group);
      return it == last_started_.end() ? int64_t{-1} : it->second;
    };
    std::stable_sort(queue_.begin(), queue_.end(),
                     [&](const JobSpec& a, const JobSpec& b) { return last(a) < last(b); });
    std::map<std::string, int64_t> kept;  // forget groups that no longer exist
    for (const JobSpec& j : queue_) {
      if (const int64_t t = last(j); t >= 0) kept[j.group] = t;
    }
    last_started_ = std::move(kept);
    ++epoch_;
  }
  std::vector<JobSpec> due;
  for (auto it = queue_.begin(); it != queue_.end();) {
    if (in_flight_.size() >= config_.max_in_flight ||
        started_this_interval_ >= config_.max_jobs_per_interval) {
      break;
    }
    const bool held = std::any_of(it->members.begin(), it->members.end(),
                                  [&](const std::string& m) { return pauses_.paused(m); });
    if (held) {
      ++it;
      continue;
    }
    it->job_id = NextId();
    in_flight_.insert(it->job_id);
    last_started_[it->group] = now_ns;
    ++started_this_interval_;
    due.push_back(std::move(*it));
    it = queue_.erase(it);
  }
  return due;
}

void CollectiveScheduler::OnJobDone(const std::string& job_id) { in_flight_.erase(job_id); }

JobSpec CollectiveScheduler::Adhoc(std::vector<std::string> members, const std::string& kind,
                                   const std::string& backend, uint32_t gpus_per_member) {
  JobSpec j;
  j.job_id = NextId();
  j.kind = kind;
  j.backend = backend;
  if (backend == "nccl" && gpus_per_member > 0) {
    j.member_gpus.assign(members.size(), gpus_per_member);
  }
  j.members = std::move(members);
  j.bytes = config_.bytes;
  j.iterations = config_.iterations;
  j.op = config_.op;
  j.timeout_s = config_.op_timeout_s;
  in_flight_.insert(j.job_id);
  return j;
}

}  // namespace fw::aggregator::collective
