// Node names ↔ small dense ids, shared by the pair table and the analyzer's flow table.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>

#include "common/mutex.h"
#include "common/string_hash.h"

namespace fw::aggregator {

// A node's id in a NameInterner.
using NodeId = uint32_t;
// No id: a result that carries names only, or a name that was refused.
inline constexpr NodeId kNoNode = std::numeric_limits<NodeId>::max();

// Thread-safe. Ids count up from 0 and are never reused; names live as long as the interner, so a
// returned view stays valid.
class NameInterner {
 public:
  uint32_t Intern(std::string_view name) {
    {
      ReaderLock lock(mu_);
      if (auto it = ids_.find(name); it != ids_.end()) return it->second;
    }
    WriterLock lock(mu_);
    if (auto it = ids_.find(name); it != ids_.end()) return it->second;
    const auto id = static_cast<uint32_t>(names_.size());
    names_.emplace_back(name);
    ids_.emplace(names_.back(), id);
    return id;
  }

  std::optional<uint32_t> Find(std::string_view name) const {
    ReaderLock lock(mu_);
    if (auto it = ids_.find(name); it != ids_.end()) return it->second;
    return std::nullopt;
  }

  size_t size() const {
    ReaderLock lock(mu_);
    return names_.size();
  }

  // The name of `id`, or an empty view for an id never handed out.
  std::string_view NameOf(uint32_t id) const {
    ReaderLock lock(mu_);
    return id < names_.size() ? std::string_view(names_[id]) : std::string_view();
  }

 private:
  mutable SharedMutex mu_;
  std::unordered_map<std::string, uint32_t, StringHash, std::equal_to<>> ids_ FW_GUARDED_BY(mu_);
  std::deque<std::string> names_ FW_GUARDED_BY(mu_);  // a deque keeps elements in place
};

}  // namespace fw::aggregator
