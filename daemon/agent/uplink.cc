// gRPC client session with reconnect, resend and heartbeats.
#include "daemon/agent/uplink.h"

#include <grpcpp/alarm.h>
#include <grpcpp/grpcpp.h>
#include <pthread.h>
#include <spdlog/spdlog.h>

#include <random>

#include "common/tls/grpc_credentials.h"
#include "fabricwatch.grpc.pb.h"

namespace fw::agent {

namespace v1 = fabricwatch::v1;

namespace {

// The channel of one session. Without keepalive a silently vanished aggregator (host gone, a
// firewall or a cable that drops instead of rejecting) is noticed only when TCP gives up
// retransmitting, about 15 minutes with the default tcp_retries2.
//
// Values (gRPC 1.51, doc/keepalive.md and the TCP_USER_TIMEOUT proposal A18):
// - KEEPALIVE_TIME 20 s: a ping once 20 s passed without anything read from the aggregator
//   (gRPC resets the timer on every read, so while acks flow no ping is sent at all). Well above
//   the aggregator's 5 s minimum ping interval (it would answer a faster client with GOAWAY
//   too_many_pings after two strikes).
// - KEEPALIVE_TIMEOUT 10 s: the ping ack must arrive within 10 s. gRPC also sets the socket's
//   TCP_USER_TIMEOUT to this value, so data left unacknowledged for 10 s (the heartbeats and
//   batches the agent keeps writing) closes the connection too, usually before the ping does.
//   10 s is far above any round trip inside one cluster, even under load.
// - PERMIT_WITHOUT_CALLS 1: the Connect stream is always open, but the ping must also cover the
//   moment between a stream's end and the next one.
// - MAX_PINGS_WITHOUT_DATA 0: the default (2) stops pinging after two pings with no data frame
//   between them, so an agent with nothing to write (or whose writes are stuck behind flow
//   control toward a dead peer) would stop probing the connection exactly when it matters.
// Worst case: the agent writes at least a heartbeat every 5 s, so TCP_USER_TIMEOUT closes a dead
// connection <= 5 + 10 = 15 s after the drop (10.5 s measured, batches go out every second); the
// ping bounds it at 20 + 10 = 30 s should writes stop. The first retry follows within
// backoff_base_s (0.5 s: the backoff was reset when the session was established), and a connect to
// a still unreachable aggregator fails after gRPC's 20 s minimum connect timeout; see
// docs/uplink.md for the whole arithmetic.
//
// For the one long-lived stream:
// - ENABLE_RETRIES 0: gRPC's retry layer would keep a copy of every message sent until the stream
//   commits, and could replay the stream's start by itself; the uplink resends from its own buffer
//   (OutboundBuffer) on a new stream instead.
// - USE_LOCAL_SUBCHANNEL_POOL 1: each session's channel makes a connection of its own, never one
//   from the process-wide pool that a previous session's channel may still hold.
// - HTTP2_BDP_PROBE 0: gRPC's bandwidth-delay estimator pings the aggregator after data arrives,
//   to grow the receive window for bulk transfers; the agent receives acks and plans, a few kB a
//   second, so those pings (one every 1-2 s, each a timer wakeup here and a ping answered by the
//   aggregator; strace of an agent, docs/performance.md) bought nothing.
std::shared_ptr<grpc::Channel> MakeChannel(const Uplink::Options& o) {
  auto ms = [](double s) { return static_cast<int>(s * 1000); };
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, ms(o.keepalive_time_s));
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, ms(o.keepalive_timeout_s));
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  args.SetInt(GRPC_ARG_ENABLE_RETRIES, 0);
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  args.SetInt(GRPC_ARG_HTTP2_BDP_PROBE, 0);
  return grpc::CreateCustomChannel(o.aggregator, tls::ChannelCredentials(o.tls), args);
}

}  // namespace

Uplink::Uplink(Options options, OutboundBuffer& buffer, HelloFn hello, PlanFn on_plan,
               metrics::Registry& registry, ConnectedFn on_connected)
    : options_(std::move(options)),
      buffer_(buffer),
      hello_(std::move(hello)),
      on_plan_(std::move(on_plan)),
      on_connected_(std::move(on_connected)),
      backoff_(options_.backoff_base_s, options_.backoff_max_s, std::random_device{}()),
      connected_gauge_(registry
                           .AddGauge("fabricwatch_uplink_connected",
                                     "1 while the session with the aggregator is established.")
                           .WithLabels({})),
      reconnects_(registry
                      .AddCounter("fabricwatch_uplink_reconnects_total",
                                  "Sessions established after the first.")
                      .WithLabels({})),
      connect_failures_(registry
                            .AddCounter("fabricwatch_uplink_connect_failures_total",
                                        "Attempts to reach the aggregator that failed.")
                            .WithLabels({})),
      batches_sent_(registry
                        .AddCounter("fabricwatch_uplink_batches_sent_total",
                                    "Probe batches written to the stream, resends included.")
                        .WithLabels({})),
      heartbeats_sent_(
          registry.AddCounter("fabricwatch_uplink_heartbeats_sent_total", "Heartbeats sent.")
              .WithLabels({})),
      side_dropped_(registry
                        .AddCounter("fabricwatch_uplink_side_messages_dropped_total",
                                    "Counter samples and check reports dropped while "
                                    "disconnected (only the newest are kept).")
                        .WithLabels({})),
      buffered_gauge_(registry
                          .AddGauge("fabricwatch_uplink_buffered_batches",
                                    "Probe batches waiting for an acknowledgement.")
                          .WithLabels({})),
      buffer_dropped_gauge_(registry
                                .AddGauge("fabricwatch_uplink_buffer_dropped_batches",
                                          "Probe batches dropped because the buffer was full.")
                                .WithLabels({})),
      acked_seq_gauge_(registry
                           .AddGauge("fabricwatch_uplink_acked_seq",
                                     "Highest batch sequence the aggregator acknowledged.")
                           .WithLabels({})) {
  registry.AddBeforeRender([this] {
    buffered_gauge_.Set(static_cast<double>(buffer_.size()));
    buffer_dropped_gauge_.Set(static_cast<double>(buffer_.dropped()));
    acked_seq_gauge_.Set(static_cast<double>(buffer_.acked()));
  });
}

Uplink::~Uplink() { Stop(); }

void Uplink::Start() {
  thread_ = std::thread([this] {
    pthread_setname_np(pthread_self(), "fw-uplink");
    Run();
  });
}

void Uplink::Stop() {
  {
    MutexLock lock(mu_);
    if (stopping_ && !thread_.joinable()) return;
    stopping_ = true;
    if (active_context_ != nullptr) static_cast<grpc::ClientContext*>(active_context_)->TryCancel();
    (void)WakeSessionLocked();
  }
  cv_.NotifyAll();
  if (thread_.joinable()) thread_.join();
}

void Uplink::Notify() {
  {
    MutexLock lock(mu_);
    HandOverLocked();
  }
  cv_.NotifyAll();
}

void Uplink::HoldWakes() {
  MutexLock lock(mu_);
  ++holds_;
}

void Uplink::ReleaseWakes() {
  MutexLock lock(mu_);
  if (--holds_ > 0 || !held_wake_) return;
  held_wake_ = false;
  if (WakeSessionLocked()) handover_wakes_.fetch_add(1, std::memory_order_relaxed);
}

void Uplink::HandOverLocked() {
  wake_ = true;
  if (holds_ > 0) {
    held_wake_ = true;
    return;
  }
  if (WakeSessionLocked()) handover_wakes_.fetch_add(1, std::memory_order_relaxed);
}

void Uplink::SendBestEffort(v1::AgentMessage msg) {
  {
    MutexLock lock(mu_);
    side_.push_back(std::move(msg));
    while (side_.size() > kMaxSideMessages) {
      side_.pop_front();
      side_dropped_.Inc();
    }
    HandOverLocked();
  }
  cv_.NotifyAll();
}

bool Uplink::SleepInterruptible(double seconds) {
  const auto deadline =
      std::chrono::steady_clock::now() +
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::duration<double>(seconds));
  MutexLock lock(mu_);
  while (!stopping_ && cv_.WaitUntil(mu_, deadline)) {
  }
  return !stopping_;
}

void Uplink::Run() {
  bool first = true;
  for (;;) {
    {
      MutexLock lock(mu_);
      if (stopping_) break;
    }
    if (!first) reconnects_.Inc();
    first = false;
    RunSession();
    buffer_.RewindForResend();
    {
      MutexLock lock(mu_);
      if (stopping_) break;
    }
    double delay = backoff_.Next();
    spdlog::info("msg=\"reconnecting\" aggregator={} in_s={:.2f} attempt={}", options_.aggregator,
                 delay, backoff_.attempt());
    if (!SleepInterruptible(delay)) break;
  }
}

namespace {

// Completion-queue tags of one session: at most one of each is outstanding.
enum class Op : intptr_t { kStart = 1, kRead, kWrite, kFinish, kWake };
void* TagOf(Op op) { return reinterpret_cast<void*>(static_cast<intptr_t>(op)); }
Op OpOf(void* tag) { return static_cast<Op>(reinterpret_cast<intptr_t>(tag)); }

}  // namespace

bool Uplink::WakeSessionLocked() {
  if (session_alarm_ == nullptr || alarm_armed_) return false;
  alarm_armed_ = true;
  // A deadline in the past: the alarm's tag is queued at once.
  static_cast<grpc::Alarm*>(session_alarm_)
      ->Set(static_cast<grpc::CompletionQueue*>(session_cq_), gpr_time_0(GPR_CLOCK_MONOTONIC),
            TagOf(Op::kWake));
  return true;
}

// One session on gRPC's async API, driven from this one thread: at most one read, one write and
// one wake-up alarm outstanding on the session's completion queue. Other threads hand work over
// under mu_ (Notify, SendBestEffort, Stop) and arm the alarm to wake the loop. The session ends
// when the stream breaks (a failed read or write) or on Stop(); it then waits for every
// outstanding operation, finishes the call and drains the queue before anything is destroyed.
void Uplink::RunSession() {
  auto channel = MakeChannel(options_);
  auto stub = v1::Aggregator::NewStub(channel);
  grpc::ClientContext ctx;
  grpc::CompletionQueue cq;
  grpc::Alarm alarm;
  {
    MutexLock lock(mu_);
    if (stopping_) return;
    active_context_ = &ctx;
    session_cq_ = &cq;
    session_alarm_ = &alarm;
    alarm_armed_ = false;
  }
  std::unique_ptr<grpc::ClientAsyncReaderWriter<v1::AgentMessage, v1::AggregatorMessage>> stream =
      stub->PrepareAsyncConnect(&ctx, &cq);
  stream->StartCall(TagOf(Op::kStart));

  std::deque<v1::AgentMessage> out;  // written in order, one at a time
  *out.emplace_back().mutable_hello() = hello_();
  v1::AgentMessage writing;  // the message of the outstanding write
  v1::AggregatorMessage in;  // the target of the outstanding read
  bool start_pending = true, read_pending = false, write_pending = false;
  bool finish_pending = false, finished = false;
  bool broken = false, read_ended = false, cancelled = false, hello_written = false;
  bool got_first_ack = false;
  grpc::Status st;
  auto next_heartbeat = std::chrono::steady_clock::now();
  const auto heartbeat_period =
      std::chrono::milliseconds(static_cast<int64_t>(options_.heartbeat_interval_s * 1000));

  // Next messages to write once `out` is empty: batches (only once the aggregator has answered
  // Hello with its resume point), then the side messages, then a heartbeat when one is due.
  auto refill = [&] {
    std::deque<v1::AgentMessage> side;
    {
      MutexLock lock(mu_);
      wake_ = false;
      side.swap(side_);
    }
    if (got_first_ack) {
      for (auto& b : buffer_.TakeUnsent(options_.max_batches_per_wake)) {
        *out.emplace_back().mutable_probe_batch() = std::move(b);
      }
    }
    for (auto& m : side) out.push_back(std::move(m));
    const auto now = std::chrono::steady_clock::now();
    if (now >= next_heartbeat) {
      v1::AgentMessage& hb = out.emplace_back();
      hb.mutable_heartbeat()->set_sent_unix_ns(RealClock::Get().WallNanos());
      hb.mutable_heartbeat()->set_buffered_batches(buffer_.size());
      hb.mutable_heartbeat()->set_dropped_batches(buffer_.dropped());
      next_heartbeat = now + heartbeat_period;
    }
  };

  auto start_read = [&] {
    stream->Read(&in, TagOf(Op::kRead));
    read_pending = true;
  };

  while (!finished) {
    if (!broken) {
      MutexLock lock(mu_);
      if (stopping_) broken = true;
    }
    if (!broken && !start_pending && !write_pending) {
      if (out.empty()) refill();
      if (!out.empty()) {
        writing = std::move(out.front());
        out.pop_front();
        stream->Write(writing, TagOf(Op::kWrite));
        write_pending = true;
      }
    }
    if (broken) {
      // Cancel only when a read may still be waiting (Stop() or a failed write). When the stream
      // ended by itself, Finish() then reports why (e.g. a keepalive timeout), not CANCELLED.
      if (!read_ended && !cancelled) {
        ctx.TryCancel();
        cancelled = true;
      }
      if (!start_pending && !read_pending && !write_pending && !finish_pending) {
        stream->Finish(&st, TagOf(Op::kFinish));
        finish_pending = true;
      }
    }
    void* tag = nullptr;
    bool ok = false;
    // The next heartbeat is the only deadline, and only while a write could start; otherwise a
    // completion or the alarm wakes the loop (the 1 s bound is a fallback, not a poll).
    const auto wait = broken || start_pending || write_pending
                          ? std::chrono::milliseconds(1000)
                          : std::chrono::duration_cast<std::chrono::milliseconds>(
                                next_heartbeat - std::chrono::steady_clock::now());
    const auto status = cq.AsyncNext(
        &tag, &ok, std::chrono::system_clock::now() + std::max(wait, std::chrono::milliseconds(0)));
    if (status == grpc::CompletionQueue::TIMEOUT) continue;
    if (status == grpc::CompletionQueue::SHUTDOWN) break;  // not before the cq.Shutdown() below
    switch (OpOf(tag)) {
      case Op::kStart:
        start_pending = false;
        if (!ok) {
          broken = true;
          read_ended = true;  // no read was started
        } else {
          start_read();
        }
        break;
      case Op::kRead:
        read_pending = false;
        if (!ok) {
          broken = true;
          read_ended = true;
          break;
        }
        if (in.has_ack()) {
          buffer_.Ack(in.ack().seq());
          if (!got_first_ack) {
            got_first_ack = true;
            connected_ = true;
            connected_gauge_.Set(1);
            backoff_.Reset();
            spdlog::info("msg=\"connected\" aggregator={} resume_ack={}", options_.aggregator,
                         in.ack().seq());
            if (on_connected_) on_connected_();
          }
        } else if (in.has_probe_plan()) {
          if (on_plan_) on_plan_(in.probe_plan());
        } else if (on_message_) {
          on_message_(in);
        }
        if (!broken) start_read();
        break;
      case Op::kWrite:
        write_pending = false;
        if (!ok) {
          broken = true;
          break;
        }
        if (writing.has_hello()) {
          hello_written = true;
        } else if (writing.has_probe_batch()) {
          batches_sent_.Inc();
        } else if (writing.has_heartbeat()) {
          heartbeats_sent_.Inc();
        }
        break;
      case Op::kFinish:
        finish_pending = false;
        finished = true;
        break;
      case Op::kWake: {
        MutexLock lock(mu_);
        alarm_armed_ = false;
        break;
      }
    }
  }
  {
    MutexLock lock(mu_);
    active_context_ = nullptr;
    session_cq_ = nullptr;
    session_alarm_ = nullptr;
    if (alarm_armed_) alarm.Cancel();  // its tag comes back (not ok) in the drain below
    alarm_armed_ = false;
  }
  cq.Shutdown();
  {
    void* tag = nullptr;
    bool ok = false;
    while (cq.Next(&tag, &ok)) {
    }
  }
  if (connected_.exchange(false)) {
    connected_gauge_.Set(0);
    spdlog::warn("msg=\"disconnected\" aggregator={} code={} error=\"{}\"", options_.aggregator,
                 static_cast<int>(st.error_code()), st.error_message());
  } else if (!hello_written) {
    connect_failures_.Inc();
    spdlog::warn("msg=\"cannot reach aggregator\" aggregator={} error=\"{}\"", options_.aggregator,
                 st.error_message());
  } else {
    connect_failures_.Inc();
    spdlog::warn("msg=\"session failed\" aggregator={} code={} error=\"{}\"", options_.aggregator,
                 static_cast<int>(st.error_code()), st.error_message());
  }
}

}  // namespace fw::agent
