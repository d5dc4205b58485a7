// Non-blocking rendezvous key-value service with per-group membership and bounded state.
#include "daemon/aggregator/collective/kv_service.h"

#include <spdlog/spdlog.h>

#include "probes/collective/kv_store.h"

namespace fw::aggregator::collective {

std::string_view KvService::GroupOf(std::string_view key) {
  constexpr std::string_view kPrefix = "collective/";
  if (!key.starts_with(kPrefix)) return {};
  key.remove_prefix(kPrefix.size());
  const size_t slash = key.find('/');
  if (slash == 0 || slash == std::string_view::npos || slash + 1 == key.size()) return {};
  return key.substr(0, slash);
}

void KvService::OpenGroup(const std::string& group_id, const std::vector<std::string>& members,
                          int64_t expires_ns) {
  MutexLock lock(mu_);
  Group& g = groups_[group_id];
  g.members = {members.begin(), members.end()};
  g.expires_ns = expires_ns;
}

std::vector<KvDelivery> KvService::CloseGroup(const std::string& group_id) {
  MutexLock lock(mu_);
  return CloseLocked(group_id);
}

std::vector<KvDelivery> KvService::CloseLocked(const std::string& group_id) {
  std::vector<KvDelivery> out;
  groups_.erase(group_id);
  const std::string prefix = "collective/" + group_id + "/";
  for (auto it = entries_.lower_bound(prefix);
       it != entries_.end() && std::string_view(it->first).starts_with(prefix);) {
    it = entries_.erase(it);
  }
  for (auto it = waiters_.lower_bound(prefix);
       it != waiters_.end() && std::string_view(it->first).starts_with(prefix);) {
    out.push_back({it->second.node, it->second.key, "", false});
    it = waiters_.erase(it);
  }
  return out;
}

std::vector<KvDelivery> KvService::Handle(const std::string& node, const std::string& key,
                                          std::string value, int64_t now_ns) {
  std::vector<KvDelivery> out;
  const bool is_set = !value.empty();
  MutexLock lock(mu_);
  const std::string_view group = GroupOf(key);
  if (group.empty() || !fw::collective::ValidateKvEntry(key, value.size()).ok()) {
    ++counters_.refused_bad_key;
    SPDLOG_WARN("component=collective_kv msg=\"refused: bad key\" node={} key_bytes={}", node,
                key.size());
    out.push_back({node, key.substr(0, 256), "", false});
    return out;
  }
  auto g = groups_.find(group);
  if (g == groups_.end() || !g->second.members.contains(node)) {
    ++counters_.refused_not_member;
    SPDLOG_WARN("component=collective_kv msg=\"refused: not a member\" node={} group={}", node,
                group);
    out.push_back({node, key, "", false});
    return out;
  }
  if (!is_set) {
    ++counters_.gets;
    if (auto it = entries_.find(key); it != entries_.end()) {
      out.push_back({node, key, it->second, true});
    } else if (waiters_.size() >= options_.max_waiters) {
      ++counters_.refused_full;
      out.push_back({node, key, "", false});
    } else {
      ++counters_.parked;
      waiters_.emplace(key, Waiter{node, key, now_ns + options_.get_timeout_ns});
    }
    return out;
  }
  ++counters_.sets;
  auto it = entries_.find(key);
  if (it == entries_.end() && entries_.size() >= options_.max_keys) {
    ++counters_.refused_full;
    SPDLOG_WARN("component=collective_kv msg=\"refused: store full\" node={} keys={}", node,
                entries_.size());
    out.push_back({node, key, "", false});
    return out;
  }
  const std::string& stored = it == entries_.end()
                                  ? entries_.emplace(key, std::move(value)).first->second
                                  : (it->second = std::move(value));
  out.push_back({node, key, "", true});
  auto [first, last] = waiters_.equal_range(key);
  for (auto w = first; w != last; ++w) out.push_back({w->second.node, key, stored, true});
  waiters_.erase(first, last);
  return out;
}

std::vector<KvDelivery> KvService::Expire(int64_t now_ns) {
  std::vector<KvDelivery> out;
  MutexLock lock(mu_);
  for (auto it = waiters_.begin(); it != waiters_.end();) {
    if (it->second.deadline_ns <= now_ns) {
      ++counters_.timeouts;
      out.push_back({it->second.node, it->second.key, "", false});
      it = waiters_.erase(it);
    } else {
      ++it;
    }
  }
  std::vector<std::string> expired;
  for (const auto& [id, g] : groups_) {
    if (g.expires_ns <= now_ns) expired.push_back(id);
  }
  for (const std::string& id : expired) {
    auto closed = CloseLocked(id);
    out.insert(out.end(), closed.begin(), closed.end());
  }
  return out;
}

KvService::Counters KvService::counters() const {
  MutexLock lock(mu_);
  return counters_;
}

size_t KvService::keys() const {
  MutexLock lock(mu_);
  return entries_.size();
}

size_t KvService::waiters() const {
  MutexLock lock(mu_);
  return waiters_.size();
}

}  // namespace fw::aggregator::collective
