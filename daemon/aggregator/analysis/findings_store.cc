// SQLite persistence of findings.
#include "daemon/aggregator/analysis/findings_store.h"

#include <sqlite3.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <nlohmann/json.hpp>

#include "common/log.h"

namespace fw::analysis {
namespace {

constexpr int kReopenEverySaves = 30;

constexpr char kSchema[] =
    "CREATE TABLE IF NOT EXISTS findings ("
    " id TEXT PRIMARY KEY, element TEXT NOT NULL, kind TEXT NOT NULL, severity TEXT NOT NULL,"
    " active INTEGER NOT NULL, loc_type TEXT, loc_id TEXT, loc_node TEXT, loc_device TEXT,"
    " loc_port INTEGER, summary TEXT, evidence TEXT, confidence REAL,"
    " first_seen_ns INTEGER, last_seen_ns INTEGER);"
    "CREATE INDEX IF NOT EXISTS findings_by_time ON findings(active, last_seen_ns);";

constexpr char kUpsert[] =
    "INSERT INTO findings (id, element, kind, severity, active, loc_type, loc_id, loc_node,"
    " loc_device, loc_port, summary, evidence, confidence, first_seen_ns, last_seen_ns)"
    " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15)"
    " ON CONFLICT(id) DO UPDATE SET kind = ?3, severity = ?4, active = ?5, loc_type = ?6,"
    " loc_id = ?7, loc_node = ?8, loc_device = ?9, loc_port = ?10, summary = ?11,"
    " evidence = ?12, confidence = ?13, last_seen_ns = ?15";

constexpr char kSelect[] =
    "SELECT id, element, kind, severity, active, loc_type, loc_id, loc_node, loc_device,"
    " loc_port, summary, evidence, confidence, first_seen_ns, last_seen_ns FROM findings"
    " WHERE active = 1 OR id IN (SELECT id FROM findings WHERE active = 0"
    " ORDER BY last_seen_ns DESC LIMIT ?1) ORDER BY last_seen_ns DESC";

std::string Text(sqlite3_stmt* st, int col) {
  const unsigned char* t = sqlite3_column_text(st, col);
  return t ? reinterpret_cast<const char*>(t) : "";
}

// Finalizes a statement on every path.
struct Statement {
  sqlite3_stmt* st = nullptr;
  ~Statement() { sqlite3_finalize(st); }
};

}  // namespace

FindingsStore::FindingsStore(std::string state_dir, Options options)
    : dir_(std::move(state_dir)), path_(dir_ + "/findings.db"), options_(options) {}

FindingsStore::~FindingsStore() {
  MutexLock lock(mu_);
  CloseLocked();
}

void FindingsStore::CloseLocked() {
  if (db_) sqlite3_close(db_);
  db_ = nullptr;
}

Status FindingsStore::Fail(const std::string& what) {
  ++errors_;
  last_error_ = what;
  if (what != last_logged_) {
    spdlog::error(
        "component=analysis msg=\"findings store error; findings are kept in memory\" "
        "path={} error={}",
        LogQuote(path_), LogQuote(what));
    last_logged_ = what;
  }
  return Status::Unavailable("findings store " + path_ + ": " + what);
}

Status FindingsStore::Exec(const char* sql) {
  char* err = nullptr;
  if (sqlite3_exec(db_, sql, nullptr, nullptr, &err) != SQLITE_OK) {
    std::string msg = err ? err : sqlite3_errmsg(db_);
    sqlite3_free(err);
    return Fail(msg);
  }
  return Status::Ok();
}

Status FindingsStore::Open() {
  MutexLock lock(mu_);
  // Checked before OpenLocked(), which would only log a schema error for a file that is not a
  // database; quick_check also finds damaged pages in one that opens.
  std::string corrupt;
  struct stat sb {};
  if (stat(path_.c_str(), &sb) == 0 &&
      sqlite3_open_v2(path_.c_str(), &db_, SQLITE_OPEN_READWRITE, nullptr) == SQLITE_OK) {
    corrupt = CorruptionLocked();
  }
  CloseLocked();
  if (!corrupt.empty()) {
    const int64_t now_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                               std::chrono::system_clock::now().time_since_epoch())
                               .count();
    quarantined_ = QuarantineFile(path_, corrupt, now_ns, {"-wal", "-shm", "-journal"});
    if (quarantined_->to.empty()) return Fail("corrupt and cannot be moved aside: " + corrupt);
  }
  return OpenLocked();
}

std::string FindingsStore::CorruptionLocked() {
  Statement stmt;
  int rc = sqlite3_prepare_v2(db_, "PRAGMA quick_check", -1, &stmt.st, nullptr);
  std::string problems;
  if (rc == SQLITE_OK) {
    while ((rc = sqlite3_step(stmt.st)) == SQLITE_ROW) {
      const std::string row = Text(stmt.st, 0);
      if (row == "ok") continue;
      if (!problems.empty()) problems += '\n';
      problems += row;
    }
    if (rc == SQLITE_DONE) {
      if (problems.empty()) return "";
      // One log line: the report lists every damaged page, one per line.
      std::replace(problems.begin(), problems.end(), '\n', ' ');
      if (problems.size() > 200) problems = problems.substr(0, 200) + "...";
      return "quick_check: " + problems;
    }
  }
  const int primary = rc & 0xff;
  if (primary == SQLITE_NOTADB || primary == SQLITE_CORRUPT) return sqlite3_errmsg(db_);
  return "";
}

std::optional<QuarantinedFile> FindingsStore::quarantined() const {
  MutexLock lock(mu_);
  return quarantined_;
}

Status FindingsStore::OpenLocked() {
  CloseLocked();
  if (dir_.empty()) return Fail("no state directory given");
  if (mkdir(dir_.c_str(), 0750) != 0 && errno != EEXIST) {
    return Fail("cannot create directory " + dir_ + ": " + std::strerror(errno));
  }
  if (sqlite3_open_v2(path_.c_str(), &db_, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, nullptr) !=
      SQLITE_OK) {
    const std::string msg = db_ ? sqlite3_errmsg(db_) : "out of memory";
    CloseLocked();
    return Fail("cannot open: " + msg);
  }
  sqlite3_busy_timeout(db_, 1000);
  Status st = Exec("PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;");
  if (st.ok()) st = Exec(kSchema);
  if (st.ok() && options_.max_db_bytes > 0) {
    const int64_t pages = std::max<int64_t>(1, options_.max_db_bytes / 4096);
    const std::string sql = "PRAGMA max_page_count=" + std::to_string(pages) + ";";
    st = Exec(sql.c_str());
  }
  if (!st.ok()) {
    CloseLocked();
    return st;
  }
  last_logged_.clear();
  return Status::Ok();
}

bool FindingsStore::is_open() const {
  MutexLock lock(mu_);
  return db_ != nullptr;
}

Status FindingsStore::Save(const std::vector<TrackedFinding>& findings) {
  MutexLock lock(mu_);
  ++saves_;
  if (!db_) {
    if (saves_ % kReopenEverySaves != 0) {
      ++errors_;
      return Status::Unavailable("findings store " + path_ + " is not open: " + last_error_);
    }
    if (Status st = OpenLocked(); !st.ok()) return st;
  }
  if (Status st = Exec("BEGIN IMMEDIATE"); !st.ok()) return st;
  Statement stmt;
  if (sqlite3_prepare_v2(db_, kUpsert, -1, &stmt.st, nullptr) != SQLITE_OK) {
    const Status st = Fail(sqlite3_errmsg(db_));
    (void)Exec("ROLLBACK");
    return st;
  }
  for (const TrackedFinding& t : findings) {
    const Finding& f = t.finding;
    nlohmann::json evidence = nlohmann::json::object();
    for (const auto& [k, v] : f.evidence) evidence[k] = v;
    const std::string ev = evidence.dump();
    sqlite3_stmt* s = stmt.st;
    sqlite3_reset(s);
    sqlite3_bind_text(s, 1, t.id.c_str(), -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(s, 2, t.element.c_str(), -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(s, 3, f.kind.c_str(), -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(s, 4, SeverityName(f.severity), -1, SQLITE_STATIC);
    sqlite3_bind_int(s, 5, t.active ? 1 : 0);
    sqlite3_bind_text(s, 6, f.location.type.c_str(), -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(s, 7, f.location.id.c_str(), -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(s, 8, f.location.node.c_str(), -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(s, 9, f.location.device.c_str(), -1, SQLITE_TRANSIENT);
    sqlite3_bind_int(s, 10, f.location.port);
    sqlite3_bind_text(s, 11, f.summary.c_str(), -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(s, 12, ev.c_str(), -1, SQLITE_TRANSIENT);
    sqlite3_bind_double(s, 13, f.confidence);
    sqlite3_bind_int64(s, 14, t.first_seen_ns);
    sqlite3_bind_int64(s, 15, t.last_seen_ns);
    if (sqlite3_step(s) != SQLITE_DONE) {
      const Status st = Fail(sqlite3_errmsg(db_));
      char* err = nullptr;
      sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, &err);
      sqlite3_free(err);
      return st;
    }
  }
  if (saves_ % 100 == 0) {
    const std::string prune =
        "DELETE FROM findings WHERE active = 0 AND id NOT IN (SELECT id FROM findings WHERE "
        "active = 0 ORDER BY last_seen_ns DESC LIMIT " +
        std::to_string(options_.max_resolved_rows) + ")";
    if (Status st = Exec(prune.c_str()); !st.ok()) {
      (void)Exec("ROLLBACK");
      return st;
    }
  }
  if (Status st = Exec("COMMIT"); !st.ok()) {
    char* err = nullptr;
    sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, &err);
    sqlite3_free(err);
    return st;
  }
  last_logged_.clear();
  return Status::Ok();
}

StatusOr<std::vector<TrackedFinding>> FindingsStore::LoadAll(size_t history_limit) {
  MutexLock lock(mu_);
  if (!db_) return Status::Unavailable("findings store " + path_ + " is not open: " + last_error_);
  Statement stmt;
  if (sqlite3_prepare_v2(db_, kSelect, -1, &stmt.st, nullptr) != SQLITE_OK) {
    return Fail(sqlite3_errmsg(db_));
  }
  sqlite3_bind_int64(stmt.st, 1, static_cast<int64_t>(history_limit));
  std::vector<TrackedFinding> out;
  int rc;
  while ((rc = sqlite3_step(stmt.st)) == SQLITE_ROW) {
    sqlite3_stmt* s = stmt.st;
    TrackedFinding t;
    t.id = Text(s, 0);
    t.element = Text(s, 1);
    t.finding.kind = Text(s, 2);
    t.finding.severity = Text(s, 3) == "critical" ? Severity::kCritical : Severity::kWarning;
    t.active = sqlite3_column_int(s, 4) != 0;
    t.finding.location =
        FindingLocation{Text(s, 5), Text(s, 6), Text(s, 7), Text(s, 8), sqlite3_column_int(s, 9)};
    t.finding.summary = Text(s, 10);
    const nlohmann::json ev =
        nlohmann::json::parse(Text(s, 11), nullptr, /*allow_exceptions=*/false);
    if (ev.is_object()) {
      for (const auto& [k, v] : ev.items()) {
        if (v.is_number()) t.finding.evidence[k] = v.get<double>();
      }
    }
    t.finding.confidence = sqlite3_column_double(s, 12);
    t.first_seen_ns = sqlite3_column_int64(s, 13);
    t.last_seen_ns = sqlite3_column_int64(s, 14);
    if (t.id.empty() || t.element.empty() || t.finding.kind.empty()) continue;  // damaged row
    out.push_back(std::move(t));
  }
  if (rc != SQLITE_DONE) return Fail(sqlite3_errmsg(db_));
  return out;
}

uint64_t FindingsStore::error_count() const {
  MutexLock lock(mu_);
  return errors_;
}

std::string FindingsStore::last_error() const {
  MutexLock lock(mu_);
  return last_error_;
}

}  // namespace fw::analysis
