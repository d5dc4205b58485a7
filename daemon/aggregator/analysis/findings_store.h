// Findings history in SQLite under --state-dir: survives restarts, and degrades to memory-only
// operation (with a counted, logged error) when the disk is full or unwritable.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/mutex.h"
#include "common/state_file.h"
#include "common/status.h"
#include "daemon/aggregator/analysis/tracked_finding.h"

struct sqlite3;

namespace fw::analysis {

class FindingsStore {
 public:
  struct Options {
    size_t max_resolved_rows = 100'000;  // older resolved findings are pruned
    int64_t max_db_bytes = 0;            // 0: no limit; else writes past it fail as "disk full"
  };
  // The database is `<state_dir>/findings.db`; the directory is created when missing.
  FindingsStore(std::string state_dir, Options options);
  explicit FindingsStore(std::string state_dir) : FindingsStore(std::move(state_dir), Options{}) {}
  ~FindingsStore();
  FindingsStore(const FindingsStore&) = delete;
  FindingsStore& operator=(const FindingsStore&) = delete;

  // Opens (or creates) the database. A file SQLite cannot read as a database (garbage, a wrong
  // header, a truncated file, a failed `PRAGMA quick_check`) is moved aside with its -wal/-shm
  // (see QuarantineFile) and a fresh database is created; quarantined() then says so. On other
  // failures (directory unwritable, disk full) the store stays closed, Save() keeps failing
  // cheaply (and retries opening now and then), and the caller keeps its findings in memory.
  Status Open();
  // The file moved aside by Open(), if any.
  std::optional<QuarantinedFile> quarantined() const;
  bool is_open() const;

  // Inserts or updates these findings (by id) in one transaction. Thread-safe.
  Status Save(const std::vector<TrackedFinding>& findings);
  // Every active finding and the newest `history_limit` resolved ones, newest first.
  StatusOr<std::vector<TrackedFinding>> LoadAll(size_t history_limit);

  // Errors since construction (open, write, read); each distinct error is logged once.
  uint64_t error_count() const;
  std::string last_error() const;
  const std::string& path() const { return path_; }

 private:
  Status OpenLocked() FW_REQUIRES(mu_);
  // "" when the open database passes `PRAGMA quick_check`; else why it is corrupt. Errors that
  // do not mean corruption (I/O, busy) return "" too: OpenLocked() reports them. db_ is open.
  std::string CorruptionLocked() FW_REQUIRES(mu_);
  Status Fail(const std::string& what) FW_REQUIRES(mu_);
  Status Exec(const char* sql) FW_REQUIRES(mu_);
  void CloseLocked() FW_REQUIRES(mu_);

  std::string dir_;
  std::string path_;
  Options options_;
  mutable Mutex mu_;
  sqlite3* db_ FW_GUARDED_BY(mu_) = nullptr;
  uint64_t errors_ FW_GUARDED_BY(mu_) = 0;
  std::string last_error_ FW_GUARDED_BY(mu_);
  std::string last_logged_ FW_GUARDED_BY(mu_);
  uint64_t saves_ FW_GUARDED_BY(mu_) = 0;
  std::optional<QuarantinedFile> quarantined_ FW_GUARDED_BY(mu_);
};

}  // namespace fw::analysis
