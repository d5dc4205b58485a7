// Agent-side collective probes: uplink KvStore and the job runner.
#include "daemon/agent/collective_agent.h"

#include <malloc.h>
#include <pthread.h>
#include <spdlog/spdlog.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "probes/collective/collective.h"
#include "probes/collective/gloo_module.h"

namespace fw::agent {

namespace v1 = fabricwatch::v1;

namespace {

// One rank's arrivals and exits, relative to its first measured arrival (small varints).
void AddRankTimes(const collective::RankResult& r, v1::CollectiveResult& result) {
  v1::CollectiveRankTimes* t = result.add_rank_times();
  t->set_rank(static_cast<uint32_t>(r.rank));
  const int64_t base = r.iterations.empty() ? 0 : r.iterations.front().arrive_ns;
  for (const collective::IterationSample& s : r.iterations) {
    t->add_arrive_ns(s.arrive_ns - base);
    t->add_exit_ns(s.exit_ns - base);
  }
}

// The job's operation, size, iterations and timeout within the agent's bounds.
StatusOr<collective::OpSpec> OpOf(const v1::CollectiveJob& job, const CollectiveRunnerOptions& o) {
  collective::OpSpec op;
  if (job.op() == "all_gather") {
    op.kind = collective::OpKind::kAllGather;
  } else if (!job.op().empty() && job.op() != "all_reduce") {
    return Status::InvalidArgument("unknown op '" + job.op() + "' (all_reduce | all_gather)");
  }
  op.bytes = std::min<uint64_t>(job.bytes() ? job.bytes() : 1 << 20, o.max_bytes);
  op.iterations = static_cast<int>(std::clamp<uint32_t>(job.iterations(), 1, 1000));
  op.warmup = std::min(5, op.iterations);
  op.timeout = o.op_timeout;
  if (job.timeout_s() > 0) {
    // The job's bound, between 10 ms and 10 minutes (a NaN or huge value is clamped).
    op.timeout = std::chrono::milliseconds(
        static_cast<int64_t>(std::clamp(job.timeout_s(), 0.01, 600.0) * 1000));
  }
  return op;
}

// A job's own timeout bounds its rendezvous as it bounds each operation; without one, the agent's.
std::chrono::milliseconds RendezvousTimeout(const v1::CollectiveJob& job,
                                            const collective::OpSpec& op,
                                            const CollectiveRunnerOptions& o) {
  return job.timeout_s() > 0 ? std::chrono::duration_cast<std::chrono::milliseconds>(op.timeout)
                             : o.rendezvous_timeout;
}

// What every member reports of its ranks: times per rank, the group's size and the operation.
void AddRanks(const std::vector<collective::RankResult>& ranks, v1::CollectiveResult& result) {
  const collective::RankResult& first = ranks.front();
  result.set_rank(static_cast<uint32_t>(first.rank));
  result.set_group_ranks(static_cast<uint32_t>(first.ranks));
  result.set_op(std::string(collective::OpKindName(first.kind)));
  for (const collective::IterationSample& s : first.iterations) result.add_op_seconds(s.op_seconds);
  for (const collective::RankResult& r : ranks) AddRankTimes(r, result);
}

}  // namespace

StatusOr<v1::KvReply> UplinkKvStore::Request(std::string_view key, std::string value,
                                             std::chrono::milliseconds timeout) {
  if (Status s = collective::ValidateKvEntry(key, value.size()); !s.ok()) return s;
  MutexLock lock(mu_);
  if (cancelled_) return Status::Unavailable("kv: agent stopping");
  arrived_.erase(std::string(key));  // a late answer to an earlier request is not this one's
  ++waiting_[std::string(key)];
  v1::AgentMessage m;
  m.mutable_kv_request()->set_key(std::string(key));
  m.mutable_kv_request()->set_value(std::move(value));
  lock.Unlock();
  send_(std::move(m));
  lock.Lock();
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!cancelled_ && arrived_.find(key) == arrived_.end() && cv_.WaitUntil(mu_, deadline)) {
  }
  const bool got = arrived_.find(key) != arrived_.end();
  auto w = waiting_.find(key);
  if (--w->second == 0) waiting_.erase(w);
  if (cancelled_) return Status::Unavailable("kv: agent stopping");
  if (!got) {
    return Status::Unavailable("kv: no answer from the aggregator within " +
                               std::to_string(timeout.count()) + " ms for key '" +
                               std::string(key) + "'");
  }
  auto it = arrived_.find(key);
  v1::KvReply reply = std::move(it->second);
  arrived_.erase(it);
  return reply;
}

Status UplinkKvStore::Set(std::string_view key, std::string value) {
  if (value.empty()) return Status::InvalidArgument("kv: empty values are not stored");
  auto r = Request(key, std::move(value), set_timeout_);
  if (!r.ok()) return r.status();
  if (!r->found()) {
    return Status::PermissionDenied("kv: the aggregator refused key '" + std::string(key) + "'");
  }
  return Status::Ok();
}

StatusOr<std::string> UplinkKvStore::Get(std::string_view key, std::chrono::milliseconds timeout) {
  auto r = Request(key, "", timeout);
  if (!r.ok()) return r.status();
  if (!r->found()) {
    return Status::Unavailable("kv: the aggregator has no value for key '" + std::string(key) +
                               "' (timed out, refused or group ended)");
  }
  return std::move(*r->mutable_value());
}

void UplinkKvStore::OnReply(const v1::KvReply& reply) {
  {
    MutexLock lock(mu_);
    if (!waiting_.contains(reply.key())) return;
    arrived_[reply.key()] = reply;
  }
  cv_.NotifyAll();
}

void UplinkKvStore::Cancel() {
  {
    MutexLock lock(mu_);
    cancelled_ = true;
  }
  cv_.NotifyAll();
}

CollectiveRunner::CollectiveRunner(CollectiveRunnerOptions options, AgentSendFn send,
                                   metrics::Registry& registry)
    : options_(std::move(options)),
      send_(send),
      kv_(send),
      runs_(registry.AddCounter("fabricwatch_collective_runs_total",
                                "Collective probe jobs this node took part in, by backend and "
                                "outcome (ok, failed, refused, skipped: the node's GPUs were "
                                "busy).",
                                {"backend", "outcome"})),
      nccl_state_(registry.AddGauge("fabricwatch_collective_nccl_state",
                                    "1 for the node's NCCL state (unavailable, no_driver, "
                                    "no_device, error, ready) once checked.",
                                    {"state"})),
      last_busbw_(registry
                      .AddGauge("fabricwatch_collective_last_busbw_gbps",
                                "Bus bandwidth of this node's last successful collective, Gbit/s.")
                      .WithLabels({})) {}

CollectiveRunner::~CollectiveRunner() { Stop(); }

void CollectiveRunner::Start() {
  MutexLock lock(mu_);
  started_ = true;
  StartThreadIfNeeded();
}

void CollectiveRunner::StartThreadIfNeeded() {
  if (!started_ || stopping_ || queue_.empty() || running_) return;
  // The previous thread set running_ = false under mu_ and then only returns: this join is short.
  if (thread_.joinable()) thread_.join();
  running_ = true;
  thread_ = std::thread([this] {
    pthread_setname_np(pthread_self(), "fw-collective");
    // Probes yield the CPU to a user's work: this thread and the threads Gloo and NCCL start from
    // it (a Linux thread inherits its creator's nice value) run at kCollectiveNice.
    if (setpriority(PRIO_PROCESS, static_cast<id_t>(gettid()), kCollectiveNice) != 0) {
      SPDLOG_WARN("component=collective msg=\"could not lower the runner's priority\" errno={}",
                  errno);
    }
    Loop();
  });
}

void CollectiveRunner::Stop() {
  std::thread runner;
  {
    MutexLock lock(mu_);
    stopping_ = true;
    runner = std::move(thread_);
  }
  kv_.Cancel();
  if (runner.joinable()) runner.join();
}

std::string CollectiveRunner::nccl_status() const {
  MutexLock lock(mu_);
  return nccl_status_;
}

v1::CollectiveCapability CollectiveRunner::capability() const {
  MutexLock lock(mu_);
  return capability_;
}

void CollectiveRunner::CheckNccl() { LoadNcclOnce(); }

void CollectiveRunner::OnJob(const v1::CollectiveJob& job) {
  {
    MutexLock lock(mu_);
    if (!stopping_ && queue_.size() < options_.max_queued) {
      queue_.push_back(job);
      StartThreadIfNeeded();
      return;
    }
  }
  runs_.WithLabels({job.backend(), "refused"}).Inc();
  SPDLOG_WARN("component=collective msg=\"job refused: queue full\" job={}", job.job_id());
  v1::CollectiveResult r;
  r.set_job_id(job.job_id());
  r.set_backend(job.backend());
  r.set_error("refused: " + std::to_string(options_.max_queued) + " jobs already queued");
  Report(std::move(r));
}

void CollectiveRunner::Loop() {
  for (;;) {
    v1::CollectiveJob job;
    {
      MutexLock lock(mu_);
      if (stopping_ || queue_.empty()) {
        running_ = false;  // the next job starts a new thread (StartThreadIfNeeded)
        return;
      }
      job = std::move(queue_.front());
      queue_.pop_front();
    }
    skipped_ = false;
    v1::CollectiveResult r = Run(job);
    runs_.WithLabels({r.backend(), skipped_            ? "skipped"
                                   : r.error().empty() ? "ok"
                                                       : "failed"})
        .Inc();
    if (r.error().empty()) last_busbw_.Set(r.bus_bandwidth_bps() * 1e-9);
    Report(std::move(r));
    // A job's buffers (up to max_bytes each) are freed into this thread's malloc arena, which
    // keeps them resident after the thread ends; give the free pages back.
    malloc_trim(0);
  }
}

void CollectiveRunner::Report(v1::CollectiveResult result) {
  v1::AgentMessage m;
  *m.mutable_collective_result() = std::move(result);
  send_(std::move(m));
}

v1::CollectiveResult CollectiveRunner::Run(const v1::CollectiveJob& job) {
  v1::CollectiveResult result;
  result.set_job_id(job.job_id());
  result.set_backend(job.backend().empty() ? "gloo" : job.backend());
  const auto& members = job.members();
  const auto me = std::find(members.begin(), members.end(), options_.node);
  if (me == members.end() || job.job_id().empty()) {
    result.set_error("this node is not a member of the job");
    return result;
  }
  const int rank = static_cast<int>(me - members.begin());
  if (result.backend() == "nccl") {
    RunNccl(job, rank, result);
    return result;
  }
  if (result.backend() != "gloo") {
    result.set_error("unknown backend '" + result.backend() + "'");
    return result;
  }
  auto op = OpOf(job, options_);
  if (!op.ok()) {
    result.set_error(op.status().ToString());
    return result;
  }
  const collective::GroupSpec group{job.job_id(), members.size(), rank};
  collective::GlooOptions gloo;
  gloo.tcp_address = options_.tcp_address;
  gloo.rendezvous_timeout = RendezvousTimeout(job, *op, options_);
  auto comm = collective::ConnectGlooModule(group, kv_, gloo);
  if (!comm.ok()) {
    result.set_error(comm.status().ToString());
    return result;
  }
  collective::BeforeIteration before;
  if (options_.test_delay.count() > 0) {
    // Test-only straggler (--collective-test-delay-ms): this rank arrives late every iteration.
    before = [d = options_.test_delay](int) { std::this_thread::sleep_for(d); };
  }
  auto runs = collective::RunOperation(**comm, *op, before);
  if (!runs.ok()) {
    result.set_error(runs.status().ToString());
    return result;
  }
  const collective::RankResult& r = runs->front();
  result.set_bus_bandwidth_bps(r.busbw_bytes_per_s * 8);
  result.set_latency_s(r.median_seconds);
  AddRanks(*runs, result);
  return result;
}

void CollectiveRunner::SetNcclAvailability(const collective::NcclAvailability& a) {
  if (nccl_loaded_state_known_) {
    nccl_state_.WithLabels({std::string(collective::NcclStateName(nccl_state_value_))}).Set(0);
    SPDLOG_INFO("component=collective backend=nccl msg=\"nccl state changed\" from={} to={}",
                collective::NcclStateName(nccl_state_value_), collective::NcclStateName(a.state));
  }
  nccl_loaded_state_known_ = true;
  nccl_state_value_ = a.state;
  nccl_devices_value_ = a.devices;
  nccl_state_.WithLabels({std::string(collective::NcclStateName(a.state))}).Set(1);
  MutexLock lock(mu_);
  nccl_status_ = a.ToString();
  capability_.set_nccl_state(std::string(collective::NcclStateName(a.state)));
  capability_.set_nccl_gpus(
      a.state == collective::NcclState::kReady ? static_cast<uint32_t>(std::max(0, a.devices)) : 0);
  capability_.set_nccl_status(nccl_status_);
}

void CollectiveRunner::LoadNcclOnce() {
  // The libraries are loaded once: a missing library stays missing until the agent restarts, and
  // a loaded one is only re-checked (cudaGetDeviceCount, cheap) per job, so a driver that appears
  // later is found without reloading 200 MB of NCCL every interval.
  // Without a driver the libraries are not loaded at all (about 2 MiB resident for nothing); the
  // driver files are looked for again at the next check.
  if (nccl_loaded_) return;
  if (options_.nccl_api_for_test == nullptr && !options_.nvidia_driver_files.empty() &&
      std::none_of(options_.nvidia_driver_files.begin(), options_.nvidia_driver_files.end(),
                   [](const std::string& f) { return access(f.c_str(), F_OK) == 0; })) {
    collective::NcclAvailability a;
    a.state = collective::NcclState::kNoDriver;
    std::string files;
    for (const std::string& f : options_.nvidia_driver_files)
      files += (files.empty() ? "" : ", ") + f;
    a.detail = "no NVIDIA driver (none of " + files + " exists); NCCL not loaded";
    if (!nccl_loaded_state_known_ || a.state != nccl_state_value_) SetNcclAvailability(a);
    return;
  }
  nccl_loaded_ = true;
  if (options_.nccl_api_for_test != nullptr) {
    nccl_api_ = options_.nccl_api_for_test;
    SetNcclAvailability(collective::CheckNccl(*nccl_api_));
  } else {
    SetNcclAvailability(collective::LoadAndCheckNccl(options_.nccl, &nccl_));
    if (nccl_ != nullptr) nccl_api_ = &nccl_->api();
  }
}

bool CollectiveRunner::GpusBusy(v1::CollectiveResult& result) {
  // NVML is loaded once, like NCCL. Without it (no driver, no library) the check cannot run and
  // the probe goes on: NCCL then reports the node's state.
  if (!nvml_loaded_) {
    nvml_loaded_ = true;
    auto nvml =
        options_.nvml_loader ? options_.nvml_loader() : collective::LoadNvml(options_.nvml_library);
    if (nvml.ok()) {
      nvml_ = std::move(*nvml);
    } else {
      SPDLOG_INFO(
          "component=collective backend=nvml msg=\"busy-GPU check off: nvml: unavailable\" "
          "error=\"{}\"",
          nvml.status().message());
    }
  }
  if (nvml_ == nullptr) return false;
  const collective::GpuBusyReport report = collective::CheckGpusBusy(*nvml_);
  if (!report.checked) {
    SPDLOG_WARN("component=collective backend=nvml msg=\"busy-GPU check failed\" error=\"{}\"",
                report.error);
    result.set_error("skipped: the busy-GPU check failed: " + report.error);
    skipped_ = true;
    return true;
  }
  if (report.busy.empty()) return false;
  SPDLOG_INFO("component=collective backend=nccl msg=\"probe skipped\" reason=\"{}\"",
              report.Reason());
  result.set_error("skipped: " + report.Reason());
  skipped_ = true;
  return true;
}

void CollectiveRunner::RunNccl(const v1::CollectiveJob& job, int rank,
                               v1::CollectiveResult& result) {
  if (GpusBusy(result)) return;
  LoadNcclOnce();
  if (nccl_api_ == nullptr) {
    result.set_error(nccl_status());
    return;
  }
  const collective::NcclAvailability a = collective::CheckNccl(*nccl_api_);
  if (a.state != nccl_state_value_ || a.devices != nccl_devices_value_) SetNcclAvailability(a);
  if (a.state != collective::NcclState::kReady) {
    result.set_error(a.ToString());
    return;
  }
  // One rank per local GPU. A job of one node uses every GPU and needs no trip to the aggregator
  // for the unique id; across nodes each member contributes member_gpus[i] ranks, starting after
  // the members before it, and the id travels through the aggregator's key-value service.
  int local = a.devices, first = 0, total = a.devices;
  std::vector<int> devices;  // empty: 0 .. local - 1
  if (job.devices_size() > 0) {
    if (job.members_size() != 1 || job.member_gpus_size() > 0) {
      result.set_error("nccl: devices are for a job of one node");
      return;
    }
    for (const uint32_t d : job.devices()) {
      if (d >= static_cast<uint32_t>(a.devices) ||
          std::find(devices.begin(), devices.end(), static_cast<int>(d)) != devices.end()) {
        result.set_error("nccl: the job asks for GPU " + std::to_string(d) + " twice or of " +
                         std::to_string(a.devices) + " present");
        return;
      }
      devices.push_back(static_cast<int>(d));
    }
    local = total = static_cast<int>(devices.size());
  } else if (job.members_size() > 1 || job.member_gpus_size() > 0) {
    if (job.member_gpus_size() != job.members_size()) {
      result.set_error("nccl: a job across nodes needs member_gpus for each of its " +
                       std::to_string(job.members_size()) + " members");
      return;
    }
    total = 0;
    for (int i = 0; i < job.member_gpus_size(); ++i) {
      const uint32_t g = job.member_gpus(i);
      if (g < 1 || g > 64) {
        result.set_error("nccl: member_gpus " + std::to_string(g) + " outside 1..64");
        return;
      }
      if (i < rank) first += static_cast<int>(g);
      total += static_cast<int>(g);
    }
    local = static_cast<int>(job.member_gpus(rank));
    if (local > a.devices) {
      result.set_error("nccl: the job asks for " + std::to_string(local) + " GPUs on this node, " +
                       std::to_string(a.devices) + " present");
      return;
    }
  }
  auto op = OpOf(job, options_);
  if (!op.ok()) {
    result.set_error(op.status().ToString());
    return;
  }
  collective::NcclOptions no;
  no.devices = devices;
  for (int d = 0; devices.empty() && d < local; ++d) no.devices.push_back(d);
  no.rendezvous_timeout = RendezvousTimeout(job, *op, options_);
  collective::InMemoryKvStore local_kv;
  collective::KvStore& kv = local == total ? static_cast<collective::KvStore&>(local_kv) : kv_;
  const collective::GroupSpec group{job.job_id(), total, first};
  auto comm = collective::ConnectNccl(*nccl_api_, group, kv, no, nccl_counters_);
  if (!comm.ok()) {
    result.set_error(comm.status().ToString());
    return;
  }
  auto runs = collective::RunOperation(**comm, *op);
  if (!runs.ok()) {
    result.set_error(runs.status().ToString());
    return;
  }
  if (local == total) {
    auto summary = collective::SummarizeGroup(*runs);
    if (!summary.ok()) {
      result.set_error(summary.status().ToString());
      return;
    }
    result.set_bus_bandwidth_bps(summary->busbw_bytes_per_s * 8);
    result.set_latency_s(summary->median_group_seconds);
  } else {
    // This node's part of a larger group: its slowest local rank (the aggregator takes the
    // slowest member).
    double busbw = runs->front().busbw_bytes_per_s, latency = 0;
    for (const collective::RankResult& r : *runs) {
      busbw = std::min(busbw, r.busbw_bytes_per_s);
      latency = std::max(latency, r.median_seconds);
    }
    result.set_bus_bandwidth_bps(busbw * 8);
    result.set_latency_s(latency);
  }
  AddRanks(*runs, result);
}

}  // namespace fw::agent
