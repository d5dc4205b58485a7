// Turns a wire ProbeBatch (its `results` and its `columns`) into ProbeResults, rejecting malformed
// input with a reason instead of trusting it.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "daemon/aggregator/model/reported_probe.h"
#include "fabricwatch.pb.h"

namespace fw::aggregator {

// Why a column block was refused as a whole. Each has a stable name for a metric label.
enum class ColumnError : uint8_t {
  kNone = 0,
  kTooLarge,        // more rows or names than any agent sends (kMaxColumnRows, kMaxNames)
  kNameTable,       // name lengths do not add up to the names blob, or a name is too long or
                    // not clean UTF-8 (names reach JSON and logs)
  kColumnLength,    // a column is neither empty nor as long as `peer`
  kIndexOutOfRange  // a peer or NIC index points past the name table
};
inline constexpr int kColumnErrorCount = 5;
std::string_view ColumnErrorName(ColumnError e);

struct DecodeLimits {
  static constexpr size_t kMaxColumnRows = 1'000'000;
  static constexpr size_t kMaxNames = 65'536;
  static constexpr size_t kMaxNameBytes = 253;  // a DNS name, like Hello.node
};

struct DecodeOutcome {
  size_t appended = 0;         // results appended to `out`
  size_t invalid_results = 0;  // rows or results dropped one by one (see DecodeProbeBatch)
  ColumnError column_error = ColumnError::kNone;  // the column block was refused as a whole
};

// Accepts a peer name; false drops the result as invalid. Called once per distinct name of the
// column block, and once per entry of `results`.
using PeerFilter = std::function<bool(std::string_view peer)>;

// Appends the batch's valid results from agent `node` to `out`: first `batch.results`, then the
// rows of `batch.columns`. A result is dropped (and counted in invalid_results) when its transport
// is unknown, its peer is empty, equal to `node` or refused by `accept_peer`, or its source port
// exceeds 65535. A malformed column block (see ColumnError) contributes no rows at all.
// The results land in out[0, appended), named by name (src_id and dst_id are kNoNode); `out` only
// grows, and its elements are reused, so a caller that keeps the vector allocates nothing in
// steady state.
// Never crashes and never allocates in proportion to claimed (rather than present) sizes.
DecodeOutcome DecodeProbeBatch(std::string_view node, const fabricwatch::v1::ProbeBatch& batch,
                               const PeerFilter& accept_peer, std::vector<ReportedProbe>& out);

// Maps a peer name to its NodeId, or kNoNode to drop its results as invalid. Called at most once
// per distinct name of a column block (not at all on a PeerNameCache hit), and once per entry of
// `results`.
using PeerResolver = std::function<NodeId(std::string_view peer)>;

// Names one source sent before, in any of its name tables, under one resolver epoch, and what
// each resolved to. Plans with fractional rates make an agent's name table differ from batch to
// batch while the names repeat, so a new table resolves only names the source never sent before.
// Open-addressed in the source's own blocks: a lookup touches no structure other sources share.
// Not thread-safe (the decoder's caller serializes a source's batches).
class PeerNameMemo {
 public:
  // What `name` resolved to, or null.
  const NodeId* Find(std::string_view name, uint32_t hash) const;
  // Remembers name -> id; a memo already holding `max_names` names starts over first.
  void Put(std::string_view name, uint32_t hash, NodeId id, size_t max_names);
  void Clear();
  size_t size() const { return entries_.size(); }
  static uint32_t Hash(std::string_view name);

 private:
  struct Entry {
    uint32_t offset = 0;  // into blob_
    uint32_t length = 0;
    uint32_t hash = 0;
    NodeId id = kNoNode;
  };
  void Insert(uint32_t entry);
  std::string blob_;
  std::vector<Entry> entries_;
  std::vector<uint32_t>
      slots_;  // entry index + 1, 0: empty; a power of two, at least twice entries_
};

// One source's previous column name table and what each of its names resolved to. An agent that
// sends the same peers every batch sends the same name table byte for byte; then nothing is split,
// checked or resolved again. A table that differs (plans with fractional rates send other peers
// each batch) resolves each name through `memo` first. Owned by the caller, one per source node;
// the decoder fills and reads it.
struct PeerNameCache {
  uint64_t epoch = 0;  // the resolver's epoch the ids belong to
  bool valid = false;
  std::string names;
  std::vector<uint32_t> lengths;
  std::vector<NodeId> ids;  // per name: its id, kNoNode (refused) or kUnresolved
  static constexpr NodeId kUnresolved = kNoNode - 1;
  // Every name resolved under `memo_epoch`, whichever table it came in. Bounded: past
  // max(kMinMemoNames, 2 x the names of the current table) it starts over, so a source holds at
  // most about three times what its largest table holds (kMaxNames names of kMaxNameBytes).
  PeerNameMemo memo;
  uint64_t memo_epoch = 0;
  static constexpr size_t kMinMemoNames = 256;
};

// The same as above, but the results carry ids instead of names: src_id = `node_id` and dst_id =
// what `resolve` returned (src_node and dst_node are left empty). `cache` may be null. `epoch`
// must change whenever `resolve` may answer a name differently than before (a re-plan changed
// which nodes are known); a cache filled under another epoch is not used.
DecodeOutcome DecodeProbeBatch(std::string_view node, NodeId node_id,
                               const fabricwatch::v1::ProbeBatch& batch,
                               const PeerResolver& resolve, std::vector<ReportedProbe>& out,
                               PeerNameCache* cache = nullptr, uint64_t epoch = 0);

// Wire transport to ours; nullopt for UNSPECIFIED and unknown values.
std::optional<Transport> TransportFromWire(int wire);

}  // namespace fw::aggregator
