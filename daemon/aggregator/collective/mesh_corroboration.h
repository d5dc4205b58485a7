// Where a bisection ends between leaves, the probe mesh says which physical link it is: a
// collective_slow finding at "leaf2's uplinks" becomes one on the fabric map's "leaf2~spine1"
// when the mesh sees that link degraded, and stays at the leaf (or leaf pair) with lower
// confidence when it sees nothing there.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace fw::aggregator::collective {

// One fabric link as the analyzer last judged it (analysis::LinkView, without the analysis
// dependency).
struct MeshLink {
  std::string id;  // the fabric map's id, "leaf2~spine1"
  std::string a, b;
  std::string a_tier, b_tier;  // leaf | spine | superspine | core | host
  std::string state;           // ok | degraded | down | flapping | congested | unknown
  double loss_ratio = 0;
  double latency_inflation = 0;  // 0 when unknown
  double bandwidth_ratio = 0;    // 0 when unknown
  double confidence = 0;
};

// The mesh links a bisection's link culprit may mean: `leaf_b` empty, the links between `leaf_a`
// and a switch above it; otherwise those of both leaves (the leaf pair's traffic crosses one
// uplink of each). Host links never qualify.
bool IsCandidate(const MeshLink& link, std::string_view leaf_a, std::string_view leaf_b);

// The candidate the mesh corroborates: the worst one whose state is down, flapping, degraded or
// congested (in that order; then more loss, more latency inflation, lower bandwidth ratio, id).
// Null when the mesh sees every candidate ok or unknown, or has none.
const MeshLink* CorroboratingLink(const std::vector<MeshLink>& links, std::string_view leaf_a,
                                  std::string_view leaf_b);

}  // namespace fw::aggregator::collective
