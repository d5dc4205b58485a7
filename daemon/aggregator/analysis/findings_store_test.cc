// The findings store: history survives a reopen and an analyzer restart; an unwritable directory
// or a full database keeps the analyzer running in memory with counted errors.
#include "daemon/aggregator/analysis/findings_store.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "daemon/aggregator/analysis/testing/synthetic_fleet.h"

namespace fw::analysis {
namespace {

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "fw_store_XXXXXX").string();
    if (!mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp failed");
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

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

}  // namespace
}  // namespace fw::analysis
