// Collective stage: jobs, results, slow groups, bisection, findings.
#include "daemon/aggregator/collective/orchestrator.h"

#include <spdlog/spdlog.h>

#include <algorithm>

namespace fw::aggregator::collective {

CollectiveOrchestrator::CollectiveOrchestrator(OrchestratorConfig config)
    : config_(config),
      scheduler_(config.schedule, pauses_),
      kv_(config.kv),
      tracker_(config.slow) {}

void CollectiveOrchestrator::StartJob(JobSpec spec, int64_t now_ns, TickOutput& out,
                                      uint64_t bisection, uint64_t run_id) {
  kv_.OpenGroup(spec.job_id, spec.members, now_ns + config_.job_timeout_ns);
  for (const std::string& m : spec.members) out.jobs.push_back({m, spec});
  ActiveJob& j = jobs_[spec.job_id];
  j.spec = std::move(spec);
  j.started_ns = now_ns;
  j.bisection = bisection;
  j.run_id = run_id;
}

CollectiveOrchestrator::TickOutput CollectiveOrchestrator::Tick(
    const std::vector<CollectiveNode>& nodes, int64_t now_ns) {
  now_ns_ = now_ns;
  TickOutput out;
  std::vector<CollectiveNode> usable = nodes;
  for (CollectiveNode& n : usable) {
    leaf_of_[n.name] = n.leaf;
    session_of_[n.name] = n.session;
    auto failed = nccl_failed_.find(n.name);
    if (failed != nccl_failed_.end() && failed->second != n.session) nccl_failed_.erase(failed);
    if (nccl_failed_.contains(n.name)) n.nccl_gpus = 0;
    nccl_gpus_of_[n.name] = n.nccl_gpus;
    gpus_of_[n.name] = n.gpus;
  }
  // Jobs past their timeout fail; what they had is evaluated as failed.
  std::vector<std::string> late;
  for (const auto& [id, j] : jobs_) {
    if (now_ns - j.started_ns >= config_.job_timeout_ns) late.push_back(id);
  }
  for (const std::string& id : late) {
    ActiveJob j = std::move(jobs_[id]);
    jobs_.erase(id);
    j.failed = true;
    auto f = Complete(std::move(j));
    out.findings.insert(out.findings.end(), f.begin(), f.end());
  }
  // Bisection runs first: they answer a question already asked.
  for (auto& [id, b] : bisections_) {
    if (b.gpus) {
      for (const GpuSearch::Run& run : b.gpus->pending()) {
        bool started = false;
        for (const auto& [jid, j] : jobs_) started |= j.bisection == id && j.run_id == run.id;
        if (started || scheduler_.in_flight() >= config_.schedule.max_in_flight) continue;
        JobSpec spec = scheduler_.Adhoc({b.node}, "gpu_search", "nccl");
        spec.devices = run.devices;
        StartJob(std::move(spec), now_ns, out, id, run.id);
      }
      continue;
    }
    for (const Bisection::Run& run : b.search->pending()) {
      bool started = false;
      for (const auto& [jid, j] : jobs_) started |= j.bisection == id && j.run_id == run.id;
      if (started || scheduler_.in_flight() >= config_.schedule.max_in_flight) continue;
      std::vector<std::string> members;
      for (const Member& m : run.members) members.push_back(m.name);
      StartJob(scheduler_.Adhoc(std::move(members), "bisection", b.backend, b.gpus_per_member),
               now_ns, out, id, run.id);
    }
  }
  for (JobSpec& spec : scheduler_.Due(usable, now_ns)) StartJob(std::move(spec), now_ns, out);
  out.kv = kv_.Expire(now_ns);
  return out;
}

CollectiveOrchestrator::TickOutput CollectiveOrchestrator::StartOnDemand(
    std::vector<std::string> members, uint64_t bytes, uint32_t iterations, int64_t now_ns) {
  TickOutput out;
  JobSpec spec = scheduler_.Adhoc(std::move(members), "qualify");
  spec.bytes = bytes;
  spec.iterations = iterations;
  const std::string id = spec.job_id;
  StartJob(std::move(spec), now_ns, out);
  jobs_[id].on_demand = true;
  return out;
}

std::optional<OnDemandOutcome> CollectiveOrchestrator::TakeOnDemand(const std::string& job_id) {
  auto it = on_demand_done_.find(job_id);
  if (it == on_demand_done_.end()) return std::nullopt;
  OnDemandOutcome o = std::move(it->second);
  on_demand_done_.erase(it);
  std::erase(on_demand_order_, job_id);
  return o;
}

bool CollectiveOrchestrator::ScheduledJobOn(const std::vector<std::string>& nodes) const {
  for (const auto& [id, job] : jobs_) {
    if (job.on_demand) continue;
    for (const std::string& m : job.spec.members) {
      if (std::find(nodes.begin(), nodes.end(), m) != nodes.end()) return true;
    }
  }
  return false;
}

void CollectiveOrchestrator::Abandon(const std::string& job_id) {
  auto it = jobs_.find(job_id);
  if (it == jobs_.end() || !it->second.on_demand) return;
  jobs_.erase(it);
  scheduler_.OnJobDone(job_id);
  (void)kv_.CloseGroup(job_id);
}

double CollectiveOrchestrator::LastAcrossNodesBusbw(uint64_t bytes) const {
  if (bytes != config_.schedule.bytes) return 0;
  auto it = counters_.busbw_bps_by_kind.find("rotating");
  return it == counters_.busbw_bps_by_kind.end() ? 0 : it->second;
}

std::vector<KvDelivery> CollectiveOrchestrator::OnKvRequest(const std::string& node,
                                                            const std::string& key,
                                                            std::string value, int64_t now_ns) {
  return kv_.Handle(node, key, std::move(value), now_ns);
}

std::vector<CollectiveSlowFinding> CollectiveOrchestrator::OnResult(
    const std::string& node, const std::string& job_id, double busbw_bps, double latency_s,
    const std::string& error, MemberTimes times) {
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return {};
  ActiveJob& j = it->second;
  if (std::find(j.spec.members.begin(), j.spec.members.end(), node) == j.spec.members.end()) {
    SPDLOG_WARN("component=collective msg=\"result from a non-member dropped\" node={} job={}",
                node, job_id);
    return {};
  }
  j.busbw[node] = busbw_bps;
  for (auto* v : {&times.arrive_ns, &times.exit_ns}) {
    if (v->size() > kMaxIterations) v->resize(kMaxIterations);
  }
  if (times.op_seconds.size() > kMaxIterations) times.op_seconds.resize(kMaxIterations);
  j.times[node] = std::move(times);
  j.latency_s = std::max(j.latency_s, latency_s);
  if (j.spec.backend == "nccl") {
    if (error.starts_with("nccl: ")) {
      // NCCL's state changed since the node's Hello (or it has fewer GPUs than announced).
      if (nccl_failed_.emplace(node, session_of_[node]).second) {
        SPDLOG_INFO(
            "component=collective msg=\"node left out of NCCL groups across nodes until an NCCL "
            "job on it succeeds or its agent restarts\" node={} error=\"{}\"",
            node, error);
      }
    } else if (error.empty()) {
      nccl_failed_.erase(node);
    }
  }
  if (error.starts_with("skipped: ")) j.skipped = true;
  if (!error.empty()) {
    j.failed = true;
    j.errors[node] = error;
    SPDLOG_INFO("component=collective msg=\"member failed\" node={} job={} error=\"{}\"", node,
                job_id, error);
  }
  if (j.busbw.size() < j.spec.members.size()) return {};
  ActiveJob done = std::move(j);
  jobs_.erase(it);
  return Complete(std::move(done));
}

std::vector<CollectiveSlowFinding> CollectiveOrchestrator::Complete(ActiveJob job) {
  scheduler_.OnJobDone(job.spec.job_id);
  (void)kv_.CloseGroup(job.spec.job_id);
  ++counters_.runs;
  // The slowest member sets the group's pace.
  double busbw = 0;
  if (!job.busbw.empty() && !job.failed) {
    busbw = job.busbw.begin()->second;
    for (const auto& [m, b] : job.busbw) busbw = std::min(busbw, b);
  }
  if (job.skipped) {
    ++counters_.skipped;
  } else if (job.failed) {
    ++counters_.failures;
  }
  if (job.on_demand) {
    OnDemandOutcome o;
    o.errors = std::move(job.errors);
    for (const std::string& m : job.spec.members) {
      if (!job.busbw.contains(m)) o.missing.push_back(m);
    }
    o.busbw_bps = busbw;
    o.history_busbw_bps = LastAcrossNodesBusbw(job.spec.bytes);
    on_demand_done_[job.spec.job_id] = std::move(o);
    on_demand_order_.push_back(job.spec.job_id);
    // Outcomes nobody takes (the asker went away) are dropped after kMaxKept others.
    constexpr size_t kMaxKept = 64;
    if (on_demand_order_.size() > kMaxKept) {
      on_demand_done_.erase(on_demand_order_.front());
      on_demand_order_.erase(on_demand_order_.begin());
    }
    return {};
  }
  if (job.bisection != 0) {
    auto b = bisections_.find(job.bisection);
    if (b == bisections_.end()) return {};
    if (b->second.gpus) {
      b->second.gpus->OnResult(job.run_id, busbw, job.failed);
      return Harvest(job.bisection);
    }
    SubgroupResult r;
    r.busbw_bytes_per_s = busbw;
    r.group_seconds = job.latency_s;
    r.failed = job.failed;
    // Per-member arrivals in the run's member order (the suspect first, then its partner).
    std::vector<MemberTimes> times;
    for (const std::string& m : job.spec.members) times.push_back(job.times[m]);
    Arrivals arrivals = AlignArrivals(times);
    if (arrivals.iterations > 0) {
      r.group_seconds = arrivals.group_seconds;
      r.late_s = std::move(arrivals.late_s);
    }
    b->second.search->OnResult(job.run_id, r);
    return Harvest(job.bisection);
  }
  if (job.failed) return {};
  counters_.busbw_bps_by_kind[job.spec.kind] = busbw;
  const GroupVerdict v = tracker_.OnRun(job.spec.group, job.spec.shape, busbw);
  // Known-good partners come from groups whose last run read healthy, not merely from groups that
  // are not slow yet (a group on its way to slow holds the culprit).
  const bool run_ok = v.expected <= 0 || v.measured >= (1 - config_.slow.shift) * v.expected;
  if (!v.slow && run_ok) {
    healthy_members_[job.spec.group] = job.spec.members;
  } else {
    healthy_members_.erase(job.spec.group);
  }
  if (v.recovered) {
    SPDLOG_INFO(
        "component=collective msg=\"group recovered\" group={} measured_bps={} expected_bps={}",
        job.spec.group, v.measured, v.expected);
    recovered_.push_back(job.spec.group);
  }
  if (v.became_slow) {
    healthy_members_.erase(job.spec.group);
    StartBisection(job, v);
    return Harvest(next_bisection_ - 1);
  }
  return {};
}

void CollectiveOrchestrator::StartBisection(const ActiveJob& job, const GroupVerdict& v) {
  for (const auto& [id, b] : bisections_) {
    if (b.group == job.spec.group) return;  // one search per group at a time
  }
  if (job.spec.kind == "intra_node" && job.spec.members.size() == 1) {
    // The node's GPUs in pairs; the agent numbers them by CUDA device (its NCCL count when it
    // announced one, else the inventory's).
    const std::string& node = job.spec.members.front();
    const int gpus = nccl_gpus_of_[node] > 0 ? nccl_gpus_of_[node] : gpus_of_[node];
    ++counters_.bisections;
    SPDLOG_INFO(
        "component=collective msg=\"GPU search started\" group={} gpus={} measured_bps={} "
        "expected_bps={} basis={}",
        job.spec.group, gpus, v.measured, v.expected, v.basis);
    ActiveBisection& b = bisections_[next_bisection_++];
    b.group = job.spec.group;
    b.backend = "nccl";
    b.node = node;
    b.gpus = std::make_unique<GpuSearch>(gpus, v.measured, v.expected, config_.bisect.slow_ratio);
    return;
  }
  std::vector<Member> members;
  for (const std::string& m : job.spec.members) members.push_back({m, leaf_of_[m], 0});
  // An NCCL group is bisected with NCCL runs of as many GPU ranks per member, so its partners
  // must drive that many GPUs with NCCL.
  const bool nccl = job.spec.backend == "nccl";
  const uint32_t gpus = job.spec.member_gpus.empty() ? 0 : job.spec.member_gpus.front();
  std::vector<Member> good;
  for (const auto& [group, ms] : healthy_members_) {
    for (const std::string& m : ms) {
      const bool in_group =
          std::find(job.spec.members.begin(), job.spec.members.end(), m) != job.spec.members.end();
      const bool listed =
          std::any_of(good.begin(), good.end(), [&](const Member& g) { return g.name == m; });
      const bool capable = !nccl || nccl_gpus_of_[m] >= static_cast<int>(gpus);
      if (!in_group && !listed && capable && !pauses_.paused(m)) {
        good.push_back({m, leaf_of_[m], 0});
      }
    }
  }
  ++counters_.bisections;
  SPDLOG_INFO(
      "component=collective msg=\"bisection started\" group={} measured_bps={} "
      "expected_bps={} basis={}",
      job.spec.group, v.measured, v.expected, v.basis);
  bisections_[next_bisection_++] = {
      job.spec.group,
      std::make_unique<Bisection>(members, v.measured, v.expected, std::move(good), config_.bisect),
      job.spec.backend, gpus};
}

std::vector<CollectiveSlowFinding> CollectiveOrchestrator::Harvest(uint64_t id) {
  auto b = bisections_.find(id);
  if (b == bisections_.end()) return {};
  std::vector<CollectiveSlowFinding> out;
  if (b->second.gpus) {
    if (!b->second.gpus->done()) return {};
    const std::string& node = b->second.node;
    for (const GpuSearch::Result& r : b->second.gpus->results()) {
      CollectiveSlowFinding f;
      f.location = r.gpu.empty() ? "node " + node : "gpu " + node + "/" + r.gpu;
      f.node = node;
      f.gpu = r.gpu;
      f.cause = r.cause;
      f.group = b->second.group;
      f.measured_bps = r.measured_busbw;
      f.expected_bps = r.expected_busbw;
      SPDLOG_WARN(
          "component=collective msg=\"collective_slow\" location=\"{}\" cause=\"{}\" group={} "
          "measured_bps={} expected_bps={}",
          f.location, f.cause, f.group, f.measured_bps, f.expected_bps);
      out.push_back(std::move(f));
    }
    counters_.findings += out.size();
    bisections_.erase(b);
    return out;
  }
  if (!b->second.search->done()) return {};
  for (const Culprit& c : b->second.search->culprits()) {
    const bool link = c.kind == Culprit::Kind::kLink;
    out.push_back({c.Location(), link ? std::string() : c.node, c.cause, b->second.group,
                   link ? c.leaf_a : std::string(), link ? c.leaf_b : std::string(),
                   c.measured_busbw, c.expected_busbw, c.Detail(), c.late_s, c.late_iterations,
                   c.iterations});
    SPDLOG_WARN(
        "component=collective msg=\"collective_slow\" location=\"{}\" cause=\"{}\" "
        "detail=\"{}\" group={} measured_bps={} expected_bps={}",
        c.Location(), c.cause, c.Detail(), b->second.group, c.measured_busbw, c.expected_busbw);
  }
  if (b->second.search->inconclusive() && out.empty()) {
    SPDLOG_INFO("component=collective msg=\"bisection inconclusive\" group={} runs={}",
                b->second.group, b->second.search->runs());
  }
  counters_.findings += out.size();
  bisections_.erase(b);
  return out;
}

std::vector<std::string> CollectiveOrchestrator::TakeRecovered() {
  std::vector<std::string> out;
  out.swap(recovered_);
  return out;
}

}  // namespace fw::aggregator::collective
