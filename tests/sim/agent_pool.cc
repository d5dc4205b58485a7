// Callback-API client reactors for simulated agents. The only simulator file that includes grpcpp.
#include "tests/sim/agent_pool.h"

#include <grpcpp/grpcpp.h>
#include <spdlog/spdlog.h>

#include <atomic>
#include <chrono>
#include <cstdlib>

#include "common/mutex.h"
#include "common/tls/grpc_credentials.h"
#include "fabricwatch.grpc.pb.h"
#include "tests/sim/batch_builder.h"

namespace fw::sim {

namespace v1 = fabricwatch::v1;

namespace {

class PoolImpl;

// One simulated agent's stream.
//
// Threads: gRPC runs the reactions; the simulator's generator calls SendBatch/SendHeartbeat; the
// pool calls Close. `mu_` guards the write state. Every gRPC operation is decided under `mu_` and
// started after releasing it, because gRPC may run a reaction inline on the starting thread.
// A hold is taken at start (writes begin outside reactions) and removed exactly once, when the
// stream can carry no more writes and none is in flight; OnDone follows.
class SimAgent final : public grpc::ClientBidiReactor<v1::AgentMessage, v1::AggregatorMessage> {
 public:
  SimAgent(PoolImpl* pool, int index, v1::Hello hello, int ports) : pool_(pool), index_(index) {
    *hello_.mutable_hello() = std::move(hello);
    counters_pending_ = ports > 0;
    for (int p = 0; p < ports; ++p) {
      v1::PortSample* s = counters_.mutable_counter_batch()->add_ports();
      s->set_device("mlx5_" + std::to_string(p));
      s->set_port(1);
      s->set_state("ACTIVE");
      s->set_phys_state("LinkUp");
      s->set_rate_gbps(400);
      s->set_link_layer("Ethernet");
    }
  }

  void Start(v1::Aggregator::Stub* stub);
  bool SendBatch(const AgentPool::FillFn& fill);
  bool SendHeartbeat(int64_t sent_unix_ns);
  bool SendTraces(const v1::PathTraceReport& report);
  void Close();
  void Cancel() { ctx_.TryCancel(); }
  void Kick();  // closed loop: start writing if idle

  void OnReadDone(bool ok) override;
  void OnWriteDone(bool ok) override;
  void OnWritesDoneDone(bool ok) override;
  void OnDone(const grpc::Status& status) override;

 private:
  enum class Slot { kNone, kHello, kCounters, kBatch, kHeartbeat, kTraces, kWritesDone };
  struct Next {
    const v1::AgentMessage* write = nullptr;
    bool writes_done = false;
    bool remove_hold = false;
  };
  Next PickLocked() FW_REQUIRES(mu_);
  uint64_t UnackedLocked() const FW_REQUIRES(mu_) { return next_seq_ - 1 - acked_seq_; }
  void Perform(const Next& n);

  PoolImpl* pool_;
  const int index_;
  grpc::ClientContext ctx_;
  v1::AgentMessage hello_, batch_, heartbeat_, counters_, traces_;
  v1::AggregatorMessage in_;  // owned by the single outstanding read

  Mutex mu_;
  Slot in_flight_ FW_GUARDED_BY(mu_) = Slot::kNone;
  bool batch_ready_ FW_GUARDED_BY(mu_) = false;  // filled, waiting for the write slot
  bool batch_busy_ FW_GUARDED_BY(mu_) = false;   // ready or in flight; the generator keeps off
  bool hb_ready_ FW_GUARDED_BY(mu_) = false;
  bool hb_busy_ FW_GUARDED_BY(mu_) = false;
  bool traces_ready_ FW_GUARDED_BY(mu_) = false;
  bool traces_busy_ FW_GUARDED_BY(mu_) = false;
  bool counters_pending_ FW_GUARDED_BY(mu_) = false;  // the one CounterBatch is still to be written
  bool ready_ FW_GUARDED_BY(mu_) = false;             // Hello acknowledged
  bool over_ FW_GUARDED_BY(mu_) = false;              // no more writes possible
  bool closing_ FW_GUARDED_BY(mu_) = false;
  bool writes_done_ FW_GUARDED_BY(mu_) = false;  // StartWritesDone was issued
  bool hold_released_ FW_GUARDED_BY(mu_) = false;
  bool loop_toggle_ FW_GUARDED_BY(mu_) = false;
  uint64_t next_seq_ FW_GUARDED_BY(mu_) = 1;
  uint64_t acked_seq_ FW_GUARDED_BY(mu_) = 0;
  uint64_t results_cum_ FW_GUARDED_BY(mu_) = 0;  // results in every batch filled so far
  uint64_t results_acked_cum_ FW_GUARDED_BY(mu_) = 0;
  // Cumulative result count at each of the last kRing sequence numbers, to credit acks.
  static constexpr size_t kRing = 256;
  uint64_t cum_at_seq_[kRing] FW_GUARDED_BY(mu_) = {};
  uint32_t pending_results_ FW_GUARDED_BY(mu_) = 0;  // results in the batch in flight
  bool planned_ = false;  // a ProbePlan arrived; touched only by OnReadDone (one read at a time)
};

class PoolImpl final : public AgentPool {
 public:
  PoolImpl(Options options, std::vector<v1::Hello> hellos) : options_(std::move(options)) {
    agents_.reserve(hellos.size());
    for (auto& h : hellos) {
      const int index = static_cast<int>(agents_.size());
      agents_.push_back(
          std::make_unique<SimAgent>(this, index, std::move(h), options_.ports_per_agent));
    }
    int per = std::max(1, options_.agents_per_channel);
    size_t channels = (agents_.size() + static_cast<size_t>(per) - 1) / static_cast<size_t>(per);
    for (size_t c = 0; c < channels; ++c) {
      grpc::ChannelArguments args;
      // A distinct arg value gives each channel its own subchannel, hence its own connection.
      args.SetInt("fw.sim.channel", static_cast<int>(c));
      // No client keepalive, unlike the real agent: gRPC would also set TCP_USER_TIMEOUT, and an
      // overloaded aggregator that leaves a connection unread for that long would get the whole
      // connection (100 agents) killed by the simulator rather than measured as slow.
      args.SetMaxSendMessageSize(16 << 20);
      auto ch =
          grpc::CreateCustomChannel(options_.target, tls::ChannelCredentials(options_.tls), args);
      stubs_.push_back(v1::Aggregator::NewStub(ch));
    }
  }

  ~PoolImpl() override { Shutdown(2.0); }

  void StartAll() override {
    int per = std::max(1, options_.agents_per_channel);
    for (size_t i = 0; i < agents_.size(); ++i) {
      agents_[i]->Start(stubs_[i / static_cast<size_t>(per)].get());
      streams_.fetch_add(1);
    }
  }

  uint64_t WaitReady(double timeout_s) override {
    MutexLock lock(mu_);
    const auto deadline = std::chrono::steady_clock::now() + Seconds(timeout_s);
    while (ready_.load() + failed_.load() < streams_.load() && cv_.WaitUntil(mu_, deadline)) {
    }
    return ready_.load();
  }

  bool SendBatch(int i, const FillFn& fill) override {
    return agents_[static_cast<size_t>(i)]->SendBatch(fill);
  }
  bool SendHeartbeat(int i, int64_t sent_unix_ns) override {
    return agents_[static_cast<size_t>(i)]->SendHeartbeat(sent_unix_ns);
  }
  bool SendTraces(int i, const v1::PathTraceReport& report) override {
    return agents_[static_cast<size_t>(i)]->SendTraces(report);
  }
  void OnPlan(int agent, const v1::ProbePlan& plan) const {
    if (options_.on_plan) options_.on_plan(agent, plan);
  }

  void StartClosedLoop() override {
    closed_loop_.store(true);
    for (auto& a : agents_) a->Kick();
  }
  void StopClosedLoop() override { closed_loop_.store(false); }

  PoolStats Stats() const override {
    PoolStats s;
    s.streams = streams_.load();
    s.ready = ready_.load();
    s.failed = failed_.load();
    s.batches_sent = batches_sent_.load();
    s.heartbeats_sent = heartbeats_sent_.load();
    s.results_sent = results_sent_.load();
    s.results_acked = results_acked_.load();
    s.acks_received = acks_.load();
    s.plans_received = plans_.load();
    s.planned = planned_.load();
    s.trace_reports_sent = trace_reports_.load();
    s.skipped = skipped_.load();
    return s;
  }

  void Shutdown(double timeout_s) override {
    if (shut_down_.exchange(true)) return;
    closed_loop_.store(false);
    shutting_down_.store(true);
    for (auto& a : agents_) a->Close();
    MutexLock lock(mu_);
    if (!AwaitDoneLocked(Seconds(timeout_s))) {
      spdlog::warn("msg=\"streams still open after shutdown grace; cancelling\" open={}",
                   streams_.load() - done_);
      lock.Unlock();
      for (auto& a : agents_) a->Cancel();
      lock.Lock();
      // gRPC runs OnDone for a cancelled call once its holds are gone; waiting longer than this
      // means a reactor leaked its hold, and destroying it would be a use-after-free.
      if (!AwaitDoneLocked(std::chrono::seconds(30))) {
        spdlog::critical("msg=\"streams never finished after cancel (leaked hold)\" open={}",
                         streams_.load() - done_);
        std::abort();
      }
    }
  }

  // Called by reactors.
  void OnReady() {
    ready_.fetch_add(1);
    Notify();
  }
  void OnDone(bool clean) {
    if (!clean && !shutting_down_.load()) failed_.fetch_add(1);
    MutexLock lock(mu_);
    ++done_;
    cv_.NotifyAll();
  }
  void Notify() {
    MutexLock lock(mu_);
    cv_.NotifyAll();
  }
  bool closed_loop() const { return closed_loop_.load(std::memory_order_relaxed); }
  uint64_t max_unacked() const { return static_cast<uint64_t>(options_.max_unacked_batches); }

  std::atomic<uint64_t> batches_sent_{0}, heartbeats_sent_{0}, results_sent_{0}, results_acked_{0},
      acks_{0}, plans_{0}, planned_{0}, skipped_{0}, trace_reports_{0};

 private:
  Options options_;
  std::vector<std::unique_ptr<v1::Aggregator::Stub>> stubs_;
  std::vector<std::unique_ptr<SimAgent>> agents_;
  std::atomic<uint64_t> streams_{0}, ready_{0}, failed_{0};
  std::atomic<bool> closed_loop_{false}, shutting_down_{false}, shut_down_{false};
  static std::chrono::steady_clock::duration Seconds(double s) {
    return std::chrono::duration_cast<std::chrono::steady_clock::duration>(
        std::chrono::duration<double>(s));
  }
  // Waits until every stream has ended or `timeout` passed; true when all ended.
  bool AwaitDoneLocked(std::chrono::steady_clock::duration timeout) FW_REQUIRES(mu_) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (done_ < streams_.load()) {
      if (!cv_.WaitUntil(mu_, deadline)) return done_ >= streams_.load();
    }
    return true;
  }

  Mutex mu_;
  CondVar cv_;
  uint64_t done_ FW_GUARDED_BY(mu_) = 0;
};

void SimAgent::Start(v1::Aggregator::Stub* stub) {
  stub->async()->Connect(&ctx_, this);
  {
    MutexLock lock(mu_);
    in_flight_ = Slot::kHello;
  }
  StartWrite(&hello_);
  StartRead(&in_);
  AddHold();
  StartCall();
}

SimAgent::Next SimAgent::PickLocked() {
  Next n;
  if (in_flight_ != Slot::kNone) return n;
  if (over_) {
    if (!hold_released_) {
      hold_released_ = true;
      n.remove_hold = true;
    }
    return n;
  }
  if (!ready_) return n;
  if (counters_pending_ && !closing_) {
    counters_pending_ = false;
    in_flight_ = Slot::kCounters;
    n.write = &counters_;
    return n;
  }
  if (!closing_ && pool_->closed_loop() && !hb_busy_ && !batch_busy_) {
    // Alternate heartbeats and empty batches; each gets its turn as soon as the last write ends,
    // but a batch waits while the window of unacknowledged batches is full.
    if (loop_toggle_) {
      loop_toggle_ = false;
      heartbeat_.mutable_heartbeat()->set_sent_unix_ns(
          std::chrono::duration_cast<std::chrono::nanoseconds>(
              std::chrono::system_clock::now().time_since_epoch())
              .count());
      hb_busy_ = hb_ready_ = true;
    } else if (UnackedLocked() < pool_->max_unacked()) {
      loop_toggle_ = true;
      v1::ProbeBatch* b = batch_.mutable_probe_batch();
      b->clear_results();
      b->set_seq(next_seq_);
      cum_at_seq_[next_seq_ % kRing] = results_cum_;
      ++next_seq_;
      batch_busy_ = batch_ready_ = true;
      pending_results_ = 0;
    }
  }
  if (hb_ready_) {
    hb_ready_ = false;
    in_flight_ = Slot::kHeartbeat;
    n.write = &heartbeat_;
  } else if (traces_ready_) {
    traces_ready_ = false;
    in_flight_ = Slot::kTraces;
    n.write = &traces_;
  } else if (batch_ready_) {
    batch_ready_ = false;
    in_flight_ = Slot::kBatch;
    n.write = &batch_;
  } else if (closing_ && !writes_done_) {
    writes_done_ = true;  // once only: acks arriving later must not start it again
    in_flight_ = Slot::kWritesDone;
    n.writes_done = true;
  }
  return n;
}

void SimAgent::Perform(const Next& n) {
  if (n.write) StartWrite(n.write);
  if (n.writes_done) StartWritesDone();
  if (n.remove_hold) RemoveHold();
}

bool SimAgent::SendBatch(const AgentPool::FillFn& fill) {
  uint64_t seq;
  {
    MutexLock lock(mu_);
    if (!ready_ || over_ || closing_) return false;
    if (batch_busy_ || UnackedLocked() >= pool_->max_unacked()) {
      // The aggregator (or this process) is behind: a real agent would buffer this batch.
      pool_->skipped_.fetch_add(1, std::memory_order_relaxed);
      return false;
    }
    batch_busy_ = true;
    seq = next_seq_++;
  }
  // batch_busy_ keeps every other writer of batch_ away: fill without the lock.
  v1::ProbeBatch* b = batch_.mutable_probe_batch();
  fill(*b);
  b->set_seq(seq);
  Next n;
  {
    MutexLock lock(mu_);
    results_cum_ += static_cast<uint64_t>(ResultCount(*b));
    cum_at_seq_[seq % kRing] = results_cum_;
    pending_results_ = static_cast<uint32_t>(ResultCount(*b));
    batch_ready_ = true;
    n = PickLocked();
  }
  Perform(n);
  return true;
}

bool SimAgent::SendHeartbeat(int64_t sent_unix_ns) {
  Next n;
  {
    MutexLock lock(mu_);
    if (!ready_ || over_ || closing_ || hb_busy_) return false;
    heartbeat_.mutable_heartbeat()->set_sent_unix_ns(sent_unix_ns);
    hb_busy_ = hb_ready_ = true;
    n = PickLocked();
  }
  Perform(n);
  return true;
}

bool SimAgent::SendTraces(const v1::PathTraceReport& report) {
  Next n;
  {
    MutexLock lock(mu_);
    if (!ready_ || over_ || closing_ || traces_busy_) return false;
    *traces_.mutable_path_traces() = report;
    traces_busy_ = traces_ready_ = true;
    n = PickLocked();
  }
  Perform(n);
  return true;
}

void SimAgent::Kick() {
  Next n;
  {
    MutexLock lock(mu_);
    n = PickLocked();
  }
  Perform(n);
}

void SimAgent::Close() {
  Next n;
  bool cancel = false;
  {
    MutexLock lock(mu_);
    closing_ = true;
    if (!ready_ && !over_) {
      // Never acknowledged: nothing to flush, and the outstanding read would wait forever.
      over_ = cancel = true;
    }
    n = PickLocked();
  }
  Perform(n);
  if (cancel) Cancel();
}

void SimAgent::OnWriteDone(bool ok) {
  Next n;
  {
    MutexLock lock(mu_);
    Slot done = in_flight_;
    in_flight_ = Slot::kNone;
    if (done == Slot::kBatch) {
      batch_busy_ = false;
      if (ok) {
        pool_->batches_sent_.fetch_add(1, std::memory_order_relaxed);
        pool_->results_sent_.fetch_add(pending_results_, std::memory_order_relaxed);
      }
    } else if (done == Slot::kHeartbeat) {
      hb_busy_ = false;
      if (ok) pool_->heartbeats_sent_.fetch_add(1, std::memory_order_relaxed);
    } else if (done == Slot::kTraces) {
      traces_busy_ = false;
      if (ok) pool_->trace_reports_.fetch_add(1, std::memory_order_relaxed);
    }
    if (!ok) over_ = true;
    n = PickLocked();
  }
  Perform(n);
}

void SimAgent::OnWritesDoneDone(bool) {
  // Nothing more will be written. The hold goes once the aggregator has ended the stream (the
  // read fails), which may already have happened while this operation was in flight.
  Next n;
  {
    MutexLock lock(mu_);
    in_flight_ = Slot::kNone;
    n = PickLocked();
  }
  Perform(n);
}

void SimAgent::OnReadDone(bool ok) {
  if (!ok) {
    Next n;
    {
      MutexLock lock(mu_);
      over_ = true;
      n = PickLocked();
    }
    Perform(n);
    return;
  }
  bool became_ready = false;
  Next n;
  if (in_.has_ack()) {
    pool_->acks_.fetch_add(1, std::memory_order_relaxed);
    uint64_t seq = in_.ack().seq();
    MutexLock lock(mu_);
    if (!ready_) {
      // The resume point: a new session id starts at 0, but honour whatever the aggregator holds.
      ready_ = became_ready = true;
      acked_seq_ = seq;
      next_seq_ = seq + 1;
      n = PickLocked();
    } else if (seq > acked_seq_ && seq < next_seq_ && next_seq_ - seq <= kRing) {
      uint64_t cum = cum_at_seq_[seq % kRing];
      if (cum > results_acked_cum_) {
        pool_->results_acked_.fetch_add(cum - results_acked_cum_, std::memory_order_relaxed);
        results_acked_cum_ = cum;
      }
      acked_seq_ = seq;
      n = PickLocked();  // a closed loop may be waiting for window space
    }
  } else if (in_.has_probe_plan()) {
    pool_->plans_.fetch_add(1, std::memory_order_relaxed);
    if (!planned_) {
      planned_ = true;
      pool_->planned_.fetch_add(1, std::memory_order_relaxed);
    }
    pool_->OnPlan(index_, in_.probe_plan());
  }
  StartRead(&in_);
  Perform(n);
  if (became_ready) pool_->OnReady();
}

void SimAgent::OnDone(const grpc::Status& status) {
  bool clean = status.ok();
  if (!clean) {
    spdlog::debug("msg=\"sim stream ended\" node={} code={} error=\"{}\"", hello_.hello().node(),
                  static_cast<int>(status.error_code()), status.error_message());
  }
  pool_->OnDone(clean);
}

}  // namespace

std::unique_ptr<AgentPool> AgentPool::Create(Options options, std::vector<v1::Hello> hellos) {
  return std::make_unique<PoolImpl>(std::move(options), std::move(hellos));
}

}  // namespace fw::sim
