// Qualification reports in the findings history: tables of their own in `<state_dir>/findings.db`
// (the findings store's database, WAL mode, so both connections share it), so that past
// qualifications survive a restart and can be listed per node and per job.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "common/mutex.h"
#include "common/status.h"
#include "daemon/aggregator/qualify/jobs.h"
#include "daemon/aggregator/qualify/suite.h"

struct sqlite3;

namespace fw::qualify {

class QualificationStore {
 public:
  struct Options {
    size_t max_runs = 10'000;  // older reports are pruned (with their node rows)
  };
  explicit QualificationStore(std::string state_dir, Options options);
  explicit QualificationStore(std::string state_dir)
      : QualificationStore(std::move(state_dir), Options{}) {}
  ~QualificationStore();
  QualificationStore(const QualificationStore&) = delete;
  QualificationStore& operator=(const QualificationStore&) = delete;

  // Opens the database and creates the tables. Call it after the findings store has opened (and,
  // if the file was corrupt, moved it aside). On failure the store stays closed: Save() and
  // Find() fail cheaply and the jobs keep their reports in memory.
  Status Open();
  bool is_open() const;

  // Inserts the report (by id; a second save of one id replaces it) and one row per node with
  // its verdict. Thread-safe.
  Status Save(const QualifyReport& report);
  // The stored reports (docs/qualify.md's JSON) that match, newest first, at most q.limit
  // (capped at 1,000).
  StatusOr<nlohmann::json> Find(const ReportQuery& q) const;

  // Errors since construction; each distinct error is logged once.
  uint64_t error_count() const;
  const std::string& path() const { return path_; }

 private:
  Status Fail(const std::string& what) const FW_REQUIRES(mu_);
  Status Exec(const char* sql) const FW_REQUIRES(mu_);

  std::string dir_;
  std::string path_;
  Options options_;
  mutable Mutex mu_;
  sqlite3* db_ FW_GUARDED_BY(mu_) = nullptr;
  mutable uint64_t errors_ FW_GUARDED_BY(mu_) = 0;
  mutable std::string last_logged_ FW_GUARDED_BY(mu_);
};

}  // namespace fw::qualify
