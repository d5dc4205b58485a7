// In-memory rendezvous store and the bounds every store applies.
#include "probes/collective/kv_store.h"

#include <utility>

namespace fw::collective {

Status ValidateKvEntry(std::string_view key, size_t value_bytes) {
  if (key.empty()) return Status::InvalidArgument("kv: empty key");
  if (key.size() > kMaxKvKeyBytes) {
    return Status::InvalidArgument("kv: key of " + std::to_string(key.size()) +
                                   " bytes exceeds the limit of " + std::to_string(kMaxKvKeyBytes));
  }
  if (value_bytes > kMaxKvValueBytes) {
    return Status::InvalidArgument("kv: value of " + std::to_string(value_bytes) +
                                   " bytes for key '" + std::string(key) +
                                   "' exceeds the limit of " + std::to_string(kMaxKvValueBytes));
  }
  return Status::Ok();
}

Status InMemoryKvStore::Set(std::string_view key, std::string value) {
  if (Status s = ValidateKvEntry(key, value.size()); !s.ok()) return s;
  {
    MutexLock lock(mu_);
    auto it = entries_.find(key);
    if (it != entries_.end()) {
      it->second = std::move(value);
    } else {
      if (entries_.size() >= max_keys_) {
        return Status::ResourceExhausted("kv: store holds " + std::to_string(max_keys_) +
                                         " keys; refusing '" + std::string(key) + "'");
      }
      entries_.emplace(std::string(key), std::move(value));
    }
  }
  changed_.NotifyAll();
  return Status::Ok();
}

StatusOr<std::string> InMemoryKvStore::Get(std::string_view key,
                                           std::chrono::milliseconds timeout) {
  if (Status s = ValidateKvEntry(key, 0); !s.ok()) return s;
  MutexLock lock(mu_);
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    auto it = entries_.find(key);
    if (it != entries_.end()) return it->second;
    if (!changed_.WaitUntil(mu_, deadline)) {
      it = entries_.find(key);
      if (it != entries_.end()) return it->second;
      return Status::Unavailable("kv: timed out after " + std::to_string(timeout.count()) +
                                 " ms waiting for key '" + std::string(key) + "'");
    }
  }
}

size_t InMemoryKvStore::ErasePrefix(std::string_view prefix) {
  MutexLock lock(mu_);
  size_t erased = 0;
  for (auto it = entries_.lower_bound(prefix);
       it != entries_.end() && std::string_view(it->first).starts_with(prefix);) {
    it = entries_.erase(it);
    ++erased;
  }
  return erased;
}

size_t InMemoryKvStore::size() const {
  MutexLock lock(mu_);
  return entries_.size();
}

}  // namespace fw::collective
