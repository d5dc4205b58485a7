// The aggregator's view of its agents: sessions, liveness, inventory and ingest accounting.
//
// Thread-safety: every method takes `mu_` briefly and does no I/O, so gRPC reactions may call it.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/clock.h"
#include "common/mutex.h"
#include "common/status.h"
#include "daemon/aggregator/ingest/node_locality.h"
#include "fabricwatch.pb.h"

// State does not include exposition: the metric types stay opaque here and the families are
// registered in fleet_state.cc.
namespace fw::metrics {
class Counter;
class Gauge;
class Registry;
template <typename M>
class Family;
}  // namespace fw::metrics

namespace fw::aggregator {

// What one batch did to the ingest accounting.
enum class BatchVerdict {
  kAccepted,   // new, in order
  kGap,        // new, but earlier seqs never arrived (the agent's buffer overflowed)
  kDuplicate,  // already stored; ack again but do not count
  // Arrived on a stream that a newer session for the same node replaced: neither stored nor
  // acked (the agent that sent it resends it on its next session).
  kSuperseded,
};

// What a Hello did (FleetState::Admit).
struct HelloResult {
  bool admitted = true;        // false: refused by a bound (Options::max_nodes); nothing changed
  uint64_t ack = 0;            // the seq to acknowledge right away
  uint64_t replaced_conn = 0;  // a still-open stream of the same node this Hello took over; 0: none
};

// One node's durable ingest record (docs/durability.md): what an ack promises.
struct IngestRecord {
  std::string node;
  uint64_t session_id = 0;
  uint64_t last_seq = 0;
  uint64_t batches = 0;
  uint64_t results = 0;
  uint64_t duplicates = 0;
  uint64_t gaps = 0;
  // Earlier sessions of the node (session id, last seq), newest last, at most kRecentSessions.
  std::vector<std::pair<uint64_t, uint64_t>> recent;
  // Only with Options::record_test_batches (tests count numbered batches across restarts).
  uint64_t test_batches = 0;
  std::vector<uint64_t> test_ids;
  bool retired = false;  // the node was forgotten: delete its record
};

struct NodeIngest {
  uint64_t session_id = 0;
  uint64_t last_seq = 0;  // highest seq stored for this session
  uint64_t batches = 0;
  uint64_t results = 0;
  uint64_t duplicates = 0;
  uint64_t gaps = 0;
  // Sequence spaces of the node's earlier sessions (session id, last seq), newest last: two agents
  // that take a node's name from each other in turn (duplicate hostnames, a restarted agent whose
  // old stream is still open) each resume their own space instead of resetting the other's.
  std::vector<std::pair<uint64_t, uint64_t>> recent;
  std::set<uint64_t> test_ids;  // only with record_test_batches
  uint64_t test_batches = 0;
};

struct NodeView {
  std::string name;
  bool connected = false;
  bool up = false;
  int64_t last_seen_wall_ns = 0;
  double last_report_age_s = 0;
  std::string version;
  std::string health;  // ok | warning | critical | unknown
  fabricwatch::v1::Inventory inventory;
  NodeLocality locality;  // from the latest check report with a parsable document
  std::vector<fabricwatch::v1::ProbeEndpoint> endpoints;
  NodeIngest ingest;
  fabricwatch::v1::CollectiveCapability collective;  // from the latest Hello (NCCL's state)
};

class FleetState {
 public:
  struct Options {
    double heartbeat_timeout_s = 15;
    // While the aggregator is behind on reading its streams, an agent's silence is not evidence
    // that it died: its heartbeats may be waiting unread. The timeout then stretches by the
    // measured ingest lag (see Sweep), by at most this much.
    double heartbeat_grace_max_s = 105;
    // A sweep that would time out at least this many agents, and at least `mass_timeout_fraction`
    // of the live ones, all with open streams, is taken as the aggregator (or its network)
    // falling behind rather than that many agents dying together: those agents stay up until
    // their silence passes heartbeat_timeout_s + heartbeat_grace_max_s.
    size_t mass_timeout_min = 50;
    double mass_timeout_fraction = 0.05;
    bool record_test_batches = false;
    // Bounds on what clients can make the aggregator hold (docs/durability.md, "Bounds"). A Hello
    // for a new node beyond max_nodes is refused; a departed node (no live stream) is forgotten,
    // with its series, retire_after_s after its last message (0: never).
    size_t max_nodes = 20000;
    double retire_after_s = 3600;
    // Devices one node may name: GPUs plus NICs in its inventory, and distinct (device, port)
    // pairs in its counter samples (each becomes port series). The rest is dropped and counted.
    size_t max_devices_per_node = 256;
  };
  static constexpr size_t kRecentSessions = 4;
  FleetState(const Clock& clock, metrics::Registry& registry, Options options);

  // A session said Hello. Returns the seq to acknowledge right away (the last stored for this
  // agent session, 0 for a new one). `conn_id` identifies the stream so a stale stream ending
  // cannot mark a newer one disconnected.
  uint64_t OnHello(uint64_t conn_id, const fabricwatch::v1::Hello& hello);
  // OnHello with its whole outcome: refused by max_nodes, or taking over another open stream of
  // the same node (the caller ends that stream; its later batches are kSuperseded).
  HelloResult Admit(uint64_t conn_id, const fabricwatch::v1::Hello& hello);
  // Accounts a batch; returns the verdict and sets *ack to the seq to acknowledge.
  BatchVerdict OnProbeBatch(const std::string& node, const fabricwatch::v1::ProbeBatch& batch,
                            uint64_t* ack);
  // As above for the stream `conn_id`: kSuperseded when another stream now holds the node.
  BatchVerdict OnProbeBatch(const std::string& node, uint64_t conn_id,
                            const fabricwatch::v1::ProbeBatch& batch, uint64_t* ack);
  // `sent_unix_ns` is the agent's send time (Heartbeat.sent_unix_ns; 0 when absent). How late the
  // aggregator reads it is its ingest lag.
  void OnHeartbeat(const std::string& node, int64_t sent_unix_ns = 0);
  void OnCheckReport(const std::string& node, const fabricwatch::v1::CheckReport& report);
  void OnCounterBatch(const std::string& node, const fabricwatch::v1::CounterBatch& batch);
  // Drops the samples of `batch` that would take `node` past max_devices_per_node distinct
  // (device, port) pairs; returns how many were dropped (counted, reason inventory_devices).
  size_t BoundCounterBatch(const std::string& node, fabricwatch::v1::CounterBatch* batch);
  // The stream `conn_id` of `node` ended (cleanly, by error or by cancel).
  void OnDisconnect(const std::string& node, uint64_t conn_id);

  // Marks agents silent for longer than the heartbeat timeout as down. Call every tick.
  // Overload-aware: the timeout stretches by the ingest lag (the 90th percentile, over live
  // agents, of how late their latest heartbeat was read), capped at heartbeat_grace_max_s; and a
  // mass timeout (Options) is deferred up to that cap. A stream that ends is still marked down at
  // once by OnDisconnect.
  void Sweep();
  // The ingest lag the last Sweep used, in seconds.
  double ingest_lag_s() const;
  // The same 90th percentile before the cap (each node's lag is clamped to an hour): how far the
  // data the aggregator reads is behind, which the analyzer's persistence rules compare over time.
  double data_lag_s() const;

  // Every node's view, or only the node named `only` when it is not empty. The inventory, locality
  // and endpoints are shared immutable snapshots under the lock and copied into the views after
  // it is released, so a status page never deep-copies the fleet while ingest waits.
  std::vector<NodeView> Nodes(const std::string& only = {}) const;
  std::vector<std::string> LiveNodes() const;
  size_t connected() const;

  // Ingest dedup state survives a graceful restart through these (see aggregator_main).
  std::string ExportIngestJson() const;
  Status ImportIngestJson(const std::string& json);
  // The durable journal's view (ingest_journal.h): the records of nodes changed since the last
  // call, and the restore at start (records for unknown nodes create them, disconnected).
  // Changed records are tracked only once a journal asks for them (TrackDirty), so that without
  // one the set does not grow with every node name ever seen.
  void TrackDirty() {
    MutexLock lock(mu_);
    track_dirty_ = true;
  }
  std::vector<IngestRecord> TakeDirtyRecords();
  void ImportRecords(const std::vector<IngestRecord>& records);
  // Marks these records' nodes changed again (their commit failed).
  void RequeueDirty(const std::vector<IngestRecord>& records);
  size_t size() const;
  // fabricwatch_ingest_refused_total{reason}: everything a bound refused, for the ingest service
  // too (docs/durability.md lists the reasons).
  metrics::Counter& Refused(const char* reason);

  // Called (outside the lock, on the thread that changed it) whenever the set of live agents
  // changes, e.g. to re-plan. Set it before ingest starts; a later call replaces it safely.
  void SetMembershipListener(std::function<void()> listener) {
    MutexLock lock(mu_);
    listener_ = std::move(listener);
  }

 private:
  struct Node {
    NodeView view;  // inventory, locality and endpoints stay empty here: see the pointers below
    // Replaced whole by a Hello or check report, never changed in place; Nodes() copies them
    // outside the lock.
    std::shared_ptr<const fabricwatch::v1::Inventory> inventory;
    std::shared_ptr<const NodeLocality> locality;
    std::shared_ptr<const std::vector<fabricwatch::v1::ProbeEndpoint>> endpoints;
    uint64_t conn_id = 0;
    int64_t last_seen_mono_ns = 0;
    double heartbeat_lag_s = 0;                            // how late the latest heartbeat was read
    std::set<std::pair<std::string, uint32_t>> port_keys;  // at most max_devices_per_node
    bool port_limit_logged = false;  // one log line per node; the counter has every sample
    bool dirty = false;              // in dirty_nodes_: its ingest record is not yet journaled
    metrics::Gauge* up_gauge = nullptr;
    metrics::Gauge* age_gauge = nullptr;
  };
  Node& GetLocked(const std::string& name) FW_REQUIRES(mu_);
  // The node named `name`, or null. A hash lookup: every batch and heartbeat does one.
  Node* FindLocked(std::string_view name) const FW_REQUIRES(mu_) {
    auto it = by_name_.find(name);
    return it == by_name_.end() ? nullptr : it->second;
  }
  void Touch(Node& n) FW_REQUIRES(mu_);
  // Keeps `live_count_` and the gauge in step when a node's liveness flips.
  void SetLiveLocked(Node& n, bool connected, bool up) FW_REQUIRES(mu_);
  void NotifyMembership() FW_EXCLUDES(mu_);
  // Queues the node's record for the journal's next commit (once, however many batches change
  // it before then: a flag, no allocation per batch).
  void MarkDirtyLocked(Node& n) FW_REQUIRES(mu_) {
    if (!track_dirty_ || n.dirty) return;
    n.dirty = true;
    dirty_nodes_.push_back(&n);
  }
  // Queues the deletion of a node's record (it is being retired), or, should a node of that name
  // exist again at the commit, that node's record.
  void MarkRetiredLocked(const std::string& name) FW_REQUIRES(mu_) {
    if (track_dirty_) dirty_retired_.push_back(name);
  }
  IngestRecord RecordOfLocked(const Node& n) const FW_REQUIRES(mu_);
  // Forgets nodes without a live stream silent for retire_after_s; returns their names.
  std::vector<std::string> RetireLocked(int64_t now_mono_ns) FW_REQUIRES(mu_);

  const Clock& clock_;
  Options options_;
  mutable Mutex mu_;
  std::map<std::string, Node> nodes_ FW_GUARDED_BY(mu_);
  // nodes_ by name (the keys are views of nodes_' keys), for the lookups of every batch.
  std::unordered_map<std::string_view, Node*> by_name_ FW_GUARDED_BY(mu_);
  size_t live_count_ FW_GUARDED_BY(mu_) = 0;  // nodes connected and up
  double ingest_lag_s_ FW_GUARDED_BY(mu_) = 0;
  double data_lag_s_ FW_GUARDED_BY(mu_) = 0;
  bool mass_deferring_ FW_GUARDED_BY(mu_) = false;  // a mass timeout is being deferred
  // Ingest records not yet journaled: nodes with `dirty` set (a node leaves this list before it
  // is erased), and names of retired nodes.
  std::vector<Node*> dirty_nodes_ FW_GUARDED_BY(mu_);
  std::vector<std::string> dirty_retired_ FW_GUARDED_BY(mu_);
  bool track_dirty_ FW_GUARDED_BY(mu_) = false;
  std::function<void()> listener_ FW_GUARDED_BY(mu_);  // copied out, called unlocked

  metrics::Gauge& agents_connected_;
  metrics::Family<metrics::Gauge>& agent_up_;
  metrics::Family<metrics::Gauge>& agent_age_;
  metrics::Counter& batches_total_;
  metrics::Counter& duplicate_batches_;
  metrics::Counter& gap_batches_;
  std::array<metrics::Counter*, 7> results_by_transport_{};  // indexed by Transport
  metrics::Counter& heartbeats_;
  metrics::Counter& disconnects_;
  metrics::Gauge& ingest_lag_;
  metrics::Gauge& timeouts_deferred_;
  metrics::Counter& mass_timeouts_;
  metrics::Counter& takeovers_;
  metrics::Counter& superseded_batches_;
  metrics::Family<metrics::Counter>& refused_;
  metrics::Counter& nodes_retired_;
};

const char* TransportName(fabricwatch::v1::Transport t);

}  // namespace fw::aggregator
