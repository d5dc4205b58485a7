#include "daemon/aggregator/collective/mesh_corroboration.h"

#include <tuple>

namespace fw::aggregator::collective {

namespace {

bool Upper(std::string_view tier) {
  return tier == "spine" || tier == "superspine" || tier == "core";
}

// Higher is worse; 0 for a link the mesh finds nothing wrong with.
int StateRank(std::string_view state) {
  if (state == "down") return 4;
  if (state == "flapping") return 3;
  if (state == "degraded") return 2;
  if (state == "congested") return 1;
  return 0;
}

bool UplinkOf(const MeshLink& l, std::string_view leaf) {
  return (l.a == leaf && Upper(l.b_tier)) || (l.b == leaf && Upper(l.a_tier));
}

}  // namespace

bool IsCandidate(const MeshLink& link, std::string_view leaf_a, std::string_view leaf_b) {
  if (!leaf_a.empty() && UplinkOf(link, leaf_a)) return true;
  return !leaf_b.empty() && UplinkOf(link, leaf_b);
}

const MeshLink* CorroboratingLink(const std::vector<MeshLink>& links, std::string_view leaf_a,
                                  std::string_view leaf_b) {
  const MeshLink* best = nullptr;
  auto key = [](const MeshLink& l) {
    return std::make_tuple(StateRank(l.state), l.loss_ratio, l.latency_inflation,
                           -l.bandwidth_ratio);
  };
  for (const MeshLink& l : links) {
    if (StateRank(l.state) == 0 || !IsCandidate(l, leaf_a, leaf_b)) continue;
    if (best == nullptr || key(l) > key(*best) || (key(l) == key(*best) && l.id < best->id)) {
      best = &l;
    }
  }
  return best;
}

}  // namespace fw::aggregator::collective
