// Agent sessions on gRPC's async API: one read in flight, a write queue, never blocking.
//
// Every call, the unary Qualify and ListFindings too, is served on Options::completion_queues
// completion queues, each drained by a thread of its own (docs/performance.md, "Aggregator
// ingest"): libgrpc as Debian builds it (without NDEBUG) searches every operation outstanding on a
// queue at each completion, so one queue for every stream (the callback API's) costs O(streams) per
// completion, and the callback API's executor hands each completion to another thread besides. A
// small fleet is served on one queue all the same (GrpcServer::CompletionQueuesFor): up to a few
// thousand streams the scan costs less than handing completions between the queues' threads.
#include "daemon/aggregator/ingest/ingest_service.h"

#include <google/protobuf/arena.h>
#include <grpcpp/grpcpp.h>
#include <pthread.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <deque>
#include <map>
#include <thread>
#include <utility>
#include <vector>

#include "common/mutex.h"
#include "common/tls/grpc_credentials.h"
#include "daemon/aggregator/ingest/ack_pacer.h"
#include "daemon/aggregator/ingest/group_commit_queue.h"
#include "daemon/aggregator/ingest/ingest_journal.h"
#include "daemon/aggregator/ingest/peer_identity.h"
#include "exporter/registry.h"
#include "fabricwatch.grpc.pb.h"

namespace fw::aggregator {

namespace v1 = fabricwatch::v1;

namespace {

class Service;

// Every tag on the server's completion queues: the queue's thread calls OnComplete with the
// operation's outcome.
class CqTag {
 public:
  virtual void OnComplete(bool ok) = 0;

 protected:
  ~CqTag() = default;
};

// One agent stream, from its RequestConnect on one completion queue to its end. Lifetime: it owns
// itself (`self_`) from Request() until OnDone(), which runs once Finish and every read and write
// have completed; once accepted, Service's session table holds a reference too, and threads that
// push plans or drain hold their own copy while they work.
// Threading: every completion of the call arrives on its queue's one thread (reads, and so message
// handling, run there one at a time); writes are also started from other threads (acks, plans).
// `mu_` guards the write queue and the finishing state. gRPC operations (StartWrite, StartRead,
// Finish) are decided under `mu_` but started after releasing it.
class AgentSession final : public std::enable_shared_from_this<AgentSession> {
 public:
  AgentSession(Service* service, grpc::ServerCompletionQueue* cq) : service_(service), cq_(cq) {}
  // Asks gRPC for the next Connect call on cq_. `self` is this session's own reference.
  void Request(std::shared_ptr<AgentSession> self);
  struct Tag;
  // A completion of `tag` (one of this session's) on its queue's thread.
  static void OnEvent(const Tag* tag, bool ok);

  // Queues a message; coalesces consecutive acks so a slow agent cannot grow the queue unboundedly.
  void Enqueue(v1::AggregatorMessage msg);
  // Queues the current plan if this session's node is one `wanted` accepts.
  void PushPlan(const std::function<bool(const std::string&)>& wanted);
  void Drain();
  // A newer session for this node said Hello: end this stream; nothing more is stored from it.
  void Supersede();
  uint64_t conn_id() const { return conn_id_; }
  // The call gRPC runs this session on (to drop it unanswered when the server stops).
  grpc::ServerContext& context() { return ctx_; }
  // The node its Hello named; empty before.
  std::string node() FW_EXCLUDES(mu_) {
    MutexLock lock(mu_);
    return node_;
  }

 private:
  // gRPC operations decided under mu_, performed after it is released.
  struct Actions {
    const v1::AggregatorMessage* write = nullptr;
    bool read = false;
    std::optional<grpc::Status> finish;
    uint64_t supersede_conn = 0;  // another stream of the node to end (a takeover)
    // A collective message for the sink, handed over once mu_ is released: the sink answers on
    // streams, this one's included.
    std::string node;
    std::optional<v1::KvRequest> kv_request;
    std::optional<v1::CollectiveResult> collective_result;
    std::optional<v1::RdmaRcConnect> rdma_rc_connect;
  };
  enum class Op { kAccept, kRead, kWrite, kFinish };

 public:
  struct Tag final : CqTag {
    Tag(AgentSession* s, Op o) : session(s), op(o) {}
    void OnComplete(bool ok) override { AgentSession::OnEvent(this, ok); }
    AgentSession* session;
    Op op;
  };

 private:
  void OnAccepted(bool ok);
  void OnReadDone(bool ok);
  void OnWriteDone(bool ok);
  void OnDone();
  // Each counts the operation in `pending_` before starting it.
  void StartRead(v1::AgentMessage* msg);
  void StartWrite(const v1::AggregatorMessage* msg);
  void Finish(grpc::Status st);

  void Perform(Actions a);
  void HandleMessage(Actions& a) FW_REQUIRES(mu_);
  void EnqueueLocked(v1::AggregatorMessage msg, Actions& a) FW_REQUIRES(mu_);
  void FinishLocked(grpc::Status st, Actions& a) FW_REQUIRES(mu_);

  // Resets the read arena and returns a fresh message on it for the next read.
  v1::AgentMessage* NextIn();

  Service* service_;
  grpc::ServerCompletionQueue* cq_;
  grpc::ServerContext ctx_;
  grpc::ServerAsyncReaderWriter<v1::AggregatorMessage, v1::AgentMessage> stream_{&ctx_};
  Tag accept_tag_{this, Op::kAccept};
  Tag read_tag_{this, Op::kRead};
  Tag write_tag_{this, Op::kWrite};
  Tag finish_tag_{this, Op::kFinish};
  std::shared_ptr<AgentSession> self_;  // from Request() until OnDone()
  // Reads, writes and the finish started and not yet completed; OnDone runs when the last of them
  // completes after the finish did.
  std::atomic<int> pending_{0};
  std::atomic<bool> finish_done_{false};
  bool reading_ = false;  // only the queue's thread touches it
  // Set once when the call is accepted, before the first read, and constant afterwards.
  uint64_t conn_id_ = 0;
  std::string peer_;
  PeerIdentity identity_;  // from the TLS handshake; Hello.node must be one of its names
  // Each read parses into a message on `arena_`, reset before the next read: a ProbeBatch's
  // dozen column arrays come from the session's own block instead of a malloc and a free each.
  // Only the read path touches it (the constructor, then OnReadDone's Perform), one read at a time.
  static constexpr size_t kReadBlockBytes = 4096;  // a typical batch (~40 rows) fits
  std::unique_ptr<char[]> read_block_ = std::make_unique<char[]>(kReadBlockBytes);
  google::protobuf::Arena arena_{[this] {
    google::protobuf::ArenaOptions o;
    o.initial_block = read_block_.get();
    o.initial_block_size = kReadBlockBytes;
    o.max_block_size = 64 << 10;
    return o;
  }()};
  v1::AgentMessage* in_ = nullptr;  // on arena_; owned by the single outstanding read
  Mutex mu_;
  std::string node_ FW_GUARDED_BY(mu_);  // set by Hello
  std::unique_ptr<SessionProbeState> probe_state_ FW_GUARDED_BY(mu_);  // the sink's
  // The front is in flight when writing_.
  std::deque<v1::AggregatorMessage> queue_ FW_GUARDED_BY(mu_);
  bool writing_ FW_GUARDED_BY(mu_) = false;
  bool draining_ FW_GUARDED_BY(mu_) = false;
  bool finished_ FW_GUARDED_BY(mu_) = false;
  bool superseded_ FW_GUARDED_BY(mu_) = false;
  std::optional<grpc::Status> finish_after_writes_ FW_GUARDED_BY(mu_);
};

// A unary call (Qualify, ListFindings) from its request on one completion queue to the completion
// of its Finish; it owns itself and is deleted then (or when its request ends unanswered). Its
// handler answers through a Reply, on any thread and at any time: the first answer, the handler's
// or the server's shutdown (Service::CloseUnary, UNAVAILABLE), finishes the call, a later one is
// dropped. The Reply holds only the shared Slot, so a handler that answers after the server is
// gone touches no gRPC object.
class UnaryCallBase : public CqTag {
 public:
  struct Slot {
    Mutex mu;
    UnaryCallBase* call FW_GUARDED_BY(mu) = nullptr;  // null once answered
  };
  // The call, if this is the first claim on it: the caller must then FinishWith it.
  static UnaryCallBase* Claim(Slot& slot) FW_EXCLUDES(slot.mu) {
    MutexLock lock(slot.mu);
    return std::exchange(slot.call, nullptr);
  }
  // Starts the Finish with the response written so far (sent only with an OK status).
  virtual void FinishWith(grpc::Status st) = 0;

 protected:
  ~UnaryCallBase() = default;
};

template <typename Req, typename Resp>
class UnaryCall final : public UnaryCallBase {
 public:
  // Asks gRPC for the next call of this method on `cq`, completing `tag` there.
  using Requester = std::function<void(grpc::ServerContext*, Req*,
                                       grpc::ServerAsyncResponseWriter<Resp>*,
                                       grpc::ServerCompletionQueue* cq, void* tag)>;
  using Reply = std::function<void(grpc::Status, const Resp&)>;
  // Runs on the queue's thread once a call arrives; must not block.
  using Handler = std::function<void(const Req&, Reply)>;

  // Requests the first call; every accepted call requests the next in its place.
  static void Await(Service* service, grpc::ServerCompletionQueue* cq,
                    std::shared_ptr<const Requester> request, std::shared_ptr<const Handler> handle) {
    auto* c = new UnaryCall(service, cq, std::move(request), std::move(handle));
    (*c->request_)(&c->ctx_, &c->req_, &c->responder_, cq, static_cast<CqTag*>(c));
  }

  void OnComplete(bool ok) override;
  void FinishWith(grpc::Status st) override {
    responder_.Finish(resp_, std::move(st), static_cast<CqTag*>(this));
  }

 private:
  UnaryCall(Service* service, grpc::ServerCompletionQueue* cq,
            std::shared_ptr<const Requester> request, std::shared_ptr<const Handler> handle)
      : service_(service), cq_(cq), request_(std::move(request)), handle_(std::move(handle)) {}
  ~UnaryCall() = default;

  Service* service_;
  grpc::ServerCompletionQueue* cq_;
  std::shared_ptr<const Requester> request_;
  std::shared_ptr<const Handler> handle_;
  grpc::ServerContext ctx_;
  Req req_;
  Resp resp_;
  grpc::ServerAsyncResponseWriter<Resp> responder_{&ctx_};
  std::shared_ptr<Slot> slot_ = std::make_shared<Slot>();
  bool accepted_ = false;  // the first completion is the request's, the second the Finish's
};

grpc::StatusCode ToGrpcCode(StatusCode code) {
  switch (code) {
    case StatusCode::kInvalidArgument:
      return grpc::StatusCode::INVALID_ARGUMENT;
    case StatusCode::kResourceExhausted:
      return grpc::StatusCode::RESOURCE_EXHAUSTED;
    case StatusCode::kUnavailable:
      return grpc::StatusCode::UNAVAILABLE;
    case StatusCode::kUnimplemented:
      return grpc::StatusCode::UNIMPLEMENTED;
    default:
      return grpc::StatusCode::INTERNAL;
  }
}

class Service final : public v1::Aggregator::AsyncService {
 public:
  Service(FleetState& fleet, IngestSink& sink, metrics::Registry& registry)
      : fleet_(fleet),
        sink_(sink),
        sessions_gauge_(
            registry.AddGauge("fabricwatch_grpc_sessions", "Open agent streams.").WithLabels({})),
        protocol_errors_(registry.AddCounter("fabricwatch_ingest_protocol_errors_total",
                                             "Agent streams ended for a protocol violation.",
                                             {"reason"})) {}

  // Keeps one Connect request outstanding on `cq`.
  void AwaitConnect(grpc::ServerCompletionQueue* cq) {
    auto s = std::make_shared<AgentSession>(this, cq);
    s->Request(s);
  }

  // A Connect call arrived on `cq` for `s`: the session joins the table, and the next request takes
  // its place. False once the server stops accepting (the caller drops the call, starting no
  // operation: the queues may be shutting down).
  bool Accepted(const std::shared_ptr<AgentSession>& s, grpc::ServerCompletionQueue* cq,
                uint64_t* conn_id) {
    MutexLock accept_lock(accept_mu_);
    if (!accepting_) return false;
    *conn_id = next_conn_.fetch_add(1) + 1;
    {
      MutexLock lock(mu_);
      sessions_[s.get()] = s;
      sessions_gauge_.Set(static_cast<double>(sessions_.size()));
    }
    AwaitConnect(cq);
    return true;
  }

  // No call is accepted after this; Accepted() returns false.
  void StopAccepting() {
    MutexLock lock(accept_mu_);
    accepting_ = false;
  }

  using QualifyCall = UnaryCall<v1::QualifyRequest, v1::QualifyReport>;
  using ListFindingsCall = UnaryCall<v1::ListFindingsRequest, v1::ListFindingsResponse>;

  // Keeps one Qualify and one ListFindings request outstanding on `cq`.
  void AwaitUnary(grpc::ServerCompletionQueue* cq) {
    // The same jobs as POST /api/v1/qualify; the sink answers on a thread of its own, so the
    // queue's thread does not wait while the suite runs.
    QualifyCall::Await(
        this, cq,
        std::make_shared<const QualifyCall::Requester>(
            [this](grpc::ServerContext* ctx, v1::QualifyRequest* req,
                   grpc::ServerAsyncResponseWriter<v1::QualifyReport>* w,
                   grpc::ServerCompletionQueue* q, void* tag) {
              RequestQualify(ctx, req, w, q, q, tag);
            }),
        std::make_shared<const QualifyCall::Handler>(
            [this](const v1::QualifyRequest& req, QualifyCall::Reply reply) {
              sink_.Qualify(req, [reply = std::move(reply)](Status st,
                                                            const v1::QualifyReport& out) {
                reply(st.ok() ? grpc::Status::OK
                              : grpc::Status(ToGrpcCode(st.code()), st.message()),
                      out);
              });
            }));
    ListFindingsCall::Await(
        this, cq,
        std::make_shared<const ListFindingsCall::Requester>(
            [this](grpc::ServerContext* ctx, v1::ListFindingsRequest* req,
                   grpc::ServerAsyncResponseWriter<v1::ListFindingsResponse>* w,
                   grpc::ServerCompletionQueue* q, void* tag) {
              RequestListFindings(ctx, req, w, q, q, tag);
            }),
        std::make_shared<const ListFindingsCall::Handler>(
            [](const v1::ListFindingsRequest&, ListFindingsCall::Reply reply) {
              // Findings are served by GET /api/v1/findings; answering OK with an empty list
              // here would claim a healthy fabric.
              reply(grpc::Status(grpc::StatusCode::UNIMPLEMENTED,
                                 "use GET /api/v1/findings on the aggregator's HTTP port"),
                    {});
            }));
  }

  // A unary call arrived: what to do with it. Unless dropped, its slot joins the table (CloseUnary
  // answers it if its handler has not by then), and `next` requests the next call of the method
  // in its place (under accept_mu_, so that no request starts after StopAccepting).
  enum class UnaryVerdict { kServe, kRefuse, kDrop };
  UnaryVerdict AcceptedUnary(UnaryCallBase* call, const std::shared_ptr<UnaryCallBase::Slot>& slot,
                             const std::function<void()>& next) {
    MutexLock accept_lock(accept_mu_);
    if (!accepting_) return UnaryVerdict::kDrop;
    next();
    MutexLock lock(mu_);
    unary_[call] = slot;  // refused calls too: their Finish must complete before the queues end
    return unary_closed_ ? UnaryVerdict::kRefuse : UnaryVerdict::kServe;
  }

  // The unary call's Finish completed: it leaves the table (it is deleted next).
  void UnaryDone(UnaryCallBase* call) {
    MutexLock lock(mu_);
    unary_.erase(call);
    cv_.NotifyAll();
  }

  // Answers every unary call still waiting for its handler with UNAVAILABLE, and every later one
  // at once: a Qualify's suite may outlast the server, whose queues must then be empty.
  void CloseUnary() {
    std::vector<std::shared_ptr<UnaryCallBase::Slot>> open;
    {
      MutexLock accept_lock(accept_mu_);
      unary_closed_ = true;
      MutexLock lock(mu_);
      for (const auto& [call, slot] : unary_) open.push_back(slot);
    }
    for (const auto& slot : open) {
      if (UnaryCallBase* c = UnaryCallBase::Claim(*slot)) {
        c->FinishWith(grpc::Status(grpc::StatusCode::UNAVAILABLE, "aggregator shutting down"));
      }
    }
  }

  // Drops the table's reference; the session may be destroyed before this returns.
  void Unregister(AgentSession* s) {
    std::shared_ptr<AgentSession> last;
    {
      MutexLock lock(mu_);
      auto it = sessions_.find(s);
      if (it != sessions_.end()) {
        last = std::move(it->second);
        sessions_.erase(it);
      }
      sessions_gauge_.Set(static_cast<double>(sessions_.size()));
      cv_.NotifyAll();
    }
  }

  // Runs f on every open session without holding the table lock (f may trigger OnDone inline).
  template <typename F>
  void ForEachSession(F f) {
    std::vector<std::shared_ptr<AgentSession>> copy;
    {
      MutexLock lock(mu_);
      for (const auto& [raw, s] : sessions_) copy.push_back(s);
    }
    for (const auto& s : copy) f(s.get());
  }

  // Waits until no session is open (and, with `unary`, no unary call is).
  bool WaitAllDone(std::chrono::milliseconds timeout, bool unary = false) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    MutexLock lock(mu_);
    auto done = [&]() FW_REQUIRES(mu_) { return sessions_.empty() && (!unary || unary_.empty()); };
    while (!done()) {
      if (!cv_.WaitUntil(mu_, deadline)) return done();
    }
    return true;
  }

  void ProtocolError(const char* reason) { protocol_errors_.WithLabels({reason}).Inc(); }

  // Ends the open stream `conn_id` (a takeover). Called without any session's lock held.
  void SupersedeConn(uint64_t conn_id) {
    std::shared_ptr<AgentSession> old;
    {
      MutexLock lock(mu_);
      for (const auto& [raw, s] : sessions_) {
        if (s->conn_id() == conn_id) old = s;
      }
    }
    if (old) old->Supersede();
  }

  // Defers an ack until the records it promises are durable (the journal's next commit); the
  // committer then paces it (AckPacer: one ack message per stream for several batches; `resume`,
  // the session's resume point, goes out at once). False without a journal: the caller enqueues
  // it at once. Takes no session lock, so a session may call it while holding its own.
  bool DeferAck(const std::shared_ptr<AgentSession>& s, uint64_t seq, bool resume) {
    if (!journal_) return false;
    return pending_acks_.Push({s, seq, resume});
  }

  // Group commit: every ack that arrives while one commit runs waits for the next; one commit
  // (one WAL fsync) then releases all of them.
  void StartJournal(std::shared_ptr<IngestJournal> journal, metrics::Registry& registry) {
    journal_ = std::move(journal);
    fleet_.TrackDirty();
    commit_seconds_ =
        &registry
             .AddHistogram("fabricwatch_ingest_journal_commit_seconds",
                           "Time of one durable commit of ingest records (acks "
                           "wait for it).",
                           {}, {0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.5})
             .WithLabels({});
    commit_acks_ = &registry
                        .AddCounter("fabricwatch_ingest_journal_acks_total",
                                    "Acks released by durable commits.")
                        .WithLabels({});
    commits_ = &registry
                    .AddCounter("fabricwatch_ingest_journal_commits_total",
                                "Durable commits of ingest records.")
                    .WithLabels({});
    commit_errors_ = &registry
                          .AddCounter("fabricwatch_ingest_journal_errors_total",
                                      "Commits that failed; their acks wait for a retry.")
                          .WithLabels({});
    committer_ = std::thread([this] { CommitLoop(); });
  }

  // Sends every ack the committer holds for pacing (each is durable), and commits and sends those
  // waiting for a commit; returns once they are queued on their streams (at most `timeout`).
  void FlushAcks(std::chrono::milliseconds timeout) {
    if (!committer_.joinable()) return;
    uint64_t target;
    {
      MutexLock lock(flush_mu_);
      target = flushes_done_ + 1;
    }
    if (!pending_acks_.Push({nullptr, 0, false})) return;  // a null session asks for a flush
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    MutexLock lock(flush_mu_);
    while (flushes_done_ < target) {
      if (!flush_cv_.WaitUntil(flush_mu_, deadline)) return;
    }
  }

  // Commits what is pending, releases those acks and stops the commit thread.
  void StopJournal() {
    if (!committer_.joinable()) return;
    pending_acks_.Stop();
    committer_.join();
  }

  FleetState& fleet_;
  IngestSink& sink_;
  bool tls_ = false;  // client certificates are required: Hello.node must be named by one
  int max_findings_per_report = 1024;

 private:
  std::atomic<uint64_t> next_conn_{0};
  // Serializes accepting (which starts operations on a queue) with StopAccepting.
  Mutex accept_mu_;
  bool accepting_ FW_GUARDED_BY(accept_mu_) = true;
  bool unary_closed_ FW_GUARDED_BY(accept_mu_) = false;
  Mutex mu_;
  CondVar cv_;
  std::map<AgentSession*, std::shared_ptr<AgentSession>> sessions_ FW_GUARDED_BY(mu_);
  // The unary calls accepted and not yet finished, by the slot their Reply answers through.
  std::map<UnaryCallBase*, std::shared_ptr<UnaryCallBase::Slot>> unary_ FW_GUARDED_BY(mu_);
  metrics::Gauge& sessions_gauge_;
  metrics::Family<metrics::Counter>& protocol_errors_;

  static constexpr std::chrono::milliseconds kCommitInterval{10};
  // Ack pacing (AckPacer, docs/durability.md "Acks per stream"): a stream's durable acks fold into
  // one message, sent once kAckBatches batches wait in it or kAckDelay after the oldest of them was
  // committed. The agent sends without waiting for acks (they release its buffer, 3,600 batches by
  // default); a client with a window of unacknowledged batches (fw_sim: 4) needs the count bound.
  // The delay exceeds the agents' longest report interval (2 s in fleets of 1,000 nodes or more,
  // PlanBook's ReportIntervalMs), so that an agent at that pace also gets one ack for two batches.
  static constexpr std::chrono::milliseconds kAckDelay{2500};
  static constexpr uint32_t kAckBatches = 2;
  struct PendingAck {
    std::shared_ptr<AgentSession> session;  // null: a flush (FlushAcks)
    uint64_t seq = 0;
    bool resume = false;  // the session's resume point (Hello's answer)
  };

  void CommitLoop() {
    std::vector<PendingAck> acks;
    std::vector<std::pair<std::shared_ptr<AgentSession>, uint64_t>> due;
    for (;;) {
      // Wakes for new acks, or when the oldest held ack falls due.
      const bool stop = pending_acks_.TakeAll(acks, pacer_.NextDue());
      bool flush = stop;
      bool batches = false;
      for (const PendingAck& a : acks) (a.session ? batches : flush) = true;
      const auto commit_start = std::chrono::steady_clock::now();
      if (batches && !Commit(acks)) return;  // stopped while a commit kept failing
      const auto committed = std::chrono::steady_clock::now();
      for (auto& a : acks) {
        if (a.session) pacer_.Add(a.session, a.seq, a.resume, committed);
      }
      acks.clear();  // drops the session references now, not at the next commit
      pacer_.TakeDue(committed, due);
      // A flush (the server stops): every held ack is durable and goes now, before the sessions
      // drain, so their agents drop those batches instead of resending them.
      if (flush) pacer_.TakeAll(due);
      for (auto& [s, seq] : due) {
        v1::AggregatorMessage m;
        m.mutable_ack()->set_seq(seq);
        s->Enqueue(std::move(m));
      }
      due.clear();  // drops the session references now, not at the next round
      if (flush) {
        MutexLock lock(flush_mu_);
        ++flushes_done_;
        flush_cv_.NotifyAll();
      }
      if (stop && pending_acks_.Empty()) return;
      // At most one commit per kCommitInterval: each fsync costs the same however many records
      // it carries, and acks that wait a few ms more cost agents nothing (they keep sending).
      // Acks deferred meanwhile neither wake this thread nor end the interval early.
      if (batches && !stop) pending_acks_.SleepUntil(commit_start + kCommitInterval);
    }
  }

  // Makes durable what every ack in `acks` promises, retrying a failed commit each second; false
  // once Stop() was called while it kept failing.
  bool Commit(const std::vector<PendingAck>& acks) {
    // Every ack in `acks` was taken after its batch updated the fleet's records, so this
    // snapshot holds what each promises.
    for (;;) {
      auto t0 = std::chrono::steady_clock::now();
      std::vector<IngestRecord> records = fleet_.TakeDirtyRecords();
      Status st = journal_->Write(records);
      if (st.ok()) {
        commit_seconds_->Observe(
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
        commits_->Inc();
        commit_acks_->Inc(static_cast<double>(acks.size()));
        return true;
      }
      // Unacked batches stay in the agents' buffers; nothing is promised that is not on disk.
      commit_errors_->Inc();
      spdlog::error(
          "msg=\"ingest journal commit failed; acks held until it succeeds\" "
          "error=\"{}\" records={} acks={}",
          st.message(), records.size(), acks.size());
      fleet_.RequeueDirty(records);
      if (pending_acks_.SleepUntil(std::chrono::steady_clock::now() + std::chrono::seconds(1))) {
        return false;
      }
    }
  }

  std::shared_ptr<IngestJournal> journal_;
  std::thread committer_;
  GroupCommitQueue<PendingAck> pending_acks_;
  AckPacer<std::shared_ptr<AgentSession>> pacer_{kAckDelay, kAckBatches};  // the committer's
  Mutex flush_mu_;
  CondVar flush_cv_;
  uint64_t flushes_done_ FW_GUARDED_BY(flush_mu_) = 0;  // flushes the committer has finished
  metrics::Histogram* commit_seconds_ = nullptr;
  metrics::Counter* commit_acks_ = nullptr;
  metrics::Counter* commits_ = nullptr;
  metrics::Counter* commit_errors_ = nullptr;
};

template <typename Req, typename Resp>
void UnaryCall<Req, Resp>::OnComplete(bool ok) {
  if (accepted_) {  // the Finish completed (ok or not: nothing is left to do)
    service_->UnaryDone(this);
    delete this;
    return;
  }
  accepted_ = true;
  if (!ok) {  // the server stopped with this request outstanding
    delete this;
    return;
  }
  {
    MutexLock lock(slot_->mu);
    slot_->call = this;
  }
  switch (service_->AcceptedUnary(this, slot_, [&] { Await(service_, cq_, request_, handle_); })) {
    case Service::UnaryVerdict::kDrop:
      // The queues may be shutting down: no operation starts; the context cancels the call.
      delete this;
      return;
    case Service::UnaryVerdict::kRefuse:
      if (Claim(*slot_) != nullptr) {
        FinishWith(grpc::Status(grpc::StatusCode::UNAVAILABLE, "aggregator shutting down"));
      }
      return;
    case Service::UnaryVerdict::kServe:
      break;
  }
  (*handle_)(req_, [slot = slot_](grpc::Status st, const Resp& resp) {
    if (auto* c = static_cast<UnaryCall*>(Claim(*slot))) {
      c->resp_ = resp;
      c->FinishWith(std::move(st));
    }
  });
}

void AgentSession::Request(std::shared_ptr<AgentSession> self) {
  self_ = std::move(self);
  service_->RequestConnect(&ctx_, &stream_, cq_, cq_, static_cast<CqTag*>(&accept_tag_));
}

void AgentSession::OnEvent(const Tag* t, bool ok) {
  AgentSession* s = t->session;
  switch (t->op) {
    case Op::kAccept:
      s->OnAccepted(ok);  // not counted in pending_
      return;
    case Op::kRead:
      s->reading_ = false;
      s->OnReadDone(ok);
      break;
    case Op::kWrite:
      s->OnWriteDone(ok);
      break;
    case Op::kFinish:
      s->finish_done_.store(true);
      // A read still waiting for the agent ends now (the status is out; nothing more is read).
      if (s->reading_) s->ctx_.TryCancel();
      break;
  }
  if (s->pending_.fetch_sub(1) == 1 && s->finish_done_.load()) s->OnDone();
}

void AgentSession::OnAccepted(bool ok) {
  if (!ok || !service_->Accepted(shared_from_this(), cq_, &conn_id_)) {
    // The server is stopping: the request ended unanswered, or the call is dropped (its context
    // cancels it) without an operation on a queue that may be shutting down.
    self_.reset();  // may destroy *this
    return;
  }
  peer_ = ctx_.peer();
  identity_ = IdentityOf(ctx_);
  StartRead(NextIn());
}

void AgentSession::StartRead(v1::AgentMessage* msg) {
  reading_ = true;
  pending_.fetch_add(1);
  stream_.Read(msg, static_cast<CqTag*>(&read_tag_));
}

void AgentSession::StartWrite(const v1::AggregatorMessage* msg) {
  pending_.fetch_add(1);
  stream_.Write(*msg, static_cast<CqTag*>(&write_tag_));
}

void AgentSession::Finish(grpc::Status st) {
  pending_.fetch_add(1);
  stream_.Finish(st, static_cast<CqTag*>(&finish_tag_));
}

v1::AgentMessage* AgentSession::NextIn() {
  // The previous message was handled under mu_ before this read is started; nothing refers to it.
  arena_.Reset();
  in_ = google::protobuf::Arena::CreateMessage<v1::AgentMessage>(&arena_);
  return in_;
}

void AgentSession::Perform(Actions a) {
  if (a.supersede_conn != 0) service_->SupersedeConn(a.supersede_conn);
  if (a.kv_request) service_->sink_.OnKvRequest(a.node, *a.kv_request);
  if (a.collective_result) service_->sink_.OnCollectiveResult(a.node, *a.collective_result);
  if (a.rdma_rc_connect) service_->sink_.OnRdmaRcConnect(a.node, *a.rdma_rc_connect);
  if (a.write) StartWrite(a.write);
  if (a.read) StartRead(NextIn());
  if (a.finish) Finish(std::move(*a.finish));
}

void AgentSession::OnReadDone(bool ok) {
  Actions a;
  {
    MutexLock lock(mu_);
    if (finished_) return;
    if (!ok) {
      // The agent half-closed or the stream broke: flush what is queued, then finish.
      FinishLocked(grpc::Status::OK, a);
    } else if (!draining_) {
      // While draining, a message read is neither stored nor acked: the agent resends it.
      HandleMessage(a);
      a.read = !finished_ && !draining_ && !finish_after_writes_ && !superseded_;
    }
  }
  Perform(std::move(a));
}

void AgentSession::HandleMessage(Actions& a) {
  FleetState& fleet = service_->fleet_;
  if (node_.empty() && !in_->has_hello()) {
    service_->ProtocolError("no_hello");
    FinishLocked(grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                              "the first message of a session must be Hello"),
                 a);
    return;
  }
  switch (in_->body_case()) {
    case v1::AgentMessage::kHello: {
      const v1::Hello& h = in_->hello();
      if (h.node().empty() || h.node().size() > 253) {
        service_->ProtocolError("bad_node_name");
        FinishLocked(
            grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "Hello.node is empty or too long"), a);
        return;
      }
      if (ClaimVerdict v = CheckClaim(identity_, h.node(), service_->tls_);
          v != ClaimVerdict::kAllowed && v != ClaimVerdict::kPlaintext) {
        // Another node's name (or none): the session could overwrite that node's data.
        service_->ProtocolError("identity_mismatch");
        spdlog::warn(
            "msg=\"session refused: the client certificate does not name the node it claims\" "
            "claimed_node=\"{}\" cert_names=\"{}\" verdict={} peer={}",
            h.node(), JoinNames(identity_), VerdictName(v), peer_);
        FinishLocked(grpc::Status(grpc::StatusCode::PERMISSION_DENIED,
                                  "the client certificate does not name node \"" + h.node() + "\""),
                     a);
        return;
      }
      if (!node_.empty() && node_ != h.node()) {
        service_->ProtocolError("identity_change");
        FinishLocked(grpc::Status(grpc::StatusCode::PERMISSION_DENIED,
                                  "a session may only report for one node"),
                     a);
        return;
      }
      HelloResult hr = fleet.Admit(conn_id_, h);
      if (!hr.admitted) {
        FinishLocked(grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                                  "the aggregator holds its maximum number of nodes"),
                     a);
        return;
      }
      node_ = h.node();
      a.supersede_conn = hr.replaced_conn;
      service_->sink_.OnSessionStart(node_);
      uint64_t ack = hr.ack;
      spdlog::info("msg=\"agent connected\" node={} version={} peer={} resume_ack={}", node_,
                   h.version(), peer_, ack);
      // The resume point is the first ack: the agent drops what it covers, so it must be durable
      // too (it may cover batches whose commit is still running). It goes out right after that
      // commit: the agent sends no batch before it.
      if (!service_->DeferAck(shared_from_this(), ack, /*resume=*/true)) {
        v1::AggregatorMessage m;
        m.mutable_ack()->set_seq(ack);
        EnqueueLocked(std::move(m), a);
      }
      if (auto plan = service_->sink_.PlanFor(node_)) {
        v1::AggregatorMessage pm;
        *pm.mutable_probe_plan() = std::move(*plan);
        EnqueueLocked(std::move(pm), a);
      }
      break;
    }
    case v1::AgentMessage::kProbeBatch: {
      uint64_t ack = 0;
      BatchVerdict v = fleet.OnProbeBatch(node_, conn_id_, in_->probe_batch(), &ack);
      if (v == BatchVerdict::kSuperseded) {
        // Another session holds the node; this stream's sequence space is not the node's.
        superseded_ = true;
        FinishLocked(grpc::Status(grpc::StatusCode::ABORTED,
                                  "a newer session for node \"" + node_ + "\" took over"),
                     a);
        return;
      }
      if (v != BatchVerdict::kDuplicate) {
        service_->sink_.OnSessionProbeBatch(node_, in_->probe_batch(), probe_state_);
      }
      if (!service_->DeferAck(shared_from_this(), ack, /*resume=*/false)) {
        v1::AggregatorMessage m;
        m.mutable_ack()->set_seq(ack);
        EnqueueLocked(std::move(m), a);
      }
      break;
    }
    case v1::AgentMessage::kHeartbeat:
      fleet.OnHeartbeat(node_, in_->heartbeat().sent_unix_ns());
      break;
    case v1::AgentMessage::kCounterBatch:
      if (superseded_) break;
      fleet.BoundCounterBatch(node_, in_->mutable_counter_batch());
      fleet.OnCounterBatch(node_, in_->counter_batch());
      service_->sink_.OnCounterBatch(node_, in_->counter_batch());
      break;
    case v1::AgentMessage::kCheckReport:
      if (superseded_) break;
      if (in_->check_report().findings_size() > service_->max_findings_per_report) {
        const int n = in_->check_report().findings_size();
        const int max = service_->max_findings_per_report;
        in_->mutable_check_report()->mutable_findings()->DeleteSubrange(max, n - max);
        fleet.Refused("report_findings").Inc(n - max);
        spdlog::warn(
            "msg=\"check report trimmed: more findings than --max-findings-per-report\" node={} "
            "findings={} kept={}",
            node_, n, max);
      }
      fleet.OnCheckReport(node_, in_->check_report());
      service_->sink_.OnCheckReport(node_, in_->check_report());
      break;
    case v1::AgentMessage::kPathTraces:
      if (superseded_) break;
      service_->sink_.OnPathTraces(node_, in_->path_traces());
      break;
    case v1::AgentMessage::kKvRequest:
      if (superseded_) break;
      a.node = node_;
      a.kv_request = std::move(*in_->mutable_kv_request());
      break;
    case v1::AgentMessage::kCollectiveResult:
      if (superseded_) break;
      a.node = node_;
      a.collective_result = std::move(*in_->mutable_collective_result());
      break;
    case v1::AgentMessage::kRdmaRcConnect:
      if (superseded_) break;
      a.node = node_;
      a.rdma_rc_connect = std::move(*in_->mutable_rdma_rc_connect());
      break;
    default:
      // Unknown or future kinds are ignored so newer agents can talk to older aggregators.
      service_->ProtocolError("unknown_message");
      break;
  }
}

void AgentSession::Enqueue(v1::AggregatorMessage msg) {
  Actions a;
  {
    MutexLock lock(mu_);
    if (finished_ || draining_ || finish_after_writes_) return;
    EnqueueLocked(std::move(msg), a);
  }
  Perform(std::move(a));
}

void AgentSession::EnqueueLocked(v1::AggregatorMessage msg, Actions& a) {
  // Plans replace each other: a queued, not yet sent plan is replaced by a newer one, so an agent
  // that does not read holds at most one plan here.
  if (msg.has_probe_plan()) {
    for (size_t i = writing_ ? 1 : 0; i < queue_.size(); ++i) {
      if (queue_[i].has_probe_plan()) {
        queue_[i] = std::move(msg);
        service_->fleet_.Refused("plans_merged").Inc();
        return;
      }
    }
  }
  // Acks are cumulative: a queued, not yet sent ack can simply be raised, so a slow agent cannot
  // grow the queue without bound.
  bool back_in_flight = writing_ && queue_.size() == 1;
  if (msg.has_ack() && !queue_.empty() && queue_.back().has_ack() && !back_in_flight) {
    queue_.back().mutable_ack()->set_seq(std::max(queue_.back().ack().seq(), msg.ack().seq()));
    return;
  }
  queue_.push_back(std::move(msg));
  if (!writing_) {
    writing_ = true;
    a.write = &queue_.front();
  }
}

void AgentSession::OnWriteDone(bool ok) {
  Actions a;
  {
    MutexLock lock(mu_);
    writing_ = false;
    if (!queue_.empty()) queue_.pop_front();
    if (!ok) {
      queue_.clear();
      if (!finished_) {
        finished_ = true;
        a.finish = grpc::Status(grpc::StatusCode::UNAVAILABLE, "write to agent failed");
      }
    } else if (!queue_.empty()) {
      writing_ = true;
      a.write = &queue_.front();
    } else if (finish_after_writes_ && !finished_) {
      finished_ = true;
      a.finish = std::move(*finish_after_writes_);
    }
  }
  Perform(std::move(a));
}

void AgentSession::FinishLocked(grpc::Status st, Actions& a) {
  if (finished_ || finish_after_writes_) return;
  if (writing_ || !queue_.empty()) {
    finish_after_writes_ = std::move(st);
    return;
  }
  finished_ = true;
  a.finish = std::move(st);
}

void AgentSession::PushPlan(const std::function<bool(const std::string&)>& wanted) {
  std::string node;
  {
    MutexLock lock(mu_);
    node = node_;
  }
  if (node.empty() || !wanted(node)) return;
  if (auto plan = service_->sink_.PlanFor(node)) {
    v1::AggregatorMessage pm;
    *pm.mutable_probe_plan() = std::move(*plan);
    Enqueue(std::move(pm));
  }
}

void AgentSession::Drain() {
  Actions a;
  {
    MutexLock lock(mu_);
    draining_ = true;
    FinishLocked(grpc::Status(grpc::StatusCode::UNAVAILABLE, "aggregator shutting down"), a);
  }
  Perform(std::move(a));
}

void AgentSession::Supersede() {
  Actions a;
  {
    MutexLock lock(mu_);
    superseded_ = true;
    FinishLocked(grpc::Status(grpc::StatusCode::ABORTED,
                              "a newer session for node \"" + node_ + "\" took over"),
                 a);
  }
  Perform(std::move(a));
}

void AgentSession::OnDone() {
  std::string node;
  {
    MutexLock lock(mu_);
    node = node_;
  }
  if (!node.empty()) service_->fleet_.OnDisconnect(node, conn_id_);
  std::shared_ptr<AgentSession> last = std::move(self_);
  service_->Unregister(this);
  // `last` may be the final reference: *this goes when it does.
}

class GrpcServerImpl final : public GrpcServer {
 public:
  GrpcServerImpl(FleetState& fleet, IngestSink& sink, metrics::Registry& registry)
      : service_(fleet, sink, registry), registry_(registry) {}

  Status Start(const Options& options) {
    grpc::ServerBuilder builder;
    service_.tls_ = options.tls.has_value();
    builder.AddListeningPort(options.listen, tls::ServerCredentials(options.tls), &port_);
    builder.SetMaxReceiveMessageSize(options.max_message_bytes);
    service_.max_findings_per_report = options.max_findings_per_report;
    if (options.journal) service_.StartJournal(options.journal, registry_);
    // Detect dead peers whose TCP connection silently vanished. The agent pings every 20 s
    // (daemon/agent/uplink.cc MakeChannel); the minimum interval below must stay under that,
    // and pings must be allowed without calls, or the agent's pings count as strikes and the
    // server closes its connection with GOAWAY too_many_pings.
    builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, 20000);
    builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 10000);
    builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 5000);
    builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
    // No HTTP/2 BDP pings: gRPC's bandwidth-delay estimator pings a connection after data arrives
    // to grow its receive window for bulk transfers, every 1-2 s on each agent's connection, and
    // the agent wakes to answer each. Agents send a batch or two a second; the default window
    // carries a resend after a restart at tens of MB/s per stream on a datacenter round trip.
    builder.AddChannelArgument(GRPC_ARG_HTTP2_BDP_PROBE, 0);
    builder.RegisterService(&service_);
    const int queues = std::clamp(options.completion_queues, 1, kMaxCompletionQueues);
    for (int i = 0; i < queues; ++i) cqs_.push_back(builder.AddCompletionQueue());
    server_ = builder.BuildAndStart();
    if (!server_ || port_ == 0) {
      for (auto& cq : cqs_) {  // nothing was started on them
        cq->Shutdown();
        void* tag = nullptr;
        bool ok = false;
        while (cq->Next(&tag, &ok)) {
        }
      }
      cqs_.clear();
      return Status::Unavailable("cannot listen for gRPC on " + options.listen +
                                 " (address in use or invalid?)");
    }
    spdlog::info("msg=\"grpc completion queues\" queues={}", queues);
    for (int i = 0; i < queues; ++i) {
      grpc::ServerCompletionQueue* cq = cqs_[static_cast<size_t>(i)].get();
      // A few requests per queue so that a burst of (re)connecting agents waits on no thread.
      for (int r = 0; r < kRequestsPerQueue; ++r) service_.AwaitConnect(cq);
      service_.AwaitUnary(cq);
      cq_threads_.emplace_back([cq] {
        pthread_setname_np(pthread_self(), "fw-grpc-cq");
        void* tag = nullptr;
        bool ok = false;
        while (cq->Next(&tag, &ok)) static_cast<CqTag*>(tag)->OnComplete(ok);
      });
    }
    return Status::Ok();
  }

  int port() const override { return port_; }

  void PushPlans(const std::function<bool(const std::string& node)>& wanted) override {
    service_.ForEachSession([&](AgentSession* s) { s->PushPlan(wanted); });
  }

  void Send(std::vector<std::pair<std::string, v1::AggregatorMessage>> messages) override {
    if (messages.empty()) return;
    std::map<std::string, std::vector<v1::AggregatorMessage>> by_node;
    for (auto& [node, m] : messages) by_node[node].push_back(std::move(m));
    service_.ForEachSession([&](AgentSession* s) {
      auto it = by_node.find(s->node());
      if (it == by_node.end()) return;
      for (const v1::AggregatorMessage& m : it->second) s->Enqueue(m);
    });
  }

  void Shutdown(double grace_s) override {
    if (!server_) return;
    // What is stored is acknowledged before the streams end (a draining session sends nothing
    // more): the acks held for pacing, and those waiting for a commit.
    service_.FlushAcks(std::chrono::milliseconds(static_cast<int64_t>(grace_s * 1000)));
    service_.ForEachSession([](AgentSession* s) { s->Drain(); });
    auto grace = std::chrono::milliseconds(static_cast<int64_t>(grace_s * 1000));
    if (!service_.WaitAllDone(grace)) {
      spdlog::warn("msg=\"sessions still open after grace period; cancelling\"");
    }
    service_.StopJournal();
    service_.CloseUnary();
    // Cancels what is still open; the queues' threads run the sessions to their end.
    server_->Shutdown(std::chrono::system_clock::now() + std::chrono::milliseconds(500));
    // No operation may start on a queue once it is shut down: every session must be done first.
    service_.StopAccepting();
    while (!service_.WaitAllDone(std::chrono::seconds(5), /*unary=*/true)) {
      spdlog::warn("msg=\"cancelled calls still finishing after server shutdown\"");
    }
    for (auto& cq : cqs_) cq->Shutdown();
    for (auto& t : cq_threads_) t.join();
    cq_threads_.clear();
    server_.reset();
    cqs_.clear();
  }

  ~GrpcServerImpl() override { Shutdown(0.5); }

 private:
  static constexpr int kRequestsPerQueue = 4;
  Service service_;
  metrics::Registry& registry_;
  std::vector<std::unique_ptr<grpc::ServerCompletionQueue>> cqs_;
  std::vector<std::thread> cq_threads_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
};

}  // namespace

// Four at most: with two, 16,000 streams on a loaded 2-core host fell about 100 s behind while the
// fleet connected and 8,000-10,100 of them were ended early; four kept every stream at load 10-14
// and cost about 10% less per result than eight, whose threads wake each other more
// (docs/performance.md).
int GrpcServer::CompletionQueuesFor(size_t nodes) {
  return nodes == 0 || nodes > kOneQueueNodes ? kMaxCompletionQueues : 1;
}

StatusOr<std::unique_ptr<GrpcServer>> GrpcServer::Start(const Options& options, FleetState& fleet,
                                                        IngestSink& sink,
                                                        metrics::Registry& registry) {
  auto server = std::make_unique<GrpcServerImpl>(fleet, sink, registry);
  Status st = server->Start(options);
  if (!st.ok()) return st;
  return std::unique_ptr<GrpcServer>(std::move(server));
}

}  // namespace fw::aggregator
