// Validation and decoding of ProbeBatch results and columns.
#include "daemon/aggregator/ingest/probe_batch_decoder.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>

namespace fw::aggregator {

namespace v1 = fabricwatch::v1;

namespace {

constexpr std::array<std::string_view, kColumnErrorCount> kColumnErrorNames = {
    "none", "too_large", "name_table", "column_length", "index_out_of_range"};

// The next output slot, growing `out` only when every existing element is in use.
ReportedProbe& Slot(std::vector<ReportedProbe>& out, size_t& used) {
  if (used == out.size()) out.emplace_back();
  return out[used++];
}

double CleanGoodput(double g) { return std::isfinite(g) && g >= 0 ? g : 0.0; }

int64_t CleanRtt(uint64_t rtt) {
  return static_cast<int64_t>(std::min<uint64_t>(rtt, std::numeric_limits<int64_t>::max()));
}

// Names end up in JSON (/api/v1/pairs) and log lines, whose writers refuse or mangle anything
// but UTF-8; `results[].peer` gets this check from protobuf, the `bytes` name table does not.
// Control characters are refused too. Overlong forms and surrogates are not checked: they cannot
// break a writer, only look odd.
bool IsCleanUtf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    size_t extra;
    if (c < 0x20 || c == 0x7f) return false;
    if (c < 0x80) {
      extra = 0;
    } else if ((c & 0xe0) == 0xc0 && c >= 0xc2) {
      extra = 1;
    } else if ((c & 0xf0) == 0xe0) {
      extra = 2;
    } else if ((c & 0xf8) == 0xf0 && c <= 0xf4) {
      extra = 3;
    } else {
      return false;
    }
    if (extra > s.size() - i - 1) return false;
    for (size_t k = 1; k <= extra; ++k) {
      if ((static_cast<unsigned char>(s[i + k]) & 0xc0) != 0x80) return false;
    }
    i += extra + 1;
  }
  return true;
}

// Splits the names blob into views. False when the lengths do not describe the blob exactly or a
// name is not clean UTF-8.
bool SplitNames(const v1::ProbeColumns& c, std::vector<std::string_view>& names) {
  names.clear();
  const std::string_view blob = c.names();
  size_t offset = 0;
  for (uint32_t len : c.name_lengths()) {
    if (len > DecodeLimits::kMaxNameBytes || len > blob.size() - offset) return false;
    names.push_back(blob.substr(offset, len));
    if (!IsCleanUtf8(names.back())) return false;
    offset += len;
  }
  return offset == blob.size();
}

ColumnError CheckColumns(const v1::ProbeColumns& c, size_t names) {
  const size_t n = static_cast<size_t>(c.peer_size());
  auto fits = [n](int size) { return size == 0 || static_cast<size_t>(size) == n; };
  if (!fits(c.transport_size()) || !fits(c.src_port_size()) || !fits(c.dst_port_size()) ||
      !fits(c.flow_id_size()) || !fits(c.probe_seq_size()) || !fits(c.lost_size()) ||
      !fits(c.rtt_ns_size()) || !fits(c.bytes_size()) || !fits(c.goodput_bps_size()) ||
      !fits(c.sent_unix_ns_delta_size()) || !fits(c.src_nic_size()) || !fits(c.dst_nic_size()) ||
      !fits(c.cpu_busy_permille_size()) || !fits(c.cpu_peak_permille_size()) ||
      !fits(c.cpu_pressure_permille_size()) || !fits(c.late_size())) {
    return ColumnError::kColumnLength;
  }
  auto in_range = [names](const google::protobuf::RepeatedField<uint32_t>& col) {
    return std::all_of(col.begin(), col.end(), [names](uint32_t i) { return i < names; });
  };
  if (!in_range(c.peer()) || !in_range(c.src_nic()) || !in_range(c.dst_nic())) {
    return ColumnError::kIndexOutOfRange;
  }
  return ColumnError::kNone;
}

}  // namespace

std::string_view ColumnErrorName(ColumnError e) {
  const auto i = static_cast<size_t>(e);
  return i < kColumnErrorNames.size() ? kColumnErrorNames[i] : std::string_view("unknown");
}

std::optional<Transport> TransportFromWire(int wire) {
  switch (wire) {
    case v1::TRANSPORT_UDP:
      return Transport::kUdp;
    case v1::TRANSPORT_TCP_CONNECT:
      return Transport::kTcpConnect;
    case v1::TRANSPORT_TCP_BW:
      return Transport::kTcpBw;
    case v1::TRANSPORT_RDMA_UD:
      return Transport::kRdmaUd;
    case v1::TRANSPORT_RDMA_RC:
      return Transport::kRdmaRc;
    case v1::TRANSPORT_COLLECTIVE:
      return Transport::kCollective;
    default:
      return std::nullopt;
  }
}

namespace {

// Names the nodes of result `x`: by name (`with_names`, ids kNoNode) or by id (names emptied).
void SetNodes(ReportedProbe& x, bool with_names, std::string_view node, NodeId node_id,
              std::string_view peer, NodeId peer_id) {
  if (with_names) {
    x.src_node.assign(node);
    x.dst_node.assign(peer);
    x.src_id = kNoNode;
    x.dst_id = kNoNode;
  } else {
    x.src_node.clear();
    x.dst_node.clear();
    x.src_id = node_id;
    x.dst_id = peer_id;
  }
}

// An RDMA device name (mlx5_0), as Hello's endpoints allow (wire_convert.cc).
constexpr size_t kMaxNicNameBytes = 64;

// A NIC name that may end up in a finding's location: not too long, clean UTF-8.
bool CleanNic(std::string_view s) { return s.size() <= kMaxNicNameBytes && IsCleanUtf8(s); }

// A CPU busy or pressure share in thousandths; one over 1000 (no agent sends it) is dropped alone,
// as "not measured": the burst's goodput still counts.
uint16_t CleanPermille(uint32_t v) { return v <= 1000 ? static_cast<uint16_t>(v) : 0; }

// Slots are reused: a row without the RDMA split must not keep an earlier row's.
void ClearHostSplit(ReportedProbe& x) {
  x.prober_host_ns = 0;
  x.responder_host_ns = 0;
  x.cpu_busy_permille = 0;
  x.cpu_peak_permille = 0;
  x.cpu_pressure_permille = 0;
  x.src_nic.clear();
  x.dst_nic.clear();
}

// The NICs a result went between (any transport: they name its rail) and the host delays of an
// rdma_ud result. The agent never exports a negative delay; one that arrives anyway, or a name
// that is too long or not clean UTF-8 (it ends up in a finding's location), is dropped alone: the
// RTT still counts.
void SetHostSplit(ReportedProbe& x, const v1::ProbeResult& r) {
  ClearHostSplit(x);
  if (CleanNic(r.src_nic())) x.src_nic = r.src_nic();
  if (CleanNic(r.dst_nic())) x.dst_nic = r.dst_nic();
  x.cpu_busy_permille = CleanPermille(r.cpu_busy_permille());
  x.cpu_peak_permille = CleanPermille(r.cpu_peak_permille());
  x.cpu_pressure_permille = CleanPermille(r.cpu_pressure_permille());
  if (x.transport != Transport::kRdmaUd) return;
  x.prober_host_ns = std::max<int64_t>(r.prober_host_ns(), 0);
  x.responder_host_ns = std::max<int64_t>(r.responder_host_ns(), 0);
}

}  // namespace

uint32_t PeerNameMemo::Hash(std::string_view name) {
  // FNV-1a: names are short, and one source's few dozen names need no stronger hash.
  uint32_t h = 2166136261u;
  for (const char c : name) {
    h ^= static_cast<unsigned char>(c);
    h *= 16777619u;
  }
  return h;
}

const NodeId* PeerNameMemo::Find(std::string_view name, uint32_t hash) const {
  if (slots_.empty()) return nullptr;
  const size_t mask = slots_.size() - 1;
  for (size_t i = hash & mask;; i = (i + 1) & mask) {
    const uint32_t s = slots_[i];
    if (s == 0) return nullptr;
    const Entry& e = entries_[s - 1];
    if (e.hash == hash && e.length == name.size() &&
        std::string_view(blob_).substr(e.offset, e.length) == name) {
      return &e.id;
    }
  }
}

void PeerNameMemo::Insert(uint32_t entry) {
  const size_t mask = slots_.size() - 1;
  size_t i = entries_[entry].hash & mask;
  while (slots_[i] != 0) i = (i + 1) & mask;
  slots_[i] = entry + 1;
}

void PeerNameMemo::Put(std::string_view name, uint32_t hash, NodeId id, size_t max_names) {
  if (entries_.size() >= max_names) Clear();
  if ((entries_.size() + 1) * 2 > slots_.size()) {
    slots_.assign(std::max<size_t>(16, slots_.size() * 2), 0);
    for (uint32_t e = 0; e < entries_.size(); ++e) Insert(e);
  }
  entries_.push_back(
      {static_cast<uint32_t>(blob_.size()), static_cast<uint32_t>(name.size()), hash, id});
  blob_.append(name);
  Insert(static_cast<uint32_t>(entries_.size() - 1));
}

void PeerNameMemo::Clear() {
  blob_.clear();
  entries_.clear();
  std::fill(slots_.begin(), slots_.end(), 0);
}

namespace {

bool SameNameTable(const v1::ProbeColumns& c, const PeerNameCache& cache) {
  return c.names() == cache.names && std::equal(c.name_lengths().begin(), c.name_lengths().end(),
                                                cache.lengths.begin(), cache.lengths.end());
}

// The shared body of both DecodeProbeBatch forms. `resolve` answers kNoNode to refuse a peer.
DecodeOutcome Decode(std::string_view node, NodeId node_id, const v1::ProbeBatch& batch,
                     const PeerResolver& resolve, bool with_names, PeerNameCache* cache,
                     uint64_t epoch, std::vector<ReportedProbe>& out) {
  DecodeOutcome o;
  size_t used = 0;
  for (const v1::ProbeResult& r : batch.results()) {
    const auto t = TransportFromWire(r.transport());
    if (!t || r.peer().empty() || r.peer() == node || r.src_port() > 65535) {
      ++o.invalid_results;
      continue;
    }
    const NodeId peer = resolve(r.peer());
    if (peer == kNoNode) {
      ++o.invalid_results;
      continue;
    }
    ReportedProbe& x = Slot(out, used);
    SetNodes(x, with_names, node, node_id, r.peer(), peer);
    x.transport = *t;
    x.src_port = static_cast<uint16_t>(r.src_port());
    x.flow_id = r.flow_id();
    x.seq = r.probe_seq();
    x.lost = r.lost();
    x.late = r.late() && !x.lost && x.transport == Transport::kUdp;
    x.rtt_ns = CleanRtt(r.rtt_ns());
    x.bytes = r.bytes();
    x.goodput_bps = CleanGoodput(r.goodput_bps());
    SetHostSplit(x, r);
  }

  if (batch.has_columns()) {
    const v1::ProbeColumns& c = batch.columns();
    const size_t n = static_cast<size_t>(c.peer_size());
    thread_local std::vector<std::string_view> names;
    // Per name: PeerNameCache::kUnresolved until a row refers to it, then its id or kNoNode. The
    // resolver runs once per distinct name, and never for a name only NIC columns use.
    thread_local std::vector<NodeId> own_ids;
    std::vector<NodeId>* ids = &own_ids;
    bool cached = false;
    if (n > DecodeLimits::kMaxColumnRows ||
        static_cast<size_t>(c.name_lengths_size()) > DecodeLimits::kMaxNames) {
      o.column_error = ColumnError::kTooLarge;
    } else if (cache && cache->valid && cache->epoch == epoch && SameNameTable(c, *cache)) {
      // Split, checked and (partly) resolved with the previous batch.
      cached = true;
      ids = &cache->ids;
      o.column_error = CheckColumns(c, ids->size());
    } else if (!SplitNames(c, names)) {
      o.column_error = ColumnError::kNameTable;
    } else {
      o.column_error = CheckColumns(c, names.size());
      if (o.column_error == ColumnError::kNone) {
        if (cache) {
          cache->valid = true;
          cache->epoch = epoch;
          cache->names.assign(c.names());
          cache->lengths.assign(c.name_lengths().begin(), c.name_lengths().end());
          ids = &cache->ids;
        }
        ids->assign(names.size(), PeerNameCache::kUnresolved);
      }
    }
    if (o.column_error == ColumnError::kNone) {
      // The memo answers a name this source sent under this epoch in any earlier table; it holds
      // what `resolve` answered then, which the epoch guarantees it would answer now.
      if (cache && cache->memo_epoch != epoch) {
        cache->memo.Clear();
        cache->memo_epoch = epoch;
      }
      const size_t memo_max = std::max(PeerNameCache::kMinMemoNames, 2 * ids->size());
      auto resolve_once = [&](std::string_view name) -> NodeId {
        if (cache == nullptr) return resolve(name);
        const uint32_t hash = PeerNameMemo::Hash(name);
        if (const NodeId* known = cache->memo.Find(name, hash)) return *known;
        const NodeId id = resolve(name);
        cache->memo.Put(name, hash, id, memo_max);
        return id;
      };
      // On a cache hit the names are split only if a row needs a name not resolved before (once,
      // so a batch costs O(names + rows) whatever its rows refer to).
      bool split = !cached;
      auto name_of = [&](uint32_t i) -> std::string_view {
        if (!split) split = SplitNames(c, names);  // the cached table was checked: cannot fail
        return i < names.size() ? names[i] : std::string_view();
      };
      // Per name: whether it passes CleanNic, decided the first time a row names it as a NIC (a
      // table names a rail's NIC once, its rows each time). Every name of the table passed
      // IsCleanUtf8 when it was split (this batch or the cached table's), so only the length is
      // left to check.
      thread_local std::vector<uint8_t> nic_state;  // kNicUnknown, kNicClean or kNicRefused
      enum : uint8_t { kNicUnknown, kNicClean, kNicRefused };
      nic_state.assign(ids->size(), kNicUnknown);
      auto clean_nic = [&](uint32_t i) -> std::string_view {
        uint8_t& state = nic_state[i];  // i < ids->size(): CheckColumns checked the NIC columns
        if (state == kNicUnknown) {
          state = name_of(i).size() <= kMaxNicNameBytes ? kNicClean : kNicRefused;
        }
        return state == kNicClean ? name_of(i) : std::string_view();
      };
      for (size_t i = 0; i < n; ++i) {
        const int row = static_cast<int>(i);
        const uint32_t peer = c.peer(row);
        NodeId& id = (*ids)[peer];
        if (id == PeerNameCache::kUnresolved) {
          const std::string_view name = name_of(peer);
          id = !name.empty() && name != node ? resolve_once(name) : kNoNode;
        }
        const auto t = c.transport().empty() ? std::nullopt : TransportFromWire(c.transport(row));
        const uint32_t src_port = c.src_port().empty() ? 0 : c.src_port(row);
        if (id == kNoNode || !t || src_port > 65535) {
          ++o.invalid_results;
          continue;
        }
        ReportedProbe& x = Slot(out, used);
        SetNodes(x, with_names, node, node_id, with_names ? name_of(peer) : std::string_view(), id);
        x.transport = *t;
        x.src_port = static_cast<uint16_t>(src_port);
        x.flow_id = c.flow_id().empty() ? 0 : c.flow_id(row);
        x.seq = c.probe_seq().empty() ? 0 : c.probe_seq(row);
        x.lost = c.lost().empty() ? false : c.lost(row);
        x.late = !c.late().empty() && c.late(row) && !x.lost && x.transport == Transport::kUdp;
        x.rtt_ns = c.rtt_ns().empty() ? 0 : CleanRtt(c.rtt_ns(row));
        x.bytes = c.bytes().empty() ? 0 : c.bytes(row);
        x.goodput_bps = c.goodput_bps().empty() ? 0.0 : CleanGoodput(c.goodput_bps(row));
        ClearHostSplit(x);
        // The NICs name the result's rail (the analyzer keys flows by them).
        if (!c.src_nic().empty()) x.src_nic.assign(clean_nic(c.src_nic(row)));
        if (!c.dst_nic().empty()) x.dst_nic.assign(clean_nic(c.dst_nic(row)));
        if (!c.cpu_busy_permille().empty()) {
          x.cpu_busy_permille = CleanPermille(c.cpu_busy_permille(row));
        }
        if (!c.cpu_peak_permille().empty()) {
          x.cpu_peak_permille = CleanPermille(c.cpu_peak_permille(row));
        }
        if (!c.cpu_pressure_permille().empty()) {
          x.cpu_pressure_permille = CleanPermille(c.cpu_pressure_permille(row));
        }
      }
    } else if (cache) {
      cache->valid = false;
    }
  }
  o.appended = used;
  return o;
}

}  // namespace

DecodeOutcome DecodeProbeBatch(std::string_view node, const v1::ProbeBatch& batch,
                               const PeerFilter& accept_peer, std::vector<ReportedProbe>& out) {
  // Any id but kNoNode accepts; the results carry names.
  const PeerResolver accept = [&](std::string_view peer) {
    return accept_peer(peer) ? NodeId{0} : kNoNode;
  };
  return Decode(node, kNoNode, batch, accept, /*with_names=*/true, nullptr, 0, out);
}

DecodeOutcome DecodeProbeBatch(std::string_view node, NodeId node_id, const v1::ProbeBatch& batch,
                               const PeerResolver& resolve, std::vector<ReportedProbe>& out,
                               PeerNameCache* cache, uint64_t epoch) {
  return Decode(node, node_id, batch, resolve, /*with_names=*/false, cache, epoch, out);
}

}  // namespace fw::aggregator
