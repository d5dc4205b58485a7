// The inverse of a plan set, for the responders' allow lists.
#include "daemon/aggregator/plan/prober_index.h"

#include <algorithm>

namespace fw::aggregator {

namespace {

void AddUnique(std::vector<std::string>& v, const std::string& s) {
  if (!s.empty() && std::find(v.begin(), v.end(), s) == v.end()) v.push_back(s);
}

}  // namespace

ProberIndex::ProberIndex(const std::vector<AgentInfo>& live) {
  index_.reserve(live.size());
  addresses_.resize(live.size());
  probers_.resize(live.size());
  for (const AgentInfo& a : live) {
    auto [it, added] = index_.emplace(a.node, static_cast<uint32_t>(index_.size()));
    for (const ProbeEndpoint& e : a.endpoints) AddUnique(addresses_[it->second], e.address);
  }
  addresses_.resize(index_.size());
  probers_.resize(index_.size());
}

void ProberIndex::AddPlan(const std::string& prober, const std::vector<PlannedPeer>& peers) {
  auto p = index_.find(prober);
  if (p == index_.end()) return;
  for (const PlannedPeer& peer : peers) {
    AddUnique(addresses_[p->second], peer.src_address);
    auto t = index_.find(peer.node);
    if (t != index_.end() && t->second != p->second) probers_[t->second].push_back(p->second);
  }
}

std::vector<std::string> ProberIndex::AllowedFor(const std::string& node) const {
  auto t = index_.find(node);
  if (t == index_.end()) return {};
  std::vector<std::string> out;
  for (uint32_t p : probers_[t->second]) {
    if (addresses_[p].empty()) return {};
    out.insert(out.end(), addresses_[p].begin(), addresses_[p].end());
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

}  // namespace fw::aggregator
