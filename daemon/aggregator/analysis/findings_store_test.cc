// The findings store: history survives a reopen and an analyzer restart; an unwritable directory
// or a full database keeps the analyzer running in memory with counted errors.
#include "daemon/aggregator/analysis/findings_store.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "common/testing/temp_dir.h"
#include "daemon/aggregator/analysis/testing/synthetic_fleet.h"

namespace fw::analysis {
namespace {

using TempDir = ::fw::testing::TempDir;

TrackedFinding Sample(std::string id, bool active, int64_t last_seen_ns) {
  TrackedFinding t;
  t.id = std::move(id);
  t.element = "link:leaf1~spine2";
  t.finding.kind = "link_degraded";
  t.finding.severity = Severity::kCritical;
  t.finding.location = FindingLocation{"link", "leaf1~spine2", "", "", 0};
  t.finding.summary = "Link leaf1~spine2 drops 5.0% of the probes crossing it.";
  t.finding.evidence = {{"loss_ratio", 0.05}, {"bad_flows", 12}};
  t.finding.confidence = 0.92;
  t.active = active;
  t.first_seen_ns = 1'700'000'000'000'000'000;
  t.last_seen_ns = last_seen_ns;
  return t;
}

TEST(FindingsStore, SurvivesReopen) {
  TempDir dir;
  {
    FindingsStore store(dir.path());
    ASSERT_TRUE(store.Open().ok());
    ASSERT_TRUE(store.Save({Sample("a@1", true, 10), Sample("b@2", false, 20)}).ok());
    // An update of the same id replaces the row.
    TrackedFinding resolved = Sample("a@1", false, 30);
    ASSERT_TRUE(store.Save({resolved}).ok());
  }
  FindingsStore store(dir.path());
  ASSERT_TRUE(store.Open().ok());
  auto loaded = store.LoadAll(100);
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  ASSERT_EQ(loaded->size(), 2u);
  EXPECT_EQ((*loaded)[0].id, "a@1");  // newest first
  EXPECT_FALSE((*loaded)[0].active);
  EXPECT_EQ((*loaded)[0].last_seen_ns, 30);
  EXPECT_EQ((*loaded)[0].finding.kind, "link_degraded");
  EXPECT_EQ((*loaded)[0].finding.severity, Severity::kCritical);
  EXPECT_EQ((*loaded)[0].finding.location.id, "leaf1~spine2");
  EXPECT_DOUBLE_EQ((*loaded)[0].finding.evidence.at("loss_ratio"), 0.05);
  EXPECT_DOUBLE_EQ((*loaded)[0].finding.confidence, 0.92);
  EXPECT_EQ(store.error_count(), 0u);
}

TEST(FindingsStore, HistoryLimitKeepsEveryActiveFinding) {
  TempDir dir;
  FindingsStore store(dir.path());
  ASSERT_TRUE(store.Open().ok());
  std::vector<TrackedFinding> batch;
  for (int i = 0; i < 20; ++i) batch.push_back(Sample("r" + std::to_string(i), false, i));
  batch.push_back(Sample("active", true, 0));
  ASSERT_TRUE(store.Save(batch).ok());
  auto loaded = store.LoadAll(5);
  ASSERT_TRUE(loaded.ok());
  EXPECT_EQ(loaded->size(), 6u);
}

TEST(FindingsStore, UnwritableDirectoryKeepsRunningInMemory) {
  TempDir dir;
  const std::string file = dir.path() + "/not_a_dir";
  std::ofstream(file) << "x";
  FindingsStore store(file + "/state");  // a directory below a regular file cannot exist
  const Status st = store.Open();
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("cannot create directory"), std::string::npos) << st.ToString();
  EXPECT_FALSE(store.is_open());
  EXPECT_FALSE(store.Save({Sample("a@1", true, 1)}).ok());
  EXPECT_GE(store.error_count(), 2u);

  // The analyzer built on it still detects and serves findings from memory.
  testing::FleetShape shape;
  testing::SyntheticFleet fleet(shape, AnalysisConfig{}, &store);
  fleet.Run(60);
  fleet.SetLinkFault("leaf1~spine2", testing::LinkFault{1.0});
  fleet.Run(15);
  const auto active = fleet.Active();
  ASSERT_EQ(active.size(), 1u);
  EXPECT_EQ(active[0].finding.kind, "link_down");
  EXPECT_GT(fleet.analyzer().stats().store_errors, 2u);
}

TEST(FindingsStore, FullDatabaseFailsWritesWithoutCrashing) {
  TempDir dir;
  FindingsStore::Options options;
  options.max_db_bytes = 64 * 1024;  // a few pages: the disk is "full" quickly
  FindingsStore store(dir.path(), options);
  ASSERT_TRUE(store.Open().ok());
  Status last;
  for (int i = 0; i < 400 && last.ok(); ++i) {
    TrackedFinding t = Sample("f" + std::to_string(i), false, i);
    t.finding.summary.assign(2000, 'x');
    last = store.Save({t});
  }
  EXPECT_FALSE(last.ok());
  EXPECT_NE(last.message().find("full"), std::string::npos) << last.ToString();
  EXPECT_GE(store.error_count(), 1u);
  // What was committed before is still readable.
  auto loaded = store.LoadAll(1000);
  ASSERT_TRUE(loaded.ok());
  EXPECT_GT(loaded->size(), 0u);
}

TEST(FindingsStore, AnalyzerRestartReloadsActiveAndHistory) {
  TempDir dir;
  testing::FleetShape shape;
  std::string active_id;
  {
    FindingsStore store(dir.path());
    ASSERT_TRUE(store.Open().ok());
    testing::SyntheticFleet fleet(shape, AnalysisConfig{}, &store);
    fleet.Run(60);
    fleet.SetLinkFault("leaf0~spine1", testing::LinkFault{1.0});
    fleet.Run(15);
    fleet.ClearFaults();
    fleet.Run(60);  // resolves: history
    fleet.SetLinkFault("leaf2~spine3", testing::LinkFault{1.0});
    fleet.Run(15);  // active at "shutdown"
    ASSERT_EQ(fleet.Active().size(), 1u);
    active_id = fleet.Active()[0].id;
  }
  FindingsStore store(dir.path());
  ASSERT_TRUE(store.Open().ok());
  testing::SyntheticFleet fleet(shape, AnalysisConfig{}, &store);
  auto all = fleet.analyzer().Findings(false);
  ASSERT_EQ(all.size(), 2u);
  EXPECT_TRUE(all[0].active);
  EXPECT_EQ(all[0].id, active_id);
  EXPECT_FALSE(all[1].active);
  EXPECT_EQ(all[1].finding.location.id, "leaf0~spine1");
  // The fault is gone after the restart: the reloaded finding resolves after the recovery period.
  fleet.Run(45);
  EXPECT_TRUE(fleet.Active().empty());
  all = fleet.analyzer().Findings(false);
  ASSERT_EQ(all.size(), 2u);
  EXPECT_FALSE(all[0].active);
}

// Another stage's findings (collective probes) are tracked like the analyzer's own: active while
// set, persisted, resolved once cleared.
TEST(FindingsStore, SourceFindingsAreTrackedStoredAndResolved) {
  TempDir dir;
  FindingsStore store(dir.path());
  ASSERT_TRUE(store.Open().ok());
  testing::SyntheticFleet fleet(testing::FleetShape{}, AnalysisConfig{}, &store);
  fleet.Run(5);
  Finding f;
  f.kind = "collective_slow";
  f.location = FindingLocation{"node", "l1h0", "l1h0", "", 0};
  f.summary = "collective group rail/0 is slow";
  fleet.analyzer().SetSourceFindings("collective", {f});
  fleet.Run(5);  // past the tracker's confirmation (confirm_ticks, 3)
  auto active = fleet.Active();
  ASSERT_EQ(active.size(), 1u);
  EXPECT_EQ(active[0].finding.kind, "collective_slow");
  EXPECT_EQ(active[0].finding.location.node, "l1h0");
  auto loaded = store.LoadAll(100);
  ASSERT_TRUE(loaded.ok());
  ASSERT_EQ(loaded->size(), 1u);
  EXPECT_EQ((*loaded)[0].finding.kind, "collective_slow");

  fleet.analyzer().SetSourceFindings("collective", {});
  fleet.Run(60);
  EXPECT_TRUE(fleet.Active().empty());
  auto all = fleet.analyzer().Findings(false);
  ASSERT_EQ(all.size(), 1u);
  EXPECT_FALSE(all[0].active);
}

// Every file in `dir` whose name starts with `prefix`.
std::vector<std::string> FilesStartingWith(const std::string& dir, const std::string& prefix) {
  std::vector<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (name.starts_with(prefix)) out.push_back(name);
  }
  std::sort(out.begin(), out.end());
  return out;
}

// Opens a store over a corrupt file and checks what a user sees: a fresh, working database, the
// old file kept beside it under a `.corrupt-<UTC>` name, and the quarantine reported.
void ExpectQuarantinedAndFresh(const TempDir& dir, const std::string& original) {
  FindingsStore store(dir.path());
  ASSERT_TRUE(store.Open().ok()) << store.last_error();
  ASSERT_TRUE(store.quarantined().has_value());
  const QuarantinedFile q = *store.quarantined();
  EXPECT_EQ(q.file, "findings.db");
  EXPECT_FALSE(q.error.empty());
  ASSERT_TRUE(q.to.starts_with(dir.path() + "/findings.db.corrupt-")) << q.to;
  std::ifstream moved(q.to, std::ios::binary);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(moved), {}), original);
  ASSERT_TRUE(store.Save({Sample("fresh@1", true, 5)}).ok());
  auto all = store.LoadAll(10);
  ASSERT_TRUE(all.ok());
  ASSERT_EQ(all->size(), 1u);
  EXPECT_EQ((*all)[0].id, "fresh@1");
  EXPECT_EQ(store.error_count(), 0u);
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

TEST(FindingsStore, GarbageFileIsMovedAsideAndAFreshOneCreated) {
  TempDir dir;
  const std::string garbage(10'000, '\x5a');
  std::ofstream(dir.path() + "/findings.db", std::ios::binary) << garbage;
  ExpectQuarantinedAndFresh(dir, garbage);
}

TEST(FindingsStore, DamagedPagesAreMovedAsideAndAFreshOneCreated) {
  TempDir dir;
  {
    FindingsStore store(dir.path());
    ASSERT_TRUE(store.Open().ok());
    std::vector<TrackedFinding> many;
    for (int i = 0; i < 2000; ++i) many.push_back(Sample("f@" + std::to_string(i), false, i));
    ASSERT_TRUE(store.Save(many).ok());
  }
  const std::string path = dir.path() + "/findings.db";
  std::filesystem::remove(path + "-wal");  // checkpointed on close; be sure nothing replays
  std::string bytes = ReadAll(path);
  ASSERT_GT(bytes.size(), 5 * 4096u);
  // A sector of zeros over the b-tree pages past the schema, as a torn write would leave.
  for (size_t i = 2 * 4096; i < 4 * 4096; ++i) bytes[i] = '\x00';
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
  ExpectQuarantinedAndFresh(dir, bytes);
}

TEST(FindingsStore, TruncatedFileIsMovedAsideAndAFreshOneCreated) {
  TempDir dir;
  const std::string path = dir.path() + "/findings.db";
  {
    FindingsStore store(dir.path());
    ASSERT_TRUE(store.Open().ok());
    ASSERT_TRUE(store.Save({Sample("a@1", true, 10)}).ok());
  }
  // The first 60 bytes: the magic string survives, the header does not.
  const std::string head = ReadAll(path).substr(0, 60);
  std::ofstream(path, std::ios::binary | std::ios::trunc) << head;
  ExpectQuarantinedAndFresh(dir, head);
}

TEST(FindingsStore, HealthyAndEmptyFilesAreKept) {
  TempDir dir;
  std::ofstream(dir.path() + "/findings.db", std::ios::binary);  // 0 bytes: a new database
  {
    FindingsStore store(dir.path());
    ASSERT_TRUE(store.Open().ok());
    EXPECT_FALSE(store.quarantined().has_value());
    ASSERT_TRUE(store.Save({Sample("a@1", true, 10)}).ok());
  }
  FindingsStore store(dir.path());
  ASSERT_TRUE(store.Open().ok());
  EXPECT_FALSE(store.quarantined().has_value());
  EXPECT_EQ(store.LoadAll(10)->size(), 1u);
  EXPECT_TRUE(FilesStartingWith(dir.path(), "findings.db.corrupt-").empty());
}

TEST(FindingsStore, TwoQuarantinesInOneSecondKeepBothFiles) {
  TempDir dir;
  for (const char* content : {"first garbage file, long enough", "second garbage file, also"}) {
    std::ofstream(dir.path() + "/findings.db", std::ios::binary | std::ios::trunc)
        << std::string(4096, content[0]) << content;
    FindingsStore store(dir.path());
    ASSERT_TRUE(store.Open().ok());
    ASSERT_TRUE(store.quarantined().has_value());
  }
  // Both kept (the second gets a -1 suffix if the clock second did not change).
  EXPECT_EQ(FilesStartingWith(dir.path(), "findings.db.corrupt-").size(), 2u);
}

}  // namespace
}  // namespace fw::analysis
