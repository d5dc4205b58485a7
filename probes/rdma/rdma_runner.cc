// The UD mesh's thread for the agent.
#include "probes/rdma/rdma_runner.h"

#include <poll.h>
#include <pthread.h>
#include <spdlog/spdlog.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <ctime>

namespace fw::rdma {

class RdmaRunner::Sink final : public ResultSink {
 public:
  Sink(size_t max, std::atomic<uint64_t>& dropped) : max_(max), dropped_(dropped) {}
  void OnResult(const RdmaProbeResult& r) override {
    if (pending.size() >= max_) {
      dropped_++;
      return;
    }
    pending.push_back(r);
  }
  std::vector<RdmaProbeResult> pending;

 private:
  size_t max_;
  std::atomic<uint64_t>& dropped_;
};

RdmaRunner::RdmaRunner(std::unique_ptr<Verbs> verbs, const Clock& clock, RdmaRunnerOptions options,
                       BatchSink sink, net::ProbeBudget* budget, RcPeers::SendFn rc_send)
    : verbs_(std::move(verbs)),
      clock_(clock),
      options_(std::move(options)),
      sink_(std::move(sink)),
      budget_(budget),
      collector_(std::make_unique<Sink>(options_.max_batch, dropped_)),
      rc_send_(std::move(rc_send)) {}

RdmaRunner::~RdmaRunner() { Stop(); }

Status RdmaRunner::Start() {
  auto mesh = UdMesh::Create(*verbs_, clock_, options_.mesh, collector_.get(), budget_);
  if (!mesh.ok()) {
    MutexLock l(mu_);
    state_.available = false;
    state_.detail = mesh.status().message();
    spdlog::info("msg=\"rdma: unavailable\" reason=\"{}\"", state_.detail);
    return mesh.status();
  }
  mesh_ = std::move(mesh.value());
  if (rc_send_) {
    UdMesh* m = mesh_.get();
    rc_ = std::make_unique<RcPeers>(
        clock_, options_.rc,
        [m](const std::string& device, LinkLayer want, RcDeviceRef& out) {
          return m->PortFor(device, want, &out.ctx, &out.pd, &out.port, &out.gid_index);
        },
        rc_send_, collector_.get(), budget_);
    // The RC QPs live on the mesh's contexts and PDs: on a device's removal they go before it.
    mesh_->SetBeforeDeviceClose([this](const std::string& device) { rc_->DropDevice(device); });
  }
  stop_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (stop_fd_ < 0) return Status::Internal("eventfd failed");
  {
    MutexLock l(mu_);
    state_.available = true;
    state_.endpoints = mesh_->Endpoints();
    state_.sources = mesh_->TimestampSources();
    state_.endpoints_version = mesh_->endpoints_version();
    state_.detail = std::to_string(state_.endpoints.size()) + " ports";
  }
  thread_ = std::thread([this] {
    pthread_setname_np(pthread_self(), "fw-rdma");
    Loop();
  });
  return Status::Ok();
}

void RdmaRunner::Stop() {
  if (stopping_.exchange(true)) return;
  if (stop_fd_ >= 0) {
    const uint64_t one = 1;
    [[maybe_unused]] ssize_t n = ::write(stop_fd_, &one, sizeof(one));
  }
  if (thread_.joinable()) thread_.join();
  if (stop_fd_ >= 0) ::close(stop_fd_);
  stop_fd_ = -1;
}

void RdmaRunner::Wake() {
  if (stop_fd_ >= 0) {
    const uint64_t one = 1;
    [[maybe_unused]] ssize_t n = ::write(stop_fd_, &one, sizeof(one));
  }
}

void RdmaRunner::SetTargets(std::vector<UdTarget> targets) {
  {
    MutexLock l(mu_);
    next_targets_ = std::move(targets);
  }
  Wake();
}

void RdmaRunner::SetRcPlan(std::vector<RcPeerPlan> peers, double interval_s, uint64_t bytes) {
  {
    MutexLock l(mu_);
    next_rc_plan_ = RcPlan{std::move(peers), interval_s, bytes};
  }
  Wake();
}

void RdmaRunner::OnRcMessage(RcConnectMsg m) {
  {
    MutexLock l(mu_);
    if (rc_inbox_.size() >= 1024) return;  // a flood: the senders retry after their timeout
    rc_inbox_.push_back(std::move(m));
  }
  Wake();
}

RdmaState RdmaRunner::state() const {
  MutexLock l(mu_);
  return state_;
}

int64_t RdmaRunner::thread_cpu_ns() const {
  if (tid_.load() == 0 || !thread_.joinable()) return -1;
  clockid_t cid;
  timespec ts{};
  if (pthread_getcpuclockid(const_cast<std::thread&>(thread_).native_handle(), &cid) != 0 ||
      clock_gettime(cid, &ts) != 0) {
    return -1;
  }
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

void RdmaRunner::Loop() {
  pthread_setname_np(pthread_self(), "fw-rdma-ud");  // per-thread CPU (procstat --threads)
  tid_.store(static_cast<int>(::gettid()));
  int64_t last_flush = clock_.MonotonicNanos();
  const auto interval = static_cast<int64_t>(options_.batch_interval_s * 1e9);
  std::vector<pollfd> fds;
  while (!stopping_.load()) {
    // This thread's time outside the mesh's Step and the wait (RC setup and bursts, handing
    // results over) goes to the mesh as busy: what arrived meanwhile waited on this process, not
    // on the host, and carries no host delay (UdMesh::NoteBusy).
    const int64_t woke = clock_.MonotonicNanos();
    std::optional<std::vector<UdTarget>> targets;
    std::optional<RcPlan> rc_plan;
    std::vector<RcConnectMsg> rc_inbox;
    {
      MutexLock l(mu_);
      targets.swap(next_targets_);
      rc_plan.swap(next_rc_plan_);
      rc_inbox.swap(rc_inbox_);
    }
    if (rc_ && rc_plan)
      rc_->SetPlan(std::move(rc_plan->peers), rc_plan->interval_s, rc_plan->bytes);
    if (rc_) {
      for (const RcConnectMsg& m : rc_inbox) rc_->OnMessage(m);
    }
    if (targets) {
      const int skipped = mesh_->SetTargets(std::move(*targets));
      spdlog::info("msg=\"rdma: UD targets applied\" skipped={}", skipped);
    }
    const int64_t step_start = clock_.MonotonicNanos();
    mesh_->NoteBusy(woke, step_start);
    int64_t wait_ns = mesh_->Step();
    const int64_t step_end = clock_.MonotonicNanos();
    if (rc_) wait_ns = std::min(wait_ns, rc_->Step());
    const int64_t now = clock_.MonotonicNanos();
    if (!collector_->pending.empty() &&
        (now - last_flush >= interval || collector_->pending.size() >= options_.max_batch / 2)) {
      std::vector<RdmaProbeResult> batch;
      batch.swap(collector_->pending);
      sink_(std::move(batch));
      last_flush = now;
    }
    if (mesh_->endpoints_version() != 0) {
      MutexLock l(mu_);
      if (state_.endpoints_version != mesh_->endpoints_version()) {
        if (rc_ && state_.endpoints_version != 0) rc_->DropAll();  // the devices' QPs are gone
        state_.endpoints = mesh_->Endpoints();
        state_.sources = mesh_->TimestampSources();
        state_.endpoints_version = mesh_->endpoints_version();
      }
    }
    // Results waiting bound the wait; with none there is nothing to hand over (an agent with no
    // targets would otherwise spin here once the interval has passed).
    if (!collector_->pending.empty()) {
      wait_ns = std::min<int64_t>(wait_ns, std::max<int64_t>(0, last_flush + interval - now));
    }
    mesh_->NoteBusy(step_end, clock_.MonotonicNanos());
    fds.clear();
    fds.push_back({stop_fd_, POLLIN, 0});
    mesh_->AppendWaitFds(fds);
    const timespec ts{static_cast<time_t>(wait_ns / 1'000'000'000),
                      static_cast<long>(wait_ns % 1'000'000'000)};
    const int rc = ::ppoll(fds.data(), fds.size(), &ts, nullptr);
    wakeups_.fetch_add(1, std::memory_order_relaxed);
    if (rc < 0 && errno != EINTR) {
      spdlog::warn("msg=\"rdma: ppoll failed\" errno={}", errno);
      ::usleep(10'000);  // never spin on a persistent failure
    }
    if (rc > 0 && (fds[0].revents & POLLIN)) {
      uint64_t v;
      [[maybe_unused]] ssize_t n = ::read(stop_fd_, &v, sizeof(v));
    }
  }
  if (!collector_->pending.empty()) sink_(std::move(collector_->pending));
}

}  // namespace fw::rdma
