// gRPC client session with reconnect, resend and heartbeats.
#include "daemon/agent/uplink.h"

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
std::shared_ptr<grpc::Channel> MakeChannel(const Uplink::Options& o) {
  auto ms = [](double s) { return static_cast<int>(s * 1000); };
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, ms(o.keepalive_time_s));
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, ms(o.keepalive_timeout_s));
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  args.SetInt(GRPC_ARG_ENABLE_RETRIES, 0);
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
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
  }
  cv_.NotifyAll();
  if (thread_.joinable()) thread_.join();
}

void Uplink::Notify() {
  {
    MutexLock lock(mu_);
    wake_ = true;
  }
  cv_.NotifyAll();
}

void Uplink::SendBestEffort(v1::AgentMessage msg) {
  {
    MutexLock lock(mu_);
    side_.push_back(std::move(msg));
    while (side_.size() > kMaxSideMessages) {
      side_.pop_front();
      side_dropped_.Inc();
    }
    wake_ = true;
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

void Uplink::RunSession() {
  auto channel = MakeChannel(options_);
  auto stub = v1::Aggregator::NewStub(channel);
  grpc::ClientContext ctx;
  {
    MutexLock lock(mu_);
    if (stopping_) return;
    active_context_ = &ctx;
    stream_broken_ = false;
  }
  auto clear_context = [&] {
    MutexLock lock(mu_);
    active_context_ = nullptr;
  };
  std::unique_ptr<grpc::ClientReaderWriter<v1::AgentMessage, v1::AggregatorMessage>> stream =
      stub->Connect(&ctx);
  v1::AgentMessage hello_msg;
  *hello_msg.mutable_hello() = hello_();
  if (!stream->Write(hello_msg)) {
    grpc::Status st = stream->Finish();
    connect_failures_.Inc();
    spdlog::warn("msg=\"cannot reach aggregator\" aggregator={} error=\"{}\"", options_.aggregator,
                 st.error_message());
    clear_context();
    return;
  }

  // Reader: acks and plans. It ends when the stream ends; it then wakes the writer.
  std::atomic<bool> got_first_ack{false};
  std::thread reader([&] {
    pthread_setname_np(pthread_self(), "fw-uplink-read");
    v1::AggregatorMessage in;
    while (stream->Read(&in)) {
      if (in.has_ack()) {
        buffer_.Ack(in.ack().seq());
        if (!got_first_ack.exchange(true)) {
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
    }
    MutexLock lock(mu_);
    stream_broken_ = true;
    cv_.NotifyAll();
  });

  auto next_heartbeat = std::chrono::steady_clock::now();
  bool ok = true;
  while (ok) {
    std::deque<v1::AgentMessage> side;
    bool heartbeat_due = false;
    {
      MutexLock lock(mu_);
      while (!stopping_ && !wake_ && !stream_broken_ && cv_.WaitUntil(mu_, next_heartbeat)) {
      }
      if (stopping_ || stream_broken_) break;
      wake_ = false;
      side.swap(side_);
      heartbeat_due = std::chrono::steady_clock::now() >= next_heartbeat;
    }
    // Batches are only sent once the aggregator has answered Hello with its resume point.
    if (got_first_ack.load()) {
      for (;;) {
        auto batches = buffer_.TakeUnsent(options_.max_batches_per_wake);
        if (batches.empty()) break;
        for (auto& b : batches) {
          v1::AgentMessage m;
          *m.mutable_probe_batch() = std::move(b);
          if (!stream->Write(m)) {
            ok = false;
            break;
          }
          batches_sent_.Inc();
        }
        if (!ok) break;
      }
    } else {
      MutexLock lock(mu_);
      wake_ = true;  // retry once the first ack lands
    }
    for (auto& m : side) {
      if (!ok || !stream->Write(m)) {
        ok = false;
        break;
      }
    }
    if (ok && heartbeat_due) {
      v1::AgentMessage hb;
      hb.mutable_heartbeat()->set_sent_unix_ns(RealClock::Get().WallNanos());
      hb.mutable_heartbeat()->set_buffered_batches(buffer_.size());
      hb.mutable_heartbeat()->set_dropped_batches(buffer_.dropped());
      ok = stream->Write(hb);
      if (ok) heartbeats_sent_.Inc();
      next_heartbeat =
          std::chrono::steady_clock::now() +
          std::chrono::milliseconds(static_cast<int64_t>(options_.heartbeat_interval_s * 1000));
    }
    if (!got_first_ack.load()) {
      // Avoid spinning while waiting for the first ack.
      const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(20);
      MutexLock lock(mu_);
      while (!stopping_ && !stream_broken_ && cv_.WaitUntil(mu_, until)) {
      }
    }
  }
  // Cancel only when the reader may still be blocked (Stop() or a failed write). When the stream
  // ended by itself, Finish() then reports why (e.g. a keepalive timeout) instead of CANCELLED.
  bool reader_ended;
  {
    MutexLock lock(mu_);
    reader_ended = stream_broken_;
  }
  if (!reader_ended) ctx.TryCancel();
  reader.join();
  grpc::Status st = stream->Finish();
  clear_context();
  if (connected_.exchange(false)) {
    connected_gauge_.Set(0);
    spdlog::warn("msg=\"disconnected\" aggregator={} code={} error=\"{}\"", options_.aggregator,
                 static_cast<int>(st.error_code()), st.error_message());
  } else {
    connect_failures_.Inc();
    spdlog::warn("msg=\"session failed\" aggregator={} code={} error=\"{}\"", options_.aggregator,
                 static_cast<int>(st.error_code()), st.error_message());
  }
}

}  // namespace fw::agent
