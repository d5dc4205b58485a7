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

// One source's previous column name table and what each of its names resolved to. An agent sends
// the same peers every second, so its next name table is usually byte for byte the same; then
// nothing is split, checked or resolved again. Owned by the caller, one per source node; the
// decoder fills and reads it.
struct PeerNameCache {
  uint64_t epoch = 0;  // the resolver's epoch the ids belong to
  bool valid = false;
  std::string names;
  std::vector<uint32_t> lengths;
  std::vector<NodeId> ids;  // per name: its id, kNoNode (refused) or kUnresolved
  static constexpr NodeId kUnresolved = kNoNode - 1;
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
