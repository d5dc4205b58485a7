// The qualification history in findings.db: reports survive a reopen (an aggregator restart), are
// listed by id, node and job, newest first, and pruned; a corrupt database is moved aside by the
// findings store and the history starts fresh; damage the store cannot open around is counted.
#include "daemon/aggregator/qualify/qualify_store.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sqlite3.h>

#include <filesystem>
#include <fstream>

#include "common/testing/temp_dir.h"
#include "daemon/aggregator/analysis/findings_store.h"

namespace fw::qualify {
namespace {

using TempDir = ::fw::testing::TempDir;

QualifyReport Report(const std::string& id, const std::string& job,
                     const std::vector<std::string>& nodes, int64_t finished_ns,
                     Verdict v = Verdict::kPass) {
  QualifyReport r;
  r.id = id;
  r.job = job;
  r.suite = "quick";
  r.profile = "generic";
  r.started_wall_ns = finished_ns - 6'000'000'000;
  r.finished_wall_ns = finished_ns;
  r.duration_s = 6;
  for (const std::string& n : nodes) r.nodes.push_back({n, v, {}});
  r.steps.push_back({"mesh", "done", 5.2, "30 pairs"});
  r.exit_code = static_cast<int>(v);
  return r;
}

std::vector<std::string> Ids(const nlohmann::json& reports) {
  std::vector<std::string> out;
  for (const auto& r : reports) out.push_back(r.at("id").get<std::string>());
  return out;
}

ReportQuery Query(std::string id, std::string node, std::string job, size_t limit = 50) {
  ReportQuery q;
  q.id = std::move(id);
  q.node = std::move(node);
  q.job = std::move(job);
  q.limit = limit;
  return q;
}

constexpr int64_t kT0 = 1'800'000'000'000'000'000;

TEST(QualificationStore, ReportsSurviveAReopenWithTheirContents) {
  TempDir dir;
  {
    QualificationStore store(dir.path());
    ASSERT_TRUE(store.Open().ok());
    QualifyReport r = Report("q1", "4711", {"gpu001", "gpu002"}, kT0, Verdict::kFail);
    r.nodes[1].reasons = {"RTT p99 to 1 peers 2.4 ms, 6.1x the set's median"};
    r.pairs.push_back({"gpu001", "gpu002", Verdict::kWarn, {"loss 2%"}});
    ASSERT_TRUE(store.Save(r).ok());
  }
  QualificationStore store(dir.path());
  ASSERT_TRUE(store.Open().ok());
  auto found = store.Find({});
  ASSERT_TRUE(found.ok());
  ASSERT_EQ(found->size(), 1u);
  const auto& r = (*found)[0];
  EXPECT_EQ(r["id"], "q1");
  EXPECT_EQ(r["job"], "4711");
  EXPECT_EQ(r["exit_code"], 2);
  EXPECT_EQ(r["nodes"][1]["verdict"], "fail");
  EXPECT_THAT(r["nodes"][1]["reasons"][0].get<std::string>(), ::testing::HasSubstr("6.1x"));
  EXPECT_EQ(r["pairs"][0]["verdict"], "warn");
  EXPECT_EQ(r["steps"][0]["name"], "mesh");
  EXPECT_EQ(store.error_count(), 0u);
}

TEST(QualificationStore, FindsByIdNodeAndJobNewestFirstWithALimit) {
  TempDir dir;
  QualificationStore store(dir.path());
  ASSERT_TRUE(store.Open().ok());
  ASSERT_TRUE(store.Save(Report("q1", "100", {"a", "b"}, kT0)).ok());
  ASSERT_TRUE(store.Save(Report("q2", "200", {"b", "c"}, kT0 + 1'000)).ok());
  ASSERT_TRUE(store.Save(Report("q3", "", {"c", "d"}, kT0 + 2'000)).ok());

  EXPECT_THAT(Ids(*store.Find({})), ::testing::ElementsAre("q3", "q2", "q1"));
  EXPECT_THAT(Ids(*store.Find(Query("", "b", ""))), ::testing::ElementsAre("q2", "q1"));
  EXPECT_THAT(Ids(*store.Find(Query("", "", "200"))), ::testing::ElementsAre("q2"));
  EXPECT_THAT(Ids(*store.Find(Query("q1", "", ""))), ::testing::ElementsAre("q1"));
  EXPECT_THAT(Ids(*store.Find(Query("", "", "", 2))), ::testing::ElementsAre("q3", "q2"));
  EXPECT_TRUE(store.Find(Query("", "zz", ""))->empty());
}

TEST(QualificationStore, SavingAnIdAgainReplacesIt) {
  TempDir dir;
  QualificationStore store(dir.path());
  ASSERT_TRUE(store.Open().ok());
  ASSERT_TRUE(store.Save(Report("q1", "", {"a", "b"}, kT0)).ok());
  ASSERT_TRUE(store.Save(Report("q1", "", {"a", "b"}, kT0, Verdict::kWarn)).ok());
  auto found = store.Find({});
  ASSERT_EQ(found->size(), 1u);
  EXPECT_EQ((*found)[0]["exit_code"], 1);
}

TEST(QualificationStore, PrunesTheOldestRunsAndTheirNodes) {
  TempDir dir;
  QualificationStore store(dir.path(), {.max_runs = 3});
  ASSERT_TRUE(store.Open().ok());
  for (int i = 0; i < 5; ++i) {
    ASSERT_TRUE(
        store.Save(Report("q" + std::to_string(i), "", {"n" + std::to_string(i)}, kT0 + i * 1'000))
            .ok());
  }
  EXPECT_THAT(Ids(*store.Find({})), ::testing::ElementsAre("q4", "q3", "q2"));
  EXPECT_TRUE(store.Find(Query("", "n0", ""))->empty());
  // The node rows went with their runs.
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open((dir.path() + "/findings.db").c_str(), &db), SQLITE_OK);
  sqlite3_stmt* st = nullptr;
  ASSERT_EQ(sqlite3_prepare_v2(db, "SELECT COUNT(*) FROM qualification_nodes", -1, &st, nullptr),
            SQLITE_OK);
  ASSERT_EQ(sqlite3_step(st), SQLITE_ROW);
  EXPECT_EQ(sqlite3_column_int(st, 0), 3);
  sqlite3_finalize(st);
  sqlite3_close(db);
}

TEST(QualificationStore, SharesFindingsDbWithTheFindingsStore) {
  TempDir dir;
  analysis::FindingsStore findings(dir.path());
  ASSERT_TRUE(findings.Open().ok());
  QualificationStore store(dir.path());
  ASSERT_TRUE(store.Open().ok());
  EXPECT_EQ(store.path(), findings.path());
  ASSERT_TRUE(store.Save(Report("q1", "", {"a"}, kT0)).ok());
  ASSERT_TRUE(findings.Save({}).ok());
  EXPECT_EQ(store.Find({})->size(), 1u);
}

// What the aggregator does at start: the findings store opens first and moves a corrupt file
// aside (the aggregator counts it in its state-file metric); the history then starts fresh.
TEST(QualificationStore, CorruptDatabaseIsMovedAsideAndTheHistoryStartsFresh) {
  TempDir dir;
  {
    std::ofstream f(dir.path() + "/findings.db", std::ios::binary);
    f << std::string(8192, 'x');
  }
  analysis::FindingsStore findings(dir.path());
  ASSERT_TRUE(findings.Open().ok());
  ASSERT_TRUE(findings.quarantined().has_value());
  QualificationStore store(dir.path());
  ASSERT_TRUE(store.Open().ok());
  EXPECT_TRUE(store.Find({})->empty());
  ASSERT_TRUE(store.Save(Report("q1", "", {"a"}, kT0)).ok());
  EXPECT_EQ(store.Find({})->size(), 1u);
}

// Alone over a file that is no database, the store stays closed and counts it: the jobs then
// keep their reports in memory.
TEST(QualificationStore, UnreadableDatabaseLeavesTheStoreClosedAndCounted) {
  TempDir dir;
  {
    std::ofstream f(dir.path() + "/findings.db", std::ios::binary);
    f << std::string(8192, 'x');
  }
  QualificationStore store(dir.path());
  EXPECT_FALSE(store.Open().ok());
  EXPECT_FALSE(store.is_open());
  EXPECT_FALSE(store.Save(Report("q1", "", {"a"}, kT0)).ok());
  EXPECT_FALSE(store.Find({}).ok());
  EXPECT_GE(store.error_count(), 3u);
}

TEST(QualificationStore, NoStateDirectoryIsAnError) {
  QualificationStore store("");
  EXPECT_FALSE(store.Open().ok());
  EXPECT_EQ(store.error_count(), 1u);
}

TEST(QualificationStore, ADamagedRowIsLeftOutOfTheListingAndCounted) {
  TempDir dir;
  QualificationStore store(dir.path());
  ASSERT_TRUE(store.Open().ok());
  ASSERT_TRUE(store.Save(Report("q1", "", {"a"}, kT0)).ok());
  ASSERT_TRUE(store.Save(Report("q2", "", {"a"}, kT0 + 1'000)).ok());
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open((dir.path() + "/findings.db").c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db, "UPDATE qualifications SET report = '{not json' WHERE id = 'q1'",
                         nullptr, nullptr, nullptr),
            SQLITE_OK);
  sqlite3_close(db);
  auto found = store.Find({});
  ASSERT_TRUE(found.ok());
  EXPECT_THAT(Ids(*found), ::testing::ElementsAre("q2"));
  EXPECT_EQ(store.error_count(), 1u);
}

}  // namespace
}  // namespace fw::qualify
