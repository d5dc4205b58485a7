// The durable per-node ingest record behind every ack (docs/durability.md).
//
// An ack promises that the batch's effect on the node's ingest record (session, last seq, counts)
// survives a kill -9 of the aggregator at any moment. The journal is one SQLite database in WAL
// mode with synchronous=FULL: a commit returns after the WAL is fsync'ed. Acks are released only
// after the commit that holds their records (group commit: every ack that arrived while one commit
// ran shares the next one, so the fsync cost is spread over many batches).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/state_file.h"
#include "common/status.h"
#include "daemon/aggregator/ingest/fleet_state.h"

struct sqlite3;
struct sqlite3_stmt;

namespace fw::aggregator {

class IngestJournal {
 public:
  // Opens or creates `path`. A file that is not a usable database is moved aside (see
  // quarantined()) and a fresh one is created.
  static StatusOr<std::unique_ptr<IngestJournal>> Open(const std::string& path, int64_t wall_ns);
  ~IngestJournal();
  IngestJournal(const IngestJournal&) = delete;
  IngestJournal& operator=(const IngestJournal&) = delete;

  StatusOr<std::vector<IngestRecord>> Load();
  // Upserts the records (deletes the retired ones) in one transaction; durable once it returns Ok.
  Status Write(const std::vector<IngestRecord>& records);

  const std::optional<QuarantinedFile>& quarantined() const { return quarantined_; }

 private:
  IngestJournal(std::string path, sqlite3* db) : path_(std::move(path)), db_(db) {}
  Status Exec(const char* sql);
  // Prepares the statements Write() runs, once: a commit then parses no SQL (the group commit runs
  // up to 100 times a second, and parsing the upsert cost more than binding and stepping it).
  Status Prepare();
  // Steps a prepared statement that returns no row (BEGIN, COMMIT, ROLLBACK, an upsert); it is
  // reset and its bindings cleared afterwards, whatever the outcome.
  Status Step(sqlite3_stmt* s);
  // Ends a failed transaction, if one is still open (a failed COMMIT may leave it open).
  void RollBack();

  std::string path_;
  sqlite3* db_;
  sqlite3_stmt* begin_ = nullptr;
  sqlite3_stmt* commit_ = nullptr;
  sqlite3_stmt* rollback_ = nullptr;
  sqlite3_stmt* upsert_ = nullptr;
  sqlite3_stmt* delete_ = nullptr;
  std::optional<QuarantinedFile> quarantined_;
};

// "" without a state dir.
std::string IngestJournalPath(const std::string& state_dir);

// Opens <state_dir>/ingest.db and restores `fleet`'s records from it (they override an older
// ingest_state.json). Null without a state dir.
StatusOr<std::shared_ptr<IngestJournal>> OpenIngestJournal(FleetState& fleet,
                                                           const std::string& state_dir,
                                                           int64_t wall_ns);

}  // namespace fw::aggregator
