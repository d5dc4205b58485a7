// The aggregator's key-value service for collective rendezvous (KvRequest/KvReply on the Connect
// stream). It never blocks: a get for a key nobody has set yet parks a waiter that a later set, the
// waiter's timeout or the group's end answers. Only members of a group may touch its keys.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "common/mutex.h"

namespace fw::aggregator::collective {

// One reply for one node: what goes into a KvReply. A set is acknowledged with found = true and an
// empty value; a refused or timed-out request gets found = false.
struct KvDelivery {
  std::string node;
  std::string key;
  std::string value;
  bool found = false;
};

struct KvServiceOptions {
  size_t max_keys = 65536;     // over all groups
  size_t max_waiters = 65536;  // parked gets over all groups
  int64_t get_timeout_ns = 30'000'000'000;
};

class KvService {
 public:
  explicit KvService(KvServiceOptions options = {}) : options_(options) {}

  // Opens a group: its keys live under "collective/<group_id>/" and only `members` may use them.
  // The group closes by itself at `expires_ns` (Expire). Reopening replaces the member list.
  void OpenGroup(const std::string& group_id, const std::vector<std::string>& members,
                 int64_t expires_ns);
  // Erases the group's keys and answers its parked gets with found = false.
  std::vector<KvDelivery> CloseGroup(const std::string& group_id);

  // One KvRequest from `node` (an empty value is a get). Returns the replies to send now: the
  // requester's own (unless its get was parked) and every parked get a set released.
  std::vector<KvDelivery> Handle(const std::string& node, const std::string& key, std::string value,
                                 int64_t now_ns);
  // Answers parked gets past their deadline (found = false) and closes expired groups.
  std::vector<KvDelivery> Expire(int64_t now_ns);

  struct Counters {
    uint64_t gets = 0, sets = 0, parked = 0, timeouts = 0;
    uint64_t refused_bad_key = 0, refused_not_member = 0, refused_full = 0;
  };
  Counters counters() const;
  size_t keys() const;
  size_t waiters() const;

 private:
  struct Group {
    std::set<std::string, std::less<>> members;
    int64_t expires_ns = 0;
  };
  struct Waiter {
    std::string node;
    std::string key;
    int64_t deadline_ns = 0;
  };
  // "collective/<group>/..." -> "<group>"; empty when the key has no such prefix.
  static std::string_view GroupOf(std::string_view key);
  std::vector<KvDelivery> CloseLocked(const std::string& group_id) FW_REQUIRES(mu_);

  const KvServiceOptions options_;
  mutable Mutex mu_;
  std::map<std::string, Group, std::less<>> groups_ FW_GUARDED_BY(mu_);
  std::map<std::string, std::string, std::less<>> entries_ FW_GUARDED_BY(mu_);
  std::multimap<std::string, Waiter, std::less<>> waiters_ FW_GUARDED_BY(mu_);  // by key
  Counters counters_ FW_GUARDED_BY(mu_);
};

}  // namespace fw::aggregator::collective
