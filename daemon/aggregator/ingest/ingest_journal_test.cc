// The ingest journal: round trip, retired nodes, a corrupt file, and kill -9 while committing.
#include "daemon/aggregator/ingest/ingest_journal.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <map>
#include <random>

#include "common/testing/temp_dir.h"

namespace fw::aggregator {
namespace {

IngestRecord Rec(const std::string& node, uint64_t session, uint64_t seq) {
  IngestRecord r;
  r.node = node;
  r.session_id = session;
  r.last_seq = seq;
  r.batches = seq;
  r.results = seq * 40;
  r.recent = {{~uint64_t{0}, 5}, {3, 9}};
  return r;
}

TEST(IngestJournalTest, RecordsSurviveReopenAndRetiredOnesGo) {
  fw::testing::TempDir dir("fw-journal");
  const std::string path = IngestJournalPath(dir.path());
  {
    auto j = IngestJournal::Open(path, 0);
    ASSERT_TRUE(j.ok()) << j.status().message();
    ASSERT_TRUE((*j)->Write({Rec("a", 0xfedcba9876543210ULL, 7), Rec("b", 2, 3)}).ok());
    ASSERT_TRUE((*j)->Write({Rec("a", 0xfedcba9876543210ULL, 8)}).ok());
    IngestRecord gone;
    gone.node = "b";
    gone.retired = true;
    ASSERT_TRUE((*j)->Write({gone}).ok());
  }
  auto j = IngestJournal::Open(path, 0);
  ASSERT_TRUE(j.ok());
  EXPECT_FALSE((*j)->quarantined());
  auto recs = (*j)->Load();
  ASSERT_TRUE(recs.ok());
  ASSERT_EQ(recs->size(), 1u);
  EXPECT_EQ((*recs)[0].node, "a");
  EXPECT_EQ((*recs)[0].session_id, 0xfedcba9876543210ULL);
  EXPECT_EQ((*recs)[0].last_seq, 8u);
  EXPECT_EQ((*recs)[0].results, 320u);
  ASSERT_EQ((*recs)[0].recent.size(), 2u);
  EXPECT_EQ((*recs)[0].recent[0].first, ~uint64_t{0});
  EXPECT_EQ((*recs)[0].recent[1].second, 9u);
}

TEST(IngestJournalTest, ACorruptFileIsMovedAsideAndAFreshOneStarts) {
  fw::testing::TempDir dir("fw-journal");
  const std::string path = IngestJournalPath(dir.path());
  std::ofstream(path) << "this is not a database, it is a text file of some length..........";
  auto j = IngestJournal::Open(path, 0);
  ASSERT_TRUE(j.ok()) << j.status().message();
  ASSERT_TRUE((*j)->quarantined().has_value());
  EXPECT_EQ((*j)->quarantined()->file, "ingest.db");
  EXPECT_FALSE((*j)->quarantined()->to.empty());
  auto recs = (*j)->Load();
  ASSERT_TRUE(recs.ok());
  EXPECT_TRUE(recs->empty());
}

// A child commits increasing seqs and reports each one after Write() returned (the moment an
// ack would be sent); the parent kills it with SIGKILL at arbitrary points. Every reported seq must
// be in the journal afterwards.
TEST(IngestJournalTest, EveryCommittedRecordSurvivesKill9) {
  fw::testing::TempDir dir("fw-journal");
  const std::string path = IngestJournalPath(dir.path());
  uint64_t base = 0;
  for (int round = 0; round < 5; ++round) {
    int fds[2];
    ASSERT_EQ(pipe(fds), 0);
    pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      close(fds[0]);
      auto j = IngestJournal::Open(path, 0);
      if (!j.ok()) _exit(2);
      for (uint64_t seq = base + 1;; ++seq) {
        if (!(*j)->Write({Rec("n", 1, seq), Rec("m", 2, seq)}).ok()) _exit(3);
        if (write(fds[1], &seq, sizeof seq) != sizeof seq) _exit(4);
      }
    }
    close(fds[1]);
    uint64_t acked = 0, v = 0;
    // Let it commit a while (several hundred commits), then kill it mid-flight.
    for (int i = 0; i < 50 + round * 37 && read(fds[0], &v, sizeof v) == sizeof v; ++i) acked = v;
    kill(pid, SIGKILL);
    while (read(fds[0], &v, sizeof v) == sizeof v) acked = v;
    close(fds[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    ASSERT_TRUE(WIFSIGNALED(status)) << "the child failed on its own: " << status;
    auto j = IngestJournal::Open(path, 0);
    ASSERT_TRUE(j.ok());
    EXPECT_FALSE((*j)->quarantined());
    auto recs = (*j)->Load();
    ASSERT_TRUE(recs.ok());
    ASSERT_EQ(recs->size(), 2u);
    for (const auto& r : *recs) {
      EXPECT_GE(r.last_seq, acked) << "round " << round << " node " << r.node;
      EXPECT_LE(r.last_seq, acked + 1);  // at most the one commit not yet reported
    }
    base = (*recs)[0].last_seq;
  }
}

// Write() reuses its prepared statements across commits: a random mix of upserts and retirements over
// many commits, each record with its own strings, must read back exactly as a model of the last
// write per node says (nothing bound for one record leaks into another).
TEST(IngestJournalTest, ManyCommitsOfUpsertsAndRetirementsReadBackAsWritten) {
  fw::testing::TempDir dir("fw-journal");
  const std::string path = IngestJournalPath(dir.path());
  std::map<std::string, IngestRecord> model;
  std::mt19937_64 rng(7);
  {
    auto j = IngestJournal::Open(path, 0);
    ASSERT_TRUE(j.ok()) << j.status().message();
    for (int commit = 0; commit < 300; ++commit) {
      std::vector<IngestRecord> records;
      const int n = 1 + static_cast<int>(rng() % 6);
      for (int i = 0; i < n; ++i) {
        IngestRecord r = Rec("node-" + std::to_string(rng() % 20), rng(), rng() % 100000);
        r.duplicates = rng() % 7;
        r.gaps = rng() % 5;
        r.recent.resize(rng() % 3);
        for (auto& [s, q] : r.recent) s = rng(), q = rng() % 1000;
        if (rng() % 4 == 0) r.test_ids = {rng() % 100, rng() % 100};
        r.test_batches = r.test_ids.size();
        r.retired = rng() % 5 == 0;
        records.push_back(r);
        if (r.retired) {
          model.erase(r.node);
        } else {
          model[r.node] = r;
        }
      }
      ASSERT_TRUE((*j)->Write(records).ok()) << "commit " << commit;
    }
  }
  auto j = IngestJournal::Open(path, 0);
  ASSERT_TRUE(j.ok());
  auto recs = (*j)->Load();
  ASSERT_TRUE(recs.ok());
  ASSERT_EQ(recs->size(), model.size());
  for (const IngestRecord& r : *recs) {
    ASSERT_TRUE(model.count(r.node)) << r.node;
    const IngestRecord& want = model[r.node];
    EXPECT_EQ(r.session_id, want.session_id) << r.node;
    EXPECT_EQ(r.last_seq, want.last_seq) << r.node;
    EXPECT_EQ(r.batches, want.batches) << r.node;
    EXPECT_EQ(r.results, want.results) << r.node;
    EXPECT_EQ(r.duplicates, want.duplicates) << r.node;
    EXPECT_EQ(r.gaps, want.gaps) << r.node;
    EXPECT_EQ(r.recent, want.recent) << r.node;
    EXPECT_EQ(r.test_batches, want.test_batches) << r.node;
    EXPECT_EQ(r.test_ids, want.test_ids) << r.node;
  }
}

// A commit that fails part-way stores none of its records, and the journal keeps working: another
// connection adds a trigger that refuses one node (a schema change the prepared statements must
// survive), a commit naming it fails whole, and once the trigger is gone the same commit succeeds.
// A commit that cannot begin (another connection holds the write lock) fails, and the next one
// succeeds.
TEST(IngestJournalTest, AFailedCommitStoresNothingAndTheNextOneWorks) {
  fw::testing::TempDir dir("fw-journal");
  const std::string path = IngestJournalPath(dir.path());
  auto j = IngestJournal::Open(path, 0);
  ASSERT_TRUE(j.ok()) << j.status().message();
  ASSERT_TRUE((*j)->Write({Rec("a", 1, 1)}).ok());

  sqlite3* other = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &other), SQLITE_OK);
  auto exec = [&](const char* sql) {
    char* err = nullptr;
    const int rc = sqlite3_exec(other, sql, nullptr, nullptr, &err);
    sqlite3_free(err);
    return rc;
  };
  ASSERT_EQ(exec("CREATE TRIGGER refuse_bad BEFORE INSERT ON ingest WHEN NEW.node = 'bad' "
                 "BEGIN SELECT RAISE(ABORT, 'refused'); END"),
            SQLITE_OK);
  EXPECT_FALSE((*j)->Write({Rec("a", 1, 2), Rec("bad", 1, 1), Rec("c", 1, 1)}).ok());
  ASSERT_EQ(exec("DROP TRIGGER refuse_bad"), SQLITE_OK);
  {
    auto recs = (*j)->Load();
    ASSERT_TRUE(recs.ok());
    ASSERT_EQ(recs->size(), 1u);
    EXPECT_EQ((*recs)[0].last_seq, 1u);  // the failed commit's update of "a" is gone too
  }
  EXPECT_TRUE((*j)->Write({Rec("a", 1, 2), Rec("bad", 1, 1), Rec("c", 1, 1)}).ok());

  ASSERT_EQ(exec("BEGIN IMMEDIATE"), SQLITE_OK);  // held past the journal's 1 s busy timeout
  EXPECT_FALSE((*j)->Write({Rec("a", 1, 3)}).ok());
  ASSERT_EQ(exec("COMMIT"), SQLITE_OK);
  EXPECT_TRUE((*j)->Write({Rec("a", 1, 4)}).ok());
  sqlite3_close(other);

  auto recs = (*j)->Load();
  ASSERT_TRUE(recs.ok());
  std::map<std::string, uint64_t> seqs;
  for (const IngestRecord& r : *recs) seqs[r.node] = r.last_seq;
  EXPECT_EQ(seqs, (std::map<std::string, uint64_t>{{"a", 4}, {"bad", 1}, {"c", 1}}));
}

}  // namespace
}  // namespace fw::aggregator
