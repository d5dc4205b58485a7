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
  names_.resize(live.size());
  for (const AgentInfo& a : live) {
    auto [it, added] = index_.emplace(a.node, static_cast<uint32_t>(index_.size()));
    if (added) names_[it->second] = &it->first;
    for (const ProbeEndpoint& e : a.endpoints) AddUnique(addresses_[it->second], e.address);
  }
  addresses_.resize(index_.size());
  names_.resize(index_.size());
  endpoint_addresses_.resize(index_.size());
  for (size_t i = 0; i < index_.size(); ++i) {
    endpoint_addresses_[i] = static_cast<uint32_t>(addresses_[i].size());
  }
  probers_.resize(index_.size());
  targets_.resize(index_.size());
}

void ProberIndex::AddPlan(const std::string& prober, const std::vector<PlannedPeer>& peers) {
  auto p = index_.find(prober);
  if (p == index_.end()) return;
  for (const PlannedPeer& peer : peers) {
    AddUnique(addresses_[p->second], peer.src_address);
    auto t = index_.find(peer.node);
    if (t != index_.end() && t->second != p->second) {
      probers_[t->second].push_back(p->second);
      targets_[p->second].push_back(t->second);
    }
  }
}

std::vector<std::string> ProberIndex::ClearPlans(const std::string& prober) {
  auto p = index_.find(prober);
  if (p == index_.end()) return {};
  const uint32_t me = p->second;
  std::vector<uint32_t>& targets = targets_[me];
  std::sort(targets.begin(), targets.end());
  targets.erase(std::unique(targets.begin(), targets.end()), targets.end());
  std::vector<std::string> named;
  named.reserve(targets.size());
  for (uint32_t t : targets) {
    std::erase(probers_[t], me);
    named.push_back(*names_[t]);
  }
  targets.clear();
  addresses_[me].resize(endpoint_addresses_[me]);
  return named;
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
