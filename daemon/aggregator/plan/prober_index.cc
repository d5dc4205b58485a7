// The inverse of a plan set, for the responders' allow lists.
#include "daemon/aggregator/plan/prober_index.h"

#include <algorithm>
#include <iterator>

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
  if (auto p = index_.find(prober); p != index_.end()) Add(p->second, peers);
}

void ProberIndex::Add(uint32_t prober, const std::vector<PlannedPeer>& peers) {
  for (const PlannedPeer& peer : peers) {
    AddUnique(addresses_[prober], peer.src_address);
    auto t = index_.find(peer.node);
    if (t != index_.end() && t->second != prober) {
      probers_[t->second].push_back(prober);
      targets_[prober].push_back(t->second);
    }
  }
}

std::vector<uint32_t> ProberIndex::Clear(uint32_t prober) {
  std::vector<uint32_t> named = std::move(targets_[prober]);
  targets_[prober].clear();
  std::sort(named.begin(), named.end());
  named.erase(std::unique(named.begin(), named.end()), named.end());
  for (uint32_t t : named) std::erase(probers_[t], prober);
  addresses_[prober].resize(endpoint_addresses_[prober]);
  return named;
}

std::vector<std::string> ProberIndex::ClearPlans(const std::string& prober) {
  auto p = index_.find(prober);
  if (p == index_.end()) return {};
  std::vector<std::string> named;
  for (uint32_t t : Clear(p->second)) named.push_back(*names_[t]);
  return named;
}

std::vector<std::string> ProberIndex::ReplacePlans(const std::string& prober,
                                                   const std::vector<PlannedPeer>& peers,
                                                   const std::vector<PlannedPeer>& more) {
  auto p = index_.find(prober);
  if (p == index_.end()) return {};
  const uint32_t me = p->second;
  const std::vector<std::string> addresses_before = addresses_[me];
  const std::vector<uint32_t> before = Clear(me);
  Add(me, peers);
  Add(me, more);
  std::vector<uint32_t> after = targets_[me];
  std::sort(after.begin(), after.end());
  after.erase(std::unique(after.begin(), after.end()), after.end());
  // Addresses compared in order: a reordering alone counts as a change, which only costs checks.
  std::vector<uint32_t> changed;
  if (addresses_[me] != addresses_before) {
    std::set_union(before.begin(), before.end(), after.begin(), after.end(),
                   std::back_inserter(changed));
  } else {
    std::set_symmetric_difference(before.begin(), before.end(), after.begin(), after.end(),
                                  std::back_inserter(changed));
  }
  std::vector<std::string> out;
  out.reserve(changed.size());
  for (uint32_t t : changed) out.push_back(*names_[t]);
  return out;
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
