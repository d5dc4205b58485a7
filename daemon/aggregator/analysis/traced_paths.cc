// TracedPaths: traced hops -> the map's path index per flow.
#include "daemon/aggregator/analysis/traced_paths.h"

#include <algorithm>

#include "common/log.h"

namespace fw::analysis {
namespace {

// A refused trace is counted always and logged at the first refusal and every 1,000th after, so
// that a misbehaving agent cannot flood the log.
void LogRefusal(uint64_t refused, std::string_view why, std::string_view src,
                std::string_view dst) {
  if (refused % 1000 != 1) return;
  spdlog::warn("component=analysis msg=\"path trace refused\" reason={} src={} dst={} refused={}",
               why, LogQuote(std::string(src)), LogQuote(std::string(dst)), refused);
}

}  // namespace

using aggregator::FabricMap;
using aggregator::NodeId;
using aggregator::PathSet;
using aggregator::SwitchIndex;

const char* PathSourceName(PathSource s) {
  switch (s) {
    case PathSource::kCandidates:
      return "candidates";
    case PathSource::kMap:
      return "map";
    case PathSource::kTraced:
      return "traced";
  }
  return "unknown";
}

TracedPaths::TracedPaths(std::shared_ptr<const FabricMap> map,
                         std::shared_ptr<aggregator::NameInterner> names, size_t max_flows,
                         int64_t max_age_s)
    : map_(std::move(map)),
      names_(names ? std::move(names) : std::make_shared<aggregator::NameInterner>()),
      max_flows_(max_flows),
      max_age_ns_(max_age_s * 1'000'000'000) {}

FlowNics NicsOfPaths(const FabricMap& map, const PathSet& paths) {
  FlowNics n;
  const auto& links = map.links();
  if (paths.src_access < links.size()) n.src = links[paths.src_access].host_nic;
  if (paths.dst_access < links.size()) n.dst = links[paths.dst_access].host_nic;
  return n;
}

PathSet TracedPaths::PathsOfTrace(std::string_view src, std::string_view dst,
                                  std::string_view src_address,
                                  std::string_view dst_address) const {
  if (!map_) return PathSet{};
  if (!src_address.empty() && !dst_address.empty()) {
    const std::optional<aggregator::HostNicIndex> s = map_->HostNicAt(src, src_address);
    const std::optional<aggregator::HostNicIndex> d = map_->HostNicAt(dst, dst_address);
    if (s && d) return map_->Paths(*s, *d);
  }
  return map_->PathsBetweenNodes(src, dst);
}

TraceOutcome TracedPaths::Match(const PathSet& paths, std::span<const std::string> hops) const {
  TraceOutcome out;
  // Hop k as a switch of the map; nullopt for a silent hop or an address no switch lists.
  std::vector<std::optional<SwitchIndex>> at(hops.size());
  for (size_t k = 0; k < hops.size(); ++k) {
    if (hops[k].empty()) continue;
    if (map_) at[k] = map_->SwitchAtAddress(hops[k]);
    if (!at[k]) out.unknown_hops.push_back(hops[k]);
  }
  std::sort(out.unknown_hops.begin(), out.unknown_hops.end());
  out.unknown_hops.erase(std::unique(out.unknown_hops.begin(), out.unknown_hops.end()),
                         out.unknown_hops.end());

  if (paths.PathCount() == 0) return out;
  int matches = 0;
  for (size_t i = 0; i < paths.PathCount(); ++i) {
    const std::vector<SwitchIndex> seq = map_->SwitchesOnPath(paths, i);
    bool ok = true;
    for (size_t k = 0; k < seq.size() && k < at.size() && ok; ++k) {
      ok = !at[k] || *at[k] == seq[k];
    }
    // A known switch beyond the path's end contradicts it too.
    for (size_t k = seq.size(); k < at.size() && ok; ++k) ok = !at[k];
    if (!ok) continue;
    if (++matches == 1) out.path = static_cast<int32_t>(i);
  }
  out.kind = matches == 1   ? TraceOutcome::kResolved
             : matches == 0 ? TraceOutcome::kNoMatch
                            : TraceOutcome::kAmbiguous;
  if (out.kind != TraceOutcome::kResolved) out.path = -1;
  return out;
}

void TracedPaths::Store(PairMap& table, uint64_t key, uint16_t port, FlowNics nics,
                        TraceOutcome& out, int64_t now_ns, std::string_view src,
                        std::string_view dst) {
  ++stats_.traces;
  switch (out.kind) {
    case TraceOutcome::kResolved:
      ++stats_.resolved;
      break;
    case TraceOutcome::kAmbiguous:
      ++stats_.ambiguous;
      break;
    case TraceOutcome::kNoMatch:
      ++stats_.no_match;
      break;
    case TraceOutcome::kUnmapped:
      ++stats_.unmapped;
      break;
  }
  std::vector<Entry>& flows = table[key];
  auto it = std::find_if(flows.begin(), flows.end(),
                         [&](const Entry& e) { return e.src_port == port && e.nics == nics; });
  if (it == flows.end()) {
    if (flows_ >= max_flows_) {
      LogRefusal(++stats_.refused, "table_full", src, dst);
      if (flows.empty()) table.erase(key);
      out.kind = TraceOutcome::kUnmapped;
      out.path = -1;
      return;
    }
    ++flows_;
    flow_count_.store(flows_, std::memory_order_relaxed);
    Entry fresh;
    fresh.src_port = port;
    fresh.nics = nics;
    it = flows.insert(flows.end(), std::move(fresh));
  } else if (it->path >= 0 && out.path >= 0 && it->path != out.path) {
    ++stats_.moved;
  }
  // An unresolved trace also replaces a resolved one: the old path is no longer known to hold.
  it->path = out.path;
  it->at_ns = now_ns;
  it->unknown_hops = out.unknown_hops;
}

TraceOutcome TracedPaths::Record(std::string_view src, std::string_view dst, uint16_t src_port,
                                 std::span<const std::string> hops, int64_t now_ns,
                                 std::string_view src_address, std::string_view dst_address) {
  if (hops.size() > kMaxHops) {
    WriterLock lock(mu_);
    ++stats_.traces;
    LogRefusal(++stats_.refused, "too_many_hops", src, dst);
    return {};
  }
  const PathSet paths = PathsOfTrace(src, dst, src_address, dst_address);
  TraceOutcome out = Match(paths, hops);
  const FlowNics nics = map_ ? NicsOfPaths(*map_, paths) : FlowNics{};
  const uint64_t key = Key(names_->Intern(src), names_->Intern(dst));
  WriterLock lock(mu_);
  Store(by_pair_, key, src_port, nics, out, now_ns, src, dst);
  return out;
}

TraceOutcome TracedPaths::RecordEcho(std::string_view responder, std::string_view prober,
                                     uint16_t prober_port, std::span<const std::string> hops,
                                     int64_t now_ns, std::string_view responder_address,
                                     std::string_view prober_address) {
  if (hops.size() > kMaxHops) {
    WriterLock lock(mu_);
    ++stats_.traces;
    ++stats_.echoes;
    LogRefusal(++stats_.refused, "too_many_hops", responder, prober);
    return {};
  }
  const PathSet back = PathsOfTrace(responder, prober, responder_address, prober_address);
  TraceOutcome out = Match(back, hops);
  // The prober -> responder path set between the same two NICs.
  PathSet fwd;
  if (map_ && back.src_access < map_->links().size() && back.dst_access < map_->links().size()) {
    fwd = map_->Paths(map_->links()[back.dst_access].host_nic,
                      map_->links()[back.src_access].host_nic);
  }
  if (out.kind == TraceOutcome::kResolved) {
    // The same links in the prober -> responder path set: its paths list the same equal-cost
    // routes, not necessarily in the same order.
    const auto back_path = back.core->paths[static_cast<size_t>(out.path)];
    std::vector<aggregator::LinkIndex> want(back_path.begin(), back_path.end());
    std::sort(want.begin(), want.end());
    out.path = -1;
    for (size_t i = 0; fwd.core && i < fwd.core->paths.size(); ++i) {
      const auto fwd_path = fwd.core->paths[i];
      std::vector<aggregator::LinkIndex> have(fwd_path.begin(), fwd_path.end());
      std::sort(have.begin(), have.end());
      if (have == want) {
        out.path = static_cast<int32_t>(i);
        break;
      }
    }
    if (out.path < 0) out.kind = TraceOutcome::kNoMatch;
  }
  const uint64_t key = Key(names_->Intern(prober), names_->Intern(responder));
  WriterLock lock(mu_);
  ++stats_.echoes;
  Store(echo_by_pair_, key, prober_port, map_ ? NicsOfPaths(*map_, fwd) : FlowNics{}, out, now_ns,
        responder, prober);
  return out;
}

std::optional<int32_t> TracedPaths::Lookup(const PairMap& table, uint64_t key, uint16_t port,
                                           FlowNics nics, int64_t now_ns) const {
  auto p = table.find(key);
  if (p == table.end()) return std::nullopt;
  for (const Entry& e : p->second) {
    if (e.src_port != port || (nics.known() && e.nics != nics)) continue;
    if (e.path < 0 || now_ns - e.at_ns > max_age_ns_) return std::nullopt;
    return e.path;
  }
  return std::nullopt;
}

std::optional<int32_t> TracedPaths::PathOf(NodeId src, NodeId dst, uint16_t src_port,
                                           int64_t now_ns, FlowNics nics) const {
  ReaderLock lock(mu_);
  return Lookup(by_pair_, Key(src, dst), src_port, nics, now_ns);
}

std::optional<int32_t> TracedPaths::EchoPathOf(NodeId src, NodeId dst, uint16_t src_port,
                                               int64_t now_ns, FlowNics nics) const {
  ReaderLock lock(mu_);
  return Lookup(echo_by_pair_, Key(src, dst), src_port, nics, now_ns);
}

std::vector<std::string> TracedPaths::UnknownHopsOf(NodeId src, NodeId dst) const {
  std::vector<std::string> out;
  ReaderLock lock(mu_);
  auto p = by_pair_.find(Key(src, dst));
  if (p == by_pair_.end()) return out;
  for (const Entry& e : p->second)
    out.insert(out.end(), e.unknown_hops.begin(), e.unknown_hops.end());
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

TracedPaths::Stats TracedPaths::stats() const {
  ReaderLock lock(mu_);
  Stats s = stats_;
  s.flows = flows_;
  return s;
}

}  // namespace fw::analysis
