// ChangedOverlays: which escalation overlays the stage gives the PlanBook after a budget update.
#include "daemon/aggregator/escalation_stage.h"

#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "daemon/aggregator/plan/escalation.h"
#include "daemon/aggregator/plan/plan_overlay.h"

namespace fw::aggregator {
namespace {

// One element asking for flows `a_flows` of a's toward b (8 flows a direction).
EscalationRequest Suspect(const std::string& element, uint64_t a_flows) {
  const EscalationPair pair{.a = "a", .b = "b", .flows = 8, .a_flows = a_flows, .b_flows = 0};
  return EscalationRequest{.element = element, .pairs = {pair}};
}

// What the stage does with the changes: the overlays set on the book afterwards, id -> trace id.
void Follow(std::map<std::string, uint64_t>& book, const OverlayChanges& c) {
  for (const std::string& id : c.clear) book.erase(id);
  for (const PlanOverlay& o : c.set) book[o.id] = o.trace_id;
}

// Two elements escalating other flows of one pair share its overlay (one per pair), under the
// newer element's trace id: a second element's flows change the overlay's flow sets and its
// trace id, and the plans must carry them (the budget pays for them), as they must drop them when
// that element ends.
TEST(EscalationStageTest, AnOverlayWhoseFlowsChangeIsSetAgain) {
  EscalationConfig c;
  c.min_budget_pps = 100;
  c.budget_fraction = 0;
  EscalationBudget budget(c);
  std::map<std::string, uint64_t> book;

  ASSERT_TRUE(budget.Update(0, {Suspect("link:x", FlowBit(1))}, 1'000, 1.0));
  OverlayChanges changes = ChangedOverlays(book, budget.Overlays());
  ASSERT_EQ(changes.set.size(), 1u);
  EXPECT_TRUE(changes.clear.empty());
  Follow(book, changes);
  // Nothing changed: nothing to set.
  EXPECT_TRUE(ChangedOverlays(book, budget.Overlays()).set.empty());

  // link:z escalates flow 3 of the same pair: same overlay id, flows 1 and 3, under z's (newer)
  // trace id, which is what sets it again.
  ASSERT_TRUE(
      budget.Update(1, {Suspect("link:x", FlowBit(1)), Suspect("link:z", FlowBit(3))}, 1'000, 1.0));
  ASSERT_EQ(budget.Escalations().size(), 2u);
  const uint64_t x_trace = book.at("escalation:a~b");
  changes = ChangedOverlays(book, budget.Overlays());
  ASSERT_EQ(changes.set.size(), 1u);
  EXPECT_EQ(changes.set[0].id, "escalation:a~b");
  EXPECT_GT(changes.set[0].trace_id, x_trace);
  EXPECT_EQ(changes.set[0].flow_sets, (std::vector<uint64_t>{FlowBit(1) | FlowBit(3), 0}));
  Follow(book, changes);
  // A change under the same trace id (a rate) is not set again: each set re-plans both agents.
  std::vector<PlanOverlay> same = budget.Overlays();
  same[0].rate_pps *= 2;
  EXPECT_TRUE(ChangedOverlays(book, same).set.empty());

  // link:z ends (no longer asked for): flow 3 goes back to its planned rate, under x's id again.
  ASSERT_TRUE(budget.Update(2, {Suspect("link:x", FlowBit(1))}, 1'000, 1.0));
  changes = ChangedOverlays(book, budget.Overlays());
  ASSERT_EQ(changes.set.size(), 1u);
  EXPECT_EQ(changes.set[0].flow_sets, (std::vector<uint64_t>{FlowBit(1), 0}));
  EXPECT_EQ(changes.set[0].trace_id, x_trace);
  Follow(book, changes);

  // Then link:x ends too: the overlay is cleared.
  ASSERT_TRUE(budget.Update(3, {}, 1'000, 1.0));
  changes = ChangedOverlays(book, budget.Overlays());
  EXPECT_TRUE(changes.set.empty());
  EXPECT_EQ(changes.clear, (std::vector<std::string>{"escalation:a~b"}));
}

}  // namespace
}  // namespace fw::aggregator
