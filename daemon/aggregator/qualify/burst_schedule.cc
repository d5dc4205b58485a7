// Round-robin (circle method) and ring schedules of bandwidth bursts.
#include "daemon/aggregator/qualify/burst_schedule.h"

#include <cstddef>

namespace fw::qualify {
namespace {

// The circle method: slot m-1 stays put while slots 0..m-2 turn one step a round; in round r, slot
// m-1 meets r and r+k meets r-k. Over m-1 rounds every two slots meet once. Slot n (odd n only)
// is a rest: whoever meets it sits the round out.
std::vector<BurstRound> AllPairs(const std::vector<std::string>& nodes) {
  const size_t n = nodes.size();
  const size_t m = n + n % 2;
  const size_t turn = m - 1;
  std::vector<BurstRound> rounds;
  for (size_t r = 0; r < turn; ++r) {
    BurstRound round;
    const auto add = [&](size_t a, size_t b, bool a_sends) {
      if (a >= n || b >= n) return;  // the rest slot
      round.push_back(a_sends ? Burst{nodes[a], nodes[b]} : Burst{nodes[b], nodes[a]});
    };
    add(turn, r, r % 2 == 0);
    for (size_t k = 1; k < m / 2; ++k) {
      add((r + k) % turn, (r + turn - k) % turn, k % 2 == 1);
    }
    rounds.push_back(std::move(round));
  }
  return rounds;
}

// Edge i is nodes[i] -> nodes[i+1] (the last wraps to the first). Even edges go in round 0, odd
// ones in round 1; with an odd n the last edge (even, and sharing node 0 with edge 0) has a round
// of its own.
std::vector<BurstRound> Ring(const std::vector<std::string>& nodes) {
  const size_t n = nodes.size();
  std::vector<BurstRound> rounds(n % 2 == 0 ? 2 : 3);
  for (size_t i = 0; i < n; ++i) {
    const size_t r = (n % 2 == 1 && i == n - 1) ? 2 : i % 2;
    rounds[r].push_back({nodes[i], nodes[(i + 1) % n]});
  }
  return rounds;
}

}  // namespace

std::vector<BurstRound> ScheduleBursts(const std::vector<std::string>& nodes,
                                       BurstPattern pattern) {
  if (nodes.size() < 2) return {};
  return pattern == BurstPattern::kRing ? Ring(nodes) : AllPairs(nodes);
}

}  // namespace fw::qualify
