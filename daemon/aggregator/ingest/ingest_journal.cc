// SQLite journal of per-node ingest records.
#include "daemon/aggregator/ingest/ingest_journal.h"

#include <spdlog/spdlog.h>
#include <sqlite3.h>
#include <sys/stat.h>

#include <cstdlib>
#include <utility>

namespace fw::aggregator {

namespace {

constexpr const char* kSchema =
    "CREATE TABLE IF NOT EXISTS ingest ("
    " node TEXT PRIMARY KEY, session_id INTEGER NOT NULL, last_seq INTEGER NOT NULL,"
    " batches INTEGER NOT NULL, results INTEGER NOT NULL, duplicates INTEGER NOT NULL,"
    " gaps INTEGER NOT NULL, recent TEXT NOT NULL, test_batches INTEGER NOT NULL DEFAULT 0,"
    " test_ids TEXT NOT NULL DEFAULT '');";

// SQLite integers are signed 64-bit; session ids and sequences use all 64 bits.
int64_t ToDb(uint64_t v) { return static_cast<int64_t>(v); }
uint64_t FromDb(int64_t v) { return static_cast<uint64_t>(v); }

// "session:seq,session:seq" (the recent sequence spaces; at most kRecentSessions).
std::string EncodeRecent(const std::vector<std::pair<uint64_t, uint64_t>>& recent) {
  std::string out;
  for (const auto& [s, q] : recent) {
    if (!out.empty()) out += ',';
    out += std::to_string(s) + ':' + std::to_string(q);
  }
  return out;
}

std::vector<std::pair<uint64_t, uint64_t>> DecodeRecent(const std::string& text) {
  std::vector<std::pair<uint64_t, uint64_t>> out;
  size_t pos = 0;
  while (pos < text.size() && out.size() < FleetState::kRecentSessions) {
    size_t end = text.find(',', pos);
    if (end == std::string::npos) end = text.size();
    const std::string item = text.substr(pos, end - pos);
    const size_t colon = item.find(':');
    if (colon != std::string::npos) {
      try {
        out.emplace_back(std::stoull(item.substr(0, colon)), std::stoull(item.substr(colon + 1)));
      } catch (const std::exception&) {
        // A damaged entry costs that session's resume point only.
      }
    }
    pos = end + 1;
  }
  return out;
}

// Test batch ids (only with --record-test-batches), comma-separated.
std::string EncodeIds(const std::vector<uint64_t>& ids) {
  std::string out;
  for (uint64_t id : ids) {
    if (!out.empty()) out += ',';
    out += std::to_string(id);
  }
  return out;
}

std::vector<uint64_t> DecodeIds(const std::string& text) {
  std::vector<uint64_t> out;
  const char* p = text.c_str();
  while (*p != '\0') {
    char* end = nullptr;
    const unsigned long long v = std::strtoull(p, &end, 10);
    if (end == p) break;  // damaged: keep what parsed
    out.push_back(v);
    p = *end == ',' ? end + 1 : end;
  }
  return out;
}

struct Stmt {
  sqlite3_stmt* st = nullptr;
  ~Stmt() { sqlite3_finalize(st); }
};

std::string Corruption(sqlite3* db) {
  Stmt s;
  int rc = sqlite3_prepare_v2(db, "PRAGMA quick_check", -1, &s.st, nullptr);
  if (rc == SQLITE_OK) {
    std::string problems;
    while ((rc = sqlite3_step(s.st)) == SQLITE_ROW) {
      const auto* t = reinterpret_cast<const char*>(sqlite3_column_text(s.st, 0));
      std::string row = t ? t : "";
      if (row != "ok") problems += row.substr(0, 100) + " ";
    }
    if (rc == SQLITE_DONE) return problems.empty() ? "" : "quick_check: " + problems;
  }
  const int primary = rc & 0xff;
  if (primary == SQLITE_NOTADB || primary == SQLITE_CORRUPT) return sqlite3_errmsg(db);
  return "";
}

}  // namespace

std::string IngestJournalPath(const std::string& state_dir) {
  return state_dir.empty() ? "" : state_dir + "/ingest.db";
}

StatusOr<std::unique_ptr<IngestJournal>> IngestJournal::Open(const std::string& path,
                                                             int64_t wall_ns) {
  std::optional<QuarantinedFile> quarantined;
  struct stat sb {};
  if (stat(path.c_str(), &sb) == 0) {
    sqlite3* probe = nullptr;
    std::string corrupt;
    if (sqlite3_open_v2(path.c_str(), &probe, SQLITE_OPEN_READWRITE, nullptr) == SQLITE_OK) {
      corrupt = Corruption(probe);
    } else {
      corrupt = probe ? sqlite3_errmsg(probe) : "cannot open";
    }
    sqlite3_close(probe);
    if (!corrupt.empty()) {
      quarantined = QuarantineFile(path, corrupt, wall_ns, {"-wal", "-shm", "-journal"});
      if (quarantined->to.empty()) {
        return Status::FailedPrecondition(path + ": corrupt and cannot be moved aside");
      }
    }
  }
  sqlite3* db = nullptr;
  if (sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, nullptr) !=
      SQLITE_OK) {
    std::string msg = db ? sqlite3_errmsg(db) : "out of memory";
    sqlite3_close(db);
    return Status::Unavailable("ingest journal " + path + ": cannot open: " + msg);
  }
  sqlite3_busy_timeout(db, 1000);
  std::unique_ptr<IngestJournal> j(new IngestJournal(path, db));
  j->quarantined_ = std::move(quarantined);
  // FULL: a commit is on disk (the WAL fsync'ed) before Write() returns, so the acks it releases
  // survive a power loss too, not only a killed process.
  Status st = j->Exec("PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL;");
  if (st.ok()) st = j->Exec(kSchema);
  if (st.ok()) st = j->Prepare();
  if (!st.ok()) return st;
  return j;
}

StatusOr<std::shared_ptr<IngestJournal>> OpenIngestJournal(FleetState& fleet,
                                                           const std::string& state_dir,
                                                           int64_t wall_ns) {
  if (state_dir.empty()) return std::shared_ptr<IngestJournal>();
  const std::string path = IngestJournalPath(state_dir);
  auto journal = IngestJournal::Open(path, wall_ns);
  if (!journal.ok()) return journal.status();
  auto records = (*journal)->Load();
  if (!records.ok()) return records.status();
  fleet.ImportRecords(*records);
  spdlog::info("msg=\"ingest journal opened\" file={} nodes={}", path, records->size());
  return std::shared_ptr<IngestJournal>(std::move(*journal));
}

IngestJournal::~IngestJournal() {
  for (sqlite3_stmt* s : {begin_, commit_, rollback_, upsert_, delete_}) sqlite3_finalize(s);
  sqlite3_close(db_);
}

Status IngestJournal::Prepare() {
  const std::pair<sqlite3_stmt**, const char*> statements[] = {
      {&begin_, "BEGIN IMMEDIATE"},
      {&commit_, "COMMIT"},
      {&rollback_, "ROLLBACK"},
      {&upsert_,
       "INSERT INTO ingest (node, session_id, last_seq, batches, results, "
       "duplicates, gaps, recent, test_batches, test_ids) VALUES (?,?,?,?,?,?,?,?,?,?) "
       "ON CONFLICT(node) DO "
       "UPDATE SET session_id=excluded.session_id, last_seq=excluded.last_seq, "
       "batches=excluded.batches, results=excluded.results, "
       "duplicates=excluded.duplicates, gaps=excluded.gaps, "
       "recent=excluded.recent, test_batches=excluded.test_batches, "
       "test_ids=excluded.test_ids"},
      {&delete_, "DELETE FROM ingest WHERE node = ?"},
  };
  for (const auto& [stmt, sql] : statements) {
    if (sqlite3_prepare_v2(db_, sql, -1, stmt, nullptr) != SQLITE_OK) {
      return Status::Unavailable("ingest journal " + path_ + ": " + sqlite3_errmsg(db_));
    }
  }
  return Status::Ok();
}

Status IngestJournal::Step(sqlite3_stmt* s) {
  const int rc = sqlite3_step(s);
  // The message before the reset, which may replace it.
  Status st = rc == SQLITE_DONE
                  ? Status::Ok()
                  : Status::Unavailable("ingest journal " + path_ + ": " + sqlite3_errmsg(db_));
  sqlite3_reset(s);
  sqlite3_clear_bindings(s);
  return st;
}

void IngestJournal::RollBack() {
  // A failed ROLLBACK leaves nothing more to do: the next BEGIN reports the state.
  if (sqlite3_get_autocommit(db_) == 0) (void)Step(rollback_);
}

Status IngestJournal::Exec(const char* sql) {
  char* err = nullptr;
  if (sqlite3_exec(db_, sql, nullptr, nullptr, &err) != SQLITE_OK) {
    std::string msg = err ? err : sqlite3_errmsg(db_);
    sqlite3_free(err);
    return Status::Unavailable("ingest journal " + path_ + ": " + msg);
  }
  return Status::Ok();
}

StatusOr<std::vector<IngestRecord>> IngestJournal::Load() {
  Stmt s;
  if (sqlite3_prepare_v2(db_,
                         "SELECT node, session_id, last_seq, batches, results, duplicates, gaps, "
                         "recent, test_batches, test_ids FROM ingest",
                         -1, &s.st, nullptr) != SQLITE_OK) {
    return Status::Unavailable("ingest journal " + path_ + ": " + sqlite3_errmsg(db_));
  }
  std::vector<IngestRecord> out;
  int rc;
  while ((rc = sqlite3_step(s.st)) == SQLITE_ROW) {
    IngestRecord r;
    const auto* node = reinterpret_cast<const char*>(sqlite3_column_text(s.st, 0));
    if (node == nullptr || *node == '\0') continue;
    r.node = node;
    r.session_id = FromDb(sqlite3_column_int64(s.st, 1));
    r.last_seq = FromDb(sqlite3_column_int64(s.st, 2));
    r.batches = FromDb(sqlite3_column_int64(s.st, 3));
    r.results = FromDb(sqlite3_column_int64(s.st, 4));
    r.duplicates = FromDb(sqlite3_column_int64(s.st, 5));
    r.gaps = FromDb(sqlite3_column_int64(s.st, 6));
    const auto* recent = reinterpret_cast<const char*>(sqlite3_column_text(s.st, 7));
    r.recent = DecodeRecent(recent ? recent : "");
    r.test_batches = FromDb(sqlite3_column_int64(s.st, 8));
    const auto* ids = reinterpret_cast<const char*>(sqlite3_column_text(s.st, 9));
    r.test_ids = DecodeIds(ids ? ids : "");
    out.push_back(std::move(r));
  }
  if (rc != SQLITE_DONE) {
    return Status::Unavailable("ingest journal " + path_ + ": " + sqlite3_errmsg(db_));
  }
  return out;
}

Status IngestJournal::Write(const std::vector<IngestRecord>& records) {
  if (records.empty()) return Status::Ok();
  Status st = Step(begin_);
  if (!st.ok()) return st;
  for (const IngestRecord& r : records) {
    sqlite3_stmt* s = r.retired ? delete_ : upsert_;
    // Bound with SQLITE_STATIC: each string outlives the Step below, which clears the bindings.
    sqlite3_bind_text(s, 1, r.node.c_str(), static_cast<int>(r.node.size()), SQLITE_STATIC);
    std::string recent, ids;
    if (!r.retired) {
      sqlite3_bind_int64(s, 2, ToDb(r.session_id));
      sqlite3_bind_int64(s, 3, ToDb(r.last_seq));
      sqlite3_bind_int64(s, 4, ToDb(r.batches));
      sqlite3_bind_int64(s, 5, ToDb(r.results));
      sqlite3_bind_int64(s, 6, ToDb(r.duplicates));
      sqlite3_bind_int64(s, 7, ToDb(r.gaps));
      recent = EncodeRecent(r.recent);
      sqlite3_bind_text(s, 8, recent.c_str(), static_cast<int>(recent.size()), SQLITE_STATIC);
      sqlite3_bind_int64(s, 9, ToDb(r.test_batches));
      ids = EncodeIds(r.test_ids);
      sqlite3_bind_text(s, 10, ids.c_str(), static_cast<int>(ids.size()), SQLITE_STATIC);
    }
    st = Step(s);
    if (!st.ok()) {
      RollBack();
      return st;
    }
  }
  st = Step(commit_);
  if (!st.ok()) RollBack();
  return st;
}

}  // namespace fw::aggregator
