// The rendezvous seam for collective probes: a small key-value store with blocking reads. The agent
// carries it to the aggregator over the Connect stream; tests use the in-memory store below.
#pragma once

#include <chrono>
#include <cstddef>
#include <map>
#include <string>
#include <string_view>

#include "common/mutex.h"
#include "common/status.h"

namespace fw::collective {

// Bounds every store enforces, so a confused or hostile member cannot grow one without limit.
inline constexpr size_t kMaxKvKeyBytes = 256;
inline constexpr size_t kMaxKvValueBytes = 1 << 20;  // gloo's address blob for ~4000 ranks

class KvStore {
 public:
  virtual ~KvStore() = default;
  // Stores `value` under `key`, replacing an earlier value. InvalidArgument for an empty or
  // oversized key or value; Unavailable when the store cannot be reached. Thread-safe.
  virtual Status Set(std::string_view key, std::string value) = 0;
  // Returns the value under `key`, waiting up to `timeout` for a member to set it. Unavailable
  // ("timed out waiting for key ...") when it does not appear in time. Thread-safe; many readers
  // may wait at once.
  virtual StatusOr<std::string> Get(std::string_view key, std::chrono::milliseconds timeout) = 0;
  // Removes every key that starts with `prefix` (a finished group's keys). Returns how many.
  virtual size_t ErasePrefix(std::string_view prefix) = 0;
};

// Checks a key and value against the bounds above; shared by every implementation.
Status ValidateKvEntry(std::string_view key, size_t value_bytes);

// A store in this process's memory: the fake for tests and the aggregator's backing table.
class InMemoryKvStore final : public KvStore {
 public:
  // `max_keys` bounds the table; a Set beyond it fails with ResourceExhausted.
  explicit InMemoryKvStore(size_t max_keys = 65536) : max_keys_(max_keys) {}
  Status Set(std::string_view key, std::string value) override;
  StatusOr<std::string> Get(std::string_view key, std::chrono::milliseconds timeout) override;
  size_t ErasePrefix(std::string_view prefix) override;
  size_t size() const;

 private:
  const size_t max_keys_;
  mutable Mutex mu_;
  CondVar changed_;
  std::map<std::string, std::string, std::less<>> entries_ FW_GUARDED_BY(mu_);
};

}  // namespace fw::collective
