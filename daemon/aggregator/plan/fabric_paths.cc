// Equal-cost shortest paths over the fabric map's switch graph, cached per switch pair.
#include <algorithm>
#include <deque>
#include <utility>

#include "common/mutex.h"
#include "daemon/aggregator/plan/fabric_map.h"

namespace fw::aggregator {

struct FabricMap::Cache {
  Mutex mu;
  std::unordered_map<uint64_t, std::shared_ptr<const SwitchPaths>> paths FW_GUARDED_BY(mu);
};

FabricMap::FabricMap() : cache_(std::make_unique<Cache>()) {}
FabricMap::FabricMap(FabricMap&&) noexcept = default;
FabricMap& FabricMap::operator=(FabricMap&&) noexcept = default;
FabricMap::~FabricMap() = default;

// Breadth-first search from one switch: distances and every shortest-path predecessor.
struct FabricMap::Bfs {
  std::vector<uint32_t> dist;
  std::vector<std::vector<std::pair<SwitchIndex, LinkIndex>>> preds;
};

FabricMap::Bfs FabricMap::BfsFrom(SwitchIndex a) const {
  const size_t n = switches_.size();
  Bfs bfs{std::vector<uint32_t>(n, kNoIndex), decltype(Bfs::preds)(n)};
  std::deque<SwitchIndex> queue{a};
  bfs.dist[a] = 0;
  while (!queue.empty()) {
    const SwitchIndex u = queue.front();
    queue.pop_front();
    for (const auto& [v, link] : adjacency_[u]) {
      if (bfs.dist[v] == kNoIndex) {
        bfs.dist[v] = bfs.dist[u] + 1;
        queue.push_back(v);
      }
      if (bfs.dist[v] == bfs.dist[u] + 1) bfs.preds[v].emplace_back(u, link);
    }
  }
  return bfs;
}

PathList::PathList(uint32_t hops, const std::vector<std::vector<LinkIndex>>& paths)
    : count_(static_cast<uint32_t>(paths.size())), hops_(hops) {
  links_.reserve(paths.size() * hops);
  for (const auto& p : paths) links_.insert(links_.end(), p.begin(), p.end());
}

std::shared_ptr<const SwitchPaths> FabricMap::EnumeratePaths(const Bfs& bfs, SwitchIndex a,
                                                             SwitchIndex b) const {
  auto result = std::make_shared<SwitchPaths>();
  if (a == b) {
    result->paths = PathList(0, {{}});
    return result;
  }
  if (bfs.dist[b] == kNoIndex) return nullptr;
  std::vector<std::vector<LinkIndex>> out;  // every shortest path has bfs.dist[b] links
  // Walk the predecessor DAG back from b without recursion (a long chain must not blow the stack).
  struct Frame {
    SwitchIndex node;
    size_t next;
  };
  std::vector<Frame> stack{{b, 0}};
  std::vector<LinkIndex> reversed;  // links from b back to the frame on top; size == stack.size()-1
  while (!stack.empty()) {
    const Frame top = stack.back();
    if (top.node == a || top.next == bfs.preds[top.node].size()) {
      if (top.node == a) {
        if (out.size() == kMaxPaths) {
          result->truncated = true;
          break;
        }
        out.emplace_back(reversed.rbegin(), reversed.rend());
      }
      stack.pop_back();
      if (!reversed.empty()) reversed.pop_back();
      continue;
    }
    const auto [pred, link] = bfs.preds[top.node][top.next];
    ++stack.back().next;
    reversed.push_back(link);
    stack.push_back({pred, 0});
  }
  std::sort(out.begin(), out.end());
  result->paths = PathList(bfs.dist[b], out);
  return result;
}

std::shared_ptr<const SwitchPaths> FabricMap::SwitchPathsBetween(SwitchIndex a,
                                                                 SwitchIndex b) const {
  if (a >= switches_.size() || b >= switches_.size()) return nullptr;
  auto key = [](SwitchIndex x, SwitchIndex y) { return (static_cast<uint64_t>(x) << 32) | y; };
  {
    MutexLock lock(cache_->mu);
    if (auto it = cache_->paths.find(key(a, b)); it != cache_->paths.end()) return it->second;
  }
  // One search from a answers every destination: fill in a→b and a→(every switch with hosts), as
  // callers (the planner, the analyzer) ask for all leaf pairs of a source leaf together.
  const Bfs bfs = BfsFrom(a);
  std::vector<std::pair<uint64_t, std::shared_ptr<const SwitchPaths>>> computed;
  computed.emplace_back(key(a, b), EnumeratePaths(bfs, a, b));
  for (SwitchIndex x = 0; x < switches_.size(); ++x) {
    if (x != b && !nics_by_switch_[x].empty())
      computed.emplace_back(key(a, x), EnumeratePaths(bfs, a, x));
  }
  MutexLock lock(cache_->mu);
  for (auto& [k, paths] : computed) cache_->paths.emplace(k, std::move(paths));  // keeps a racer's
  return cache_->paths.at(key(a, b));
}

PathSet FabricMap::Paths(HostNicIndex src, HostNicIndex dst) const {
  PathSet set;
  if (src >= host_nics_.size() || dst >= host_nics_.size()) return set;
  const HostNic& s = host_nics_[src];
  const HostNic& d = host_nics_[dst];
  set.core = SwitchPathsBetween(s.leaf, d.leaf);
  if (!set.core) return set;
  set.src_access = s.access_link;
  set.dst_access = d.access_link;
  set.path_class = s.leaf == d.leaf ? PathClass::kIntraLeaf : PathClass::kInterLeaf;
  return set;
}

PathSet FabricMap::PathsBetweenNodes(std::string_view src_node, std::string_view dst_node) const {
  const auto& src_nics = NicsOfNode(src_node);
  const auto& dst_nics = NicsOfNode(dst_node);
  if (src_nics.empty() || dst_nics.empty()) return PathSet{};
  for (HostNicIndex s : src_nics) {
    for (HostNicIndex d : dst_nics) {
      if (host_nics_[s].nic == host_nics_[d].nic) return Paths(s, d);
    }
  }
  return Paths(src_nics.front(), dst_nics.front());
}

PathSet FabricMap::PathsBetweenNics(std::string_view src_node, std::string_view src_nic,
                                    std::string_view dst_node, std::string_view dst_nic) const {
  if (!src_nic.empty() && !dst_nic.empty()) {
    const std::optional<HostNicIndex> s = FindHostNic(src_node, src_nic);
    const std::optional<HostNicIndex> d = FindHostNic(dst_node, dst_nic);
    if (s && d) return Paths(*s, *d);
  }
  return PathsBetweenNodes(src_node, dst_node);
}

}  // namespace fw::aggregator
