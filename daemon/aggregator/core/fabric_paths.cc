// Equal-cost shortest paths over the fabric map's switch graph, cached per switch pair.
#include <algorithm>
#include <deque>
#include <mutex>

#include "daemon/aggregator/core/fabric_map.h"

namespace fw::aggregator {

struct FabricMap::Cache {
  std::mutex mu;
  std::unordered_map<uint64_t, std::shared_ptr<const SwitchPaths>> paths;  // GUARDED_BY(mu)
};

FabricMap::FabricMap() : cache_(std::make_unique<Cache>()) {}
FabricMap::FabricMap(FabricMap&&) noexcept = default;
FabricMap& FabricMap::operator=(FabricMap&&) noexcept = default;
FabricMap::~FabricMap() = default;

std::vector<std::vector<LinkIndex>> FabricMap::EnumeratePaths(SwitchIndex a, SwitchIndex b,
                                                              bool* truncated) const {
  *truncated = false;
  const size_t n = switches_.size();
  // Breadth-first from a: every shortest-path predecessor of each switch.
  std::vector<uint32_t> dist(n, kNoIndex);
  std::vector<std::vector<std::pair<SwitchIndex, LinkIndex>>> preds(n);
  std::deque<SwitchIndex> queue{a};
  dist[a] = 0;
  while (!queue.empty()) {
    const SwitchIndex u = queue.front();
    queue.pop_front();
    if (u == b) continue;  // nothing beyond b can be on a shortest a→b path
    for (const auto& [v, link] : adjacency_[u]) {
      if (dist[v] == kNoIndex) {
        dist[v] = dist[u] + 1;
        queue.push_back(v);
      }
      if (dist[v] == dist[u] + 1) preds[v].emplace_back(u, link);
    }
  }
  std::vector<std::vector<LinkIndex>> out;
  if (dist[b] == kNoIndex) return out;
  // Walk the predecessor DAG back from b without recursion (a long chain must not blow the stack).
  struct Frame {
    SwitchIndex node;
    size_t next;
  };
  std::vector<Frame> stack{{b, 0}};
  std::vector<LinkIndex> reversed;  // links from b back to the frame on top; size == stack.size()-1
  while (!stack.empty()) {
    const Frame top = stack.back();
    if (top.node == a || top.next == preds[top.node].size()) {
      if (top.node == a) {
        if (out.size() == kMaxPaths) {
          *truncated = true;
          break;
        }
        out.emplace_back(reversed.rbegin(), reversed.rend());
      }
      stack.pop_back();
      if (!reversed.empty()) reversed.pop_back();
      continue;
    }
    const auto [pred, link] = preds[top.node][top.next];
    ++stack.back().next;
    reversed.push_back(link);
    stack.push_back({pred, 0});
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::shared_ptr<const SwitchPaths> FabricMap::SwitchPathsBetween(SwitchIndex a,
                                                                 SwitchIndex b) const {
  if (a >= switches_.size() || b >= switches_.size()) return nullptr;
  const uint64_t key = (static_cast<uint64_t>(a) << 32) | b;
  {
    std::lock_guard<std::mutex> lock(cache_->mu);
    if (auto it = cache_->paths.find(key); it != cache_->paths.end()) return it->second;
  }
  auto computed = std::make_shared<SwitchPaths>();
  if (a == b) {
    computed->paths.emplace_back();
  } else {
    computed->paths = EnumeratePaths(a, b, &computed->truncated);
  }
  std::shared_ptr<const SwitchPaths> result =
      computed->paths.empty() ? nullptr : std::shared_ptr<const SwitchPaths>(std::move(computed));
  std::lock_guard<std::mutex> lock(cache_->mu);
  // Another thread may have raced us to it; both computed the same answer.
  return cache_->paths.emplace(key, std::move(result)).first->second;
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

}  // namespace fw::aggregator
