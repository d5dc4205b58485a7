// Tests for the backend-independent collective probe: bandwidth definitions, the iteration loop
// and the group summary that finds a late rank.
#include "probes/collective/collective.h"

#include <gtest/gtest.h>

namespace fw::collective {
namespace {

TEST(BusBandwidth, FactorsFollowNcclTests) {
  EXPECT_DOUBLE_EQ(BusBandwidthFactor(OpKind::kAllReduce, 8), 2.0 * 7 / 8);
  EXPECT_DOUBLE_EQ(BusBandwidthFactor(OpKind::kAllReduce, 2), 1.0);
  EXPECT_DOUBLE_EQ(BusBandwidthFactor(OpKind::kAllGather, 4), 0.75);
  EXPECT_DOUBLE_EQ(BusBandwidthFactor(OpKind::kReduceScatter, 4), 0.75);
  EXPECT_DOUBLE_EQ(BusBandwidthFactor(OpKind::kAllReduce, 1), 0);
}

TEST(Validate, RejectsBadGroupsAndOps) {
  EXPECT_TRUE(ValidateGroup({"g", 4, 3}).ok());
  EXPECT_FALSE(ValidateGroup({"", 4, 0}).ok());
  EXPECT_FALSE(ValidateGroup({"g", 4, 4}).ok());
  EXPECT_FALSE(ValidateGroup({"g", 0, 0}).ok());
  OpSpec op;
  EXPECT_TRUE(ValidateOp(op, 4).ok());
  op.bytes = 8;  // less than one float per rank
  EXPECT_FALSE(ValidateOp(op, 4).ok());
  op.bytes = kDefaultMaxProbeBytes + 1;
  EXPECT_FALSE(ValidateOp(op, 4, kDefaultMaxProbeBytes).ok());
  op = OpSpec{};
  op.iterations = 0;
  EXPECT_FALSE(ValidateOp(op, 4).ok());
}

TEST(Median, OddEvenEmpty) {
  EXPECT_DOUBLE_EQ(Median({3, 1, 2}), 2);
  EXPECT_DOUBLE_EQ(Median({4, 1, 3, 2}), 2.5);
  EXPECT_DOUBLE_EQ(Median({}), 0);
}

// A one-rank communicator whose op takes a scripted time; it records what the loop asked of it.
class ScriptedComm final : public Communicator {
 public:
  explicit ScriptedComm(std::vector<double> seconds) : seconds_(std::move(seconds)) {}
  std::string_view backend() const override { return "scripted"; }
  const GroupSpec& group() const override { return group_; }
  std::vector<int> local_ranks() const override { return {0, 1}; }
  Status Prepare(const OpSpec&) override {
    ++prepared;
    return Status::Ok();
  }
  Status RunOnce(std::span<IterationSample> samples) override {
    if (calls >= seconds_.size()) return Status::Unavailable("peer gone");
    const double s = seconds_[calls++];
    for (IterationSample& x : samples) x = {0, static_cast<int64_t>(s * 1e9), s};
    return Status::Ok();
  }
  Status Verify() override {
    ++verified;
    return Status::Ok();
  }
  GroupSpec group_{"g", 2, 0};
  std::vector<double> seconds_;
  size_t calls = 0;
  int prepared = 0;
  int verified = 0;
};

TEST(RunOperation, LeavesOutWarmupAndComputesBandwidth) {
  ScriptedComm comm({9, 9, 0.001, 0.002, 0.004});  // two slow warm-ups
  OpSpec op;
  op.bytes = 1 << 20;
  op.warmup = 2;
  op.iterations = 3;
  int before_calls = 0;
  auto results = RunOperation(comm, op, [&](int) { ++before_calls; });
  ASSERT_TRUE(results.ok()) << results.status().ToString();
  ASSERT_EQ(results->size(), 2u);
  EXPECT_EQ(before_calls, 5);
  EXPECT_EQ(comm.verified, 1);
  const RankResult& r = (*results)[1];
  EXPECT_EQ(r.rank, 1);
  EXPECT_EQ(r.iterations.size(), 3u);
  EXPECT_DOUBLE_EQ(r.median_seconds, 0.002);
  EXPECT_DOUBLE_EQ(r.min_seconds, 0.001);
  EXPECT_DOUBLE_EQ(r.algbw_bytes_per_s, (1 << 20) / 0.002);
  EXPECT_DOUBLE_EQ(r.busbw_bytes_per_s, r.algbw_bytes_per_s * 1.0);  // 2(n-1)/n at n=2
}

TEST(RunOperation, StopsAtAFailingIteration) {
  ScriptedComm comm({0.001});
  OpSpec op;
  op.warmup = 0;
  op.iterations = 3;
  auto results = RunOperation(comm, op);
  ASSERT_FALSE(results.ok());
  EXPECT_EQ(results.status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(comm.verified, 0);
}

RankResult Result(int rank, int ranks, std::vector<double> seconds) {
  RankResult r;
  r.backend = "gloo";
  r.group_id = "g";
  r.rank = rank;
  r.ranks = ranks;
  r.bytes = 1 << 20;
  for (double s : seconds) r.iterations.push_back({0, 0, s});
  return r;
}

TEST(SummarizeGroup, ExitAlignmentFindsTheLateRank) {
  // Rank 2 arrives 5 ms after the others in every iteration; they wait for it.
  std::vector<RankResult> rs = {Result(0, 3, {0.006, 0.0061}), Result(1, 3, {0.006, 0.006}),
                                Result(2, 3, {0.001, 0.001})};
  auto sum = SummarizeGroup(rs);
  ASSERT_TRUE(sum.ok()) << sum.status().ToString();
  EXPECT_EQ(sum->latest_rank, 2);
  EXPECT_NEAR(sum->lateness_seconds[2], 0.00505, 1e-9);
  EXPECT_NEAR(sum->lateness_seconds[0], 0.0, 1e-9);
  EXPECT_NEAR(sum->median_group_seconds, 0.00605, 1e-9);
  EXPECT_NEAR(sum->median_comm_seconds, 0.001, 1e-9);
  EXPECT_NEAR(sum->busbw_bytes_per_s, (1 << 20) / 0.00605 * 4.0 / 3.0, 1e-3);
}

TEST(SummarizeGroup, RejectsMixedRuns) {
  std::vector<RankResult> rs = {Result(0, 2, {0.1}), Result(0, 2, {0.1})};
  EXPECT_FALSE(SummarizeGroup(rs).ok());  // rank 0 twice
  rs = {Result(0, 2, {0.1}), Result(1, 2, {0.1, 0.2})};
  EXPECT_FALSE(SummarizeGroup(rs).ok());  // different iteration counts
  rs = {Result(0, 3, {0.1}), Result(1, 3, {0.1})};
  EXPECT_FALSE(SummarizeGroup(rs).ok());  // a rank missing
}

}  // namespace
}  // namespace fw::collective
