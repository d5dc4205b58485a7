// SQLite persistence of qualification reports, beside the findings in findings.db.
#include "daemon/aggregator/qualify/qualify_store.h"

#include <spdlog/spdlog.h>
#include <sqlite3.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <functional>

#include "common/log.h"
#include "daemon/aggregator/qualify/report_json.h"

namespace fw::qualify {
namespace {

constexpr size_t kMaxListed = 1000;

constexpr char kSchema[] =
    "CREATE TABLE IF NOT EXISTS qualifications ("
    " id TEXT PRIMARY KEY, job TEXT NOT NULL, suite TEXT NOT NULL, profile TEXT NOT NULL,"
    " state TEXT NOT NULL, exit_code INTEGER NOT NULL, finished_ns INTEGER NOT NULL,"
    " report TEXT NOT NULL);"
    "CREATE INDEX IF NOT EXISTS qualifications_by_time ON qualifications(finished_ns);"
    "CREATE INDEX IF NOT EXISTS qualifications_by_job ON qualifications(job, finished_ns);"
    "CREATE TABLE IF NOT EXISTS qualification_nodes ("
    " id TEXT NOT NULL, node TEXT NOT NULL, verdict TEXT NOT NULL, PRIMARY KEY (id, node));"
    "CREATE INDEX IF NOT EXISTS qualification_nodes_by_node ON qualification_nodes(node);";

constexpr char kInsertRun[] =
    "INSERT OR REPLACE INTO qualifications (id, job, suite, profile, state, exit_code,"
    " finished_ns, report) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)";
constexpr char kInsertNode[] =
    "INSERT OR REPLACE INTO qualification_nodes (id, node, verdict) VALUES (?1, ?2, ?3)";
// The oldest runs beyond the limit, nodes first (they are found through their run).
constexpr char kPruneNodes[] =
    "DELETE FROM qualification_nodes WHERE id IN (SELECT id FROM qualifications"
    " ORDER BY finished_ns DESC, rowid DESC LIMIT -1 OFFSET ?1)";
constexpr char kPruneRuns[] =
    "DELETE FROM qualifications WHERE id IN (SELECT id FROM qualifications"
    " ORDER BY finished_ns DESC, rowid DESC LIMIT -1 OFFSET ?1)";
constexpr char kSelect[] =
    "SELECT report FROM qualifications WHERE (?1 = '' OR id = ?1) AND (?2 = '' OR job = ?2)"
    " AND (?3 = '' OR id IN (SELECT id FROM qualification_nodes WHERE node = ?3))"
    " ORDER BY finished_ns DESC, rowid DESC LIMIT ?4";

// Finalizes on every path.
struct Prepared {
  sqlite3_stmt* st = nullptr;
  ~Prepared() { sqlite3_finalize(st); }
};

}  // namespace

QualificationStore::QualificationStore(std::string state_dir, Options options)
    : dir_(std::move(state_dir)), path_(dir_ + "/findings.db"), options_(options) {}

QualificationStore::~QualificationStore() {
  MutexLock lock(mu_);
  sqlite3_close(db_);
}

Status QualificationStore::Fail(const std::string& what) const {
  ++errors_;
  if (what != last_logged_) {
    spdlog::error(
        "component=qualify msg=\"qualification history error; reports are kept in memory\" "
        "path={} error={}",
        LogQuote(path_), LogQuote(what));
    last_logged_ = what;
  }
  return Status::Unavailable("qualification history " + path_ + ": " + what);
}

Status QualificationStore::Exec(const char* sql) const {
  char* err = nullptr;
  if (sqlite3_exec(db_, sql, nullptr, nullptr, &err) == SQLITE_OK) return Status::Ok();
  const std::string msg = err ? err : sqlite3_errmsg(db_);
  sqlite3_free(err);
  return Fail(msg);
}

Status QualificationStore::Open() {
  MutexLock lock(mu_);
  sqlite3_close(db_);
  db_ = nullptr;
  if (dir_.empty()) return Fail("no state directory given");
  if (mkdir(dir_.c_str(), 0750) != 0 && errno != EEXIST) {
    return Fail("cannot create directory " + dir_ + ": " + std::strerror(errno));
  }
  if (sqlite3_open_v2(path_.c_str(), &db_, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, nullptr) !=
      SQLITE_OK) {
    const std::string msg = db_ ? sqlite3_errmsg(db_) : "out of memory";
    sqlite3_close(db_);
    db_ = nullptr;
    return Fail("cannot open: " + msg);
  }
  // The analyzer's tick writes findings through its own connection; wait for it, briefly.
  sqlite3_busy_timeout(db_, 2000);
  Status st = Exec("PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;");
  if (st.ok()) st = Exec(kSchema);
  if (!st.ok()) {
    sqlite3_close(db_);
    db_ = nullptr;
    return st;
  }
  spdlog::info("component=qualify msg=\"qualification history open\" path={}", LogQuote(path_));
  return Status::Ok();
}

bool QualificationStore::is_open() const {
  MutexLock lock(mu_);
  return db_ != nullptr;
}

uint64_t QualificationStore::error_count() const {
  MutexLock lock(mu_);
  return errors_;
}

Status QualificationStore::Save(const QualifyReport& report) {
  const std::string json = ReportToJson(report).dump();
  MutexLock lock(mu_);
  if (!db_) return Fail("not open");
  if (Status st = Exec("BEGIN IMMEDIATE"); !st.ok()) return st;
  sqlite3* const db = db_;  // the lambda runs under this lock, which the analysis cannot see
  const auto step = [db](const char* sql, const std::function<void(sqlite3_stmt*)>& bind) {
    Prepared p;
    if (sqlite3_prepare_v2(db, sql, -1, &p.st, nullptr) != SQLITE_OK) return false;
    bind(p.st);
    return sqlite3_step(p.st) == SQLITE_DONE;
  };
  const auto text = [](sqlite3_stmt* s, int i, const std::string& v) {
    sqlite3_bind_text(s, i, v.c_str(), static_cast<int>(v.size()), SQLITE_TRANSIENT);
  };
  bool ok = step(kInsertRun, [&](sqlite3_stmt* s) {
    text(s, 1, report.id);
    text(s, 2, report.job);
    text(s, 3, report.suite);
    text(s, 4, report.profile);
    text(s, 5, report.state);
    sqlite3_bind_int(s, 6, report.exit_code);
    sqlite3_bind_int64(s, 7, report.finished_wall_ns);
    text(s, 8, json);
  });
  for (size_t i = 0; ok && i < report.nodes.size(); ++i) {
    ok = step(kInsertNode, [&](sqlite3_stmt* s) {
      text(s, 1, report.id);
      text(s, 2, report.nodes[i].node);
      text(s, 3, VerdictName(report.nodes[i].verdict));
    });
  }
  for (const char* prune : {kPruneNodes, kPruneRuns}) {
    if (!ok) break;
    ok = step(prune, [&](sqlite3_stmt* s) {
      sqlite3_bind_int64(s, 1, static_cast<int64_t>(options_.max_runs));
    });
  }
  if (!ok) {
    const Status st = Fail(std::string("saving report ") + report.id + ": " + sqlite3_errmsg(db_));
    (void)Exec("ROLLBACK");
    return st;
  }
  return Exec("COMMIT");
}

StatusOr<nlohmann::json> QualificationStore::Find(const ReportQuery& q) const {
  MutexLock lock(mu_);
  if (!db_) return Fail("not open");
  Prepared p;
  if (sqlite3_prepare_v2(db_, kSelect, -1, &p.st, nullptr) != SQLITE_OK) {
    return Fail(sqlite3_errmsg(db_));
  }
  int i = 0;
  for (const std::string* v : {&q.id, &q.job, &q.node}) {
    sqlite3_bind_text(p.st, ++i, v->c_str(), static_cast<int>(v->size()), SQLITE_TRANSIENT);
  }
  sqlite3_bind_int64(p.st, 4, static_cast<int64_t>(std::min(q.limit, kMaxListed)));
  nlohmann::json out = nlohmann::json::array();
  int rc;
  while ((rc = sqlite3_step(p.st)) == SQLITE_ROW) {
    const auto* t = reinterpret_cast<const char*>(sqlite3_column_text(p.st, 0));
    const int n = sqlite3_column_bytes(p.st, 0);
    nlohmann::json r =
        nlohmann::json::parse(t ? std::string_view(t, static_cast<size_t>(n)) : std::string_view(),
                              nullptr, /*allow_exceptions=*/false);
    if (r.is_object()) {
      out.push_back(std::move(r));
    } else {
      // A row damaged outside the aggregator is left out (logged, counted), not the listing.
      (void)Fail("a stored report is not a JSON object; left out of the listing");
    }
  }
  if (rc != SQLITE_DONE) return Fail(sqlite3_errmsg(db_));
  return out;
}

}  // namespace fw::qualify
