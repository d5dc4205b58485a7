// The bandwidth burst schedule: no node in two bursts of one round, every pair (or ring edge)
// exactly once, and the fewest rounds the pattern allows.
#include "daemon/aggregator/qualify/burst_schedule.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>

namespace fw::qualify {
namespace {

std::vector<std::string> Names(size_t n) {
  std::vector<std::string> out;
  for (size_t i = 0; i < n; ++i) out.push_back("gpu" + std::to_string(i));
  return out;
}

// No NIC runs two bursts at once: within a round, each node sends or receives at most once.
void ExpectNoNodeTwiceInARound(const std::vector<BurstRound>& rounds) {
  for (size_t r = 0; r < rounds.size(); ++r) {
    std::set<std::string> busy;
    for (const Burst& b : rounds[r]) {
      EXPECT_NE(b.src, b.dst);
      EXPECT_TRUE(busy.insert(b.src).second) << b.src << " twice in round " << r;
      EXPECT_TRUE(busy.insert(b.dst).second) << b.dst << " twice in round " << r;
    }
  }
}

TEST(BurstSchedule, AllPairsMeetOnceWithNoNodeTwiceInARound) {
  for (size_t n = 2; n <= 33; ++n) {
    SCOPED_TRACE("n=" + std::to_string(n));
    const auto nodes = Names(n);
    const auto rounds = ScheduleBursts(nodes, BurstPattern::kAllPairs);
    EXPECT_EQ(rounds.size(), n % 2 == 0 ? n - 1 : n);
    ExpectNoNodeTwiceInARound(rounds);
    std::set<std::pair<std::string, std::string>> met;
    std::map<std::string, size_t> sent;
    for (const BurstRound& round : rounds) {
      EXPECT_EQ(round.size(), n / 2);
      for (const Burst& b : round) {
        EXPECT_TRUE(met.insert(std::minmax(b.src, b.dst)).second) << b.src << "-" << b.dst;
        ++sent[b.src];
      }
    }
    EXPECT_EQ(met.size(), n * (n - 1) / 2);
    // Senders alternate: nobody sends all of its bursts, or none, once it has a few.
    if (n >= 6) {
      for (const std::string& node : nodes) {
        EXPECT_GE(sent[node], 1u) << node;
        EXPECT_LE(sent[node], n - 2) << node;
      }
    }
  }
}

TEST(BurstSchedule, EightNodesIsSevenRoundsOfFour) {
  const auto rounds = ScheduleBursts(Names(8), BurstPattern::kAllPairs);
  ASSERT_EQ(rounds.size(), 7u);
  for (const BurstRound& r : rounds) EXPECT_EQ(r.size(), 4u);
}

TEST(BurstSchedule, RingSendsOnceToTheNextNode) {
  for (size_t n = 2; n <= 17; ++n) {
    SCOPED_TRACE("n=" + std::to_string(n));
    const auto nodes = Names(n);
    const auto rounds = ScheduleBursts(nodes, BurstPattern::kRing);
    EXPECT_EQ(rounds.size(), n % 2 == 0 ? 2u : 3u);
    ExpectNoNodeTwiceInARound(rounds);
    std::vector<Burst> all;
    for (const BurstRound& r : rounds) all.insert(all.end(), r.begin(), r.end());
    ASSERT_EQ(all.size(), n);
    for (size_t i = 0; i < n; ++i) {
      EXPECT_EQ(std::count(all.begin(), all.end(), Burst{nodes[i], nodes[(i + 1) % n]}), 1);
    }
  }
}

TEST(BurstSchedule, FewerThanTwoNodesHaveNoBursts) {
  EXPECT_TRUE(ScheduleBursts({}, BurstPattern::kAllPairs).empty());
  EXPECT_TRUE(ScheduleBursts({"a"}, BurstPattern::kRing).empty());
  EXPECT_THAT(ScheduleBursts({"a", "b"}, BurstPattern::kAllPairs),
              ::testing::ElementsAre(::testing::ElementsAre(Burst{"b", "a"})));
}

}  // namespace
}  // namespace fw::qualify
