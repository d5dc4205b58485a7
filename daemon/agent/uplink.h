// The agent's session with the aggregator: Hello, batches with acks, heartbeats, reconnects.
//
// Only uplink.cc includes grpcpp. One thread (`fw-uplink`) runs the sessions one after the other,
// each on gRPC's async API: the bidi stream's reads, writes and a wake-up alarm complete on one
// completion queue that this thread alone drains. Other threads only hand work over (Notify,
// SendBestEffort) and arm the alarm; Stop() cancels the ClientContext.
#pragma once

#include <atomic>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "common/backoff.h"
#include "common/clock.h"
#include "common/mutex.h"
#include "common/tls/tls_config.h"
#include "daemon/agent/outbound_buffer.h"
#include "exporter/registry.h"
#include "fabricwatch.pb.h"

namespace fw::agent {

class Uplink {
 public:
  struct Options {
    std::string aggregator = "127.0.0.1:9750";
    // mTLS material (this node's certificate, named after the node, and the fleet CA); nullopt
    // is plaintext (--insecure). The aggregator's certificate must name the host of `aggregator`.
    std::optional<tls::TlsMaterial> tls;
    double heartbeat_interval_s = 5;
    double backoff_base_s = 0.5;
    double backoff_max_s = 30;
    // HTTP/2 keepalive (docs/uplink.md): a ping after `keepalive_time_s` without a read, and the
    // connection is closed when its ack (or, through TCP_USER_TIMEOUT, the TCP ack of any data
    // sent) is `keepalive_timeout_s` late. The aggregator must permit pings at least this often
    // (its GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS), or it answers GOAWAY
    // too_many_pings. A silently vanished aggregator is noticed within time + timeout.
    double keepalive_time_s = 20;
    double keepalive_timeout_s = 10;
    size_t max_batches_per_wake = 64;
  };
  using HelloFn = std::function<fabricwatch::v1::Hello()>;
  using PlanFn = std::function<void(const fabricwatch::v1::ProbePlan&)>;
  using ConnectedFn = std::function<void()>;

  // `on_connected` runs on the uplink's thread each time a session is established (first ack).
  Uplink(Options options, OutboundBuffer& buffer, HelloFn hello, PlanFn on_plan,
         metrics::Registry& registry, ConnectedFn on_connected = nullptr);
  ~Uplink();

  void Start();
  // Cancels the stream and joins the threads. Idempotent.
  void Stop();
  // Wakes the writer because the buffer has new batches.
  void Notify();
  // Best-effort, unacknowledged messages (counter samples, check reports). Only the newest
  // `kMaxSideMessages` are kept while disconnected.
  void SendBestEffort(fabricwatch::v1::AgentMessage msg);
  // Aggregator messages the uplink does not handle itself (collective jobs, rendezvous replies).
  // Runs on the uplink's thread and must not block (no write goes out meanwhile). Set before
  // Start().
  using MessageFn = std::function<void(const fabricwatch::v1::AggregatorMessage&)>;
  void SetMessageHandler(MessageFn fn) { on_message_ = std::move(fn); }

  // While a hold is taken, hand-overs (Notify, SendBestEffort) queue their work without waking
  // the session's loop; releasing the last hold wakes it once for all of them, and the loop
  // writes them back to back. The report loop holds the uplink across one wakeup (the probe
  // batch, the counter batch, a check report), so that the uplink wakes once a period instead of
  // once per message. Every thread's hand-overs wait for the release, a report wakeup's length
  // (milliseconds). Holds nest.
  class WakeHold {
   public:
    explicit WakeHold(Uplink& uplink) : uplink_(uplink) { uplink_.HoldWakes(); }
    ~WakeHold() { uplink_.ReleaseWakes(); }
    WakeHold(const WakeHold&) = delete;
    WakeHold& operator=(const WakeHold&) = delete;

   private:
    Uplink& uplink_;
  };
  void HoldWakes();
  void ReleaseWakes();

  bool connected() const { return connected_.load(); }
  // How often a hand-over armed the session's wake-up alarm (each is one wakeup of the uplink's
  // thread, the writes' completions and the acks not counted).
  uint64_t handover_wakes() const { return handover_wakes_.load(); }
  uint64_t reconnects() const { return static_cast<uint64_t>(reconnects_.Value()); }

  static constexpr size_t kMaxSideMessages = 16;

 private:
  void Run();
  // One connection's life; returns when the stream ends or Stop() is called.
  void RunSession();
  bool SleepInterruptible(double seconds);
  // Arms the session's alarm so that its loop wakes up (no-op between sessions or when armed);
  // whether it armed it.
  bool WakeSessionLocked() FW_REQUIRES(mu_);
  // A hand-over's wake-up: now, or at the release of the last hold.
  void HandOverLocked() FW_REQUIRES(mu_);

  Options options_;
  OutboundBuffer& buffer_;
  HelloFn hello_;
  PlanFn on_plan_;
  ConnectedFn on_connected_;
  MessageFn on_message_;
  Backoff backoff_;
  std::thread thread_;

  Mutex mu_;
  CondVar cv_;
  bool stopping_ FW_GUARDED_BY(mu_) = false;
  bool wake_ FW_GUARDED_BY(mu_) = false;
  std::deque<fabricwatch::v1::AgentMessage> side_ FW_GUARDED_BY(mu_);
  void* active_context_ FW_GUARDED_BY(mu_) = nullptr;  // grpc::ClientContext*
  // The running session's completion queue and alarm (nullptr between sessions); the alarm is
  // armed at most once at a time.
  void* session_cq_ FW_GUARDED_BY(mu_) = nullptr;     // grpc::CompletionQueue*
  void* session_alarm_ FW_GUARDED_BY(mu_) = nullptr;  // grpc::Alarm*
  bool alarm_armed_ FW_GUARDED_BY(mu_) = false;
  int holds_ FW_GUARDED_BY(mu_) = 0;
  bool held_wake_ FW_GUARDED_BY(mu_) = false;  // a hand-over came while held
  std::atomic<uint64_t> handover_wakes_{0};
  std::atomic<bool> connected_{false};

  metrics::Gauge& connected_gauge_;
  metrics::Counter& reconnects_;
  metrics::Counter& connect_failures_;
  metrics::Counter& batches_sent_;
  metrics::Counter& heartbeats_sent_;
  metrics::Counter& side_dropped_;
  metrics::Gauge& buffered_gauge_;
  metrics::Gauge& buffer_dropped_gauge_;
  metrics::Gauge& acked_seq_gauge_;
};

}  // namespace fw::agent
