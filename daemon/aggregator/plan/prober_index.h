// Who may probe whom: the inverse of a plan set. Plans are not symmetric (representatives per
// ordered leaf pair, sampled peers hashed per node), so a node is probed by nodes its own plan does
// not name; each node's responder is told the addresses of the nodes whose plans name it.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "daemon/aggregator/plan/planner.h"

namespace fw::aggregator {

// Built for one re-plan: construct with the live agents, AddPlan() every plan as the planner
// produces it, then ask AllowedFor(). Kept between re-plans of the same live set, a prober's plans
// can be replaced (ClearPlans(), then AddPlan()) when only some plans changed. Not thread-safe.
// Holds 8 bytes per planned (prober, target) pair plus each agent's addresses.
class ProberIndex {
 public:
  explicit ProberIndex(const std::vector<AgentInfo>& live);

  // `prober`'s plan: every peer it names gets `prober` as one of its probers, and the local
  // addresses the plan probes from (PlannedPeer::src_address) join the prober's addresses.
  void AddPlan(const std::string& prober, const std::vector<PlannedPeer>& peers);

  // The addresses `node`'s responder should answer: every probe endpoint address of every node
  // whose plan names it, sorted, without repeats. Empty (the responder answers everyone) when
  // nobody probes it, when `node` is unknown, or when one of its probers has no address (its
  // probes could come from anywhere, and refusing them would look like loss).
  std::vector<std::string> AllowedFor(const std::string& node) const;
  // Forgets what `prober`'s plans added (its targets, the addresses its plans probe from), as if
  // they had never been added; returns the nodes those plans named, whose allow lists may change.
  std::vector<std::string> ClearPlans(const std::string& prober);
  // Replaces what `prober`'s plans added by `peers` and `more` (ClearPlans, then AddPlan of each).
  // Returns the nodes whose AllowedFor() may differ from before: those named by the old plans or
  // the new ones but not by both, or by either when the addresses the prober's plans probe from
  // changed. Every other list reads as before, since a list depends only on who names the node and
  // on those probers' addresses.
  std::vector<std::string> ReplacePlans(const std::string& prober,
                                        const std::vector<PlannedPeer>& peers,
                                        const std::vector<PlannedPeer>& more);

 private:
  void Add(uint32_t prober, const std::vector<PlannedPeer>& peers);
  // Forgets what the prober's plans added; returns the indices they named, sorted, no repeats.
  std::vector<uint32_t> Clear(uint32_t prober);

  std::unordered_map<std::string, uint32_t> index_;
  std::vector<const std::string*> names_;            // by node index: index_'s keys
  std::vector<std::vector<std::string>> addresses_;  // by node index
  std::vector<uint32_t> endpoint_addresses_;  // by node index: addresses_ that are its endpoints'
  std::vector<std::vector<uint32_t>> probers_;  // by target index: prober indices, repeats
  std::vector<std::vector<uint32_t>> targets_;  // by prober index: target indices, repeats
};

}  // namespace fw::aggregator
