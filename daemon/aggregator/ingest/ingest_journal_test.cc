// The ingest journal: round trip, retired nodes, a corrupt file, and kill -9 while committing.
#include "daemon/aggregator/ingest/ingest_journal.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>

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

}  // namespace
}  // namespace fw::aggregator
