// The order of the suite's bandwidth bursts (step 3): rounds in which every node sends or receives
// at most one burst, so no NIC carries two bursts at once and each burst measures its path alone.
// Rounds run one after the other; the bursts of a round run side by side.
#pragma once

#include <string>
#include <vector>

namespace fw::qualify {

// One burst: `src` sends to `dst` (a burst measures one direction).
struct Burst {
  std::string src, dst;
  bool operator==(const Burst&) const = default;
};
using BurstRound = std::vector<Burst>;

enum class BurstPattern {
  // Every unordered pair once: n-1 rounds of n/2 bursts for an even n, n rounds of (n-1)/2 for an
  // odd n (one node rests each round). Senders alternate so each node sends about half its bursts.
  kAllPairs,
  // Each node sends once, to the next one in the given order (the last to the first): 2 rounds for
  // an even n, 3 for an odd n. Catches a slow NIC or link with n bursts instead of n(n-1)/2.
  kRing,
};

// The rounds for `nodes` (distinct names, in the order given). Fewer than 2 nodes: no rounds.
std::vector<BurstRound> ScheduleBursts(const std::vector<std::string>& nodes, BurstPattern pattern);

}  // namespace fw::qualify
