// Which pairs a suspect element escalates: its own bad pairs and, for a fabric link's suspicion,
// a pair beside it under each of its switches.
#include "daemon/aggregator/analysis/escalation_candidates.h"

#include <gtest/gtest.h>

#include "daemon/aggregator/analysis/testing/blame_fixture.h"

namespace fw::analysis {
namespace {

std::vector<std::string> PairsOf(const std::vector<aggregator::EscalationRequest>& requests,
                                 const std::string& element, bool* suspicion) {
  std::vector<std::string> out;
  for (const auto& r : requests) {
    if (r.element != element) continue;
    *suspicion = r.suspicion;
    for (const auto& p : r.pairs) out.push_back(p.a + "~" + p.b);
  }
  return out;
}

// Spine s1 with leaves l1 (a), l2 (b), l3 (c, d). l1~s1 is weakly lossy (a~b and a~c have lost
// probes). At the suspicion's significance its request also escalates b~c, which crosses l2~s1
// and l3~s1 but not l1~s1, so that a lossy spine shows on them in the same evaluation; c~d
// crosses no fabric link. Below it (weak evidence alone, the 3 % budget) only its own pairs.
TEST(EscalationCandidates, ALinkSuspicionAlsoEscalatesAPairBesideItUnderItsSwitch) {
  auto pairs = [](double significance, bool* suspicion) {
    testing::BlameFixture t(testing::ThreeLeafMap());
    t.AddPair("a", "b", 2, 1);
    t.AddPair("a", "c", 2, 1);
    t.AddPair("b", "c", 2, 0);
    t.AddPair("c", "d", 1, 0);
    LinkBlame weak = testing::LossBlame(t.LinkOf("l1", "s1"), 0.02, 0.02);
    weak.significance = significance;
    t.ev.weak_loss.push_back(weak);
    ElementTracker tracker(t.config);
    return PairsOf(EscalationCandidates(t.Context(), t.ev, tracker), "link:l1~s1", suspicion);
  };
  bool suspicion = false;
  EXPECT_EQ(pairs(6, &suspicion), (std::vector<std::string>{"a~b", "a~c", "b~c"}));
  EXPECT_TRUE(suspicion);
  EXPECT_EQ(pairs(4, &suspicion), (std::vector<std::string>{"a~b", "a~c"}));
  EXPECT_FALSE(suspicion);
}

}  // namespace
}  // namespace fw::analysis
