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

  std::string path_;
  sqlite3* db_;
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
