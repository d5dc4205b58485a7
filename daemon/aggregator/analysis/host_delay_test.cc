// HostDelays: per (node, device, role) series of rdma_ud host delays, judged against the fleet.
#include "daemon/aggregator/analysis/host_delay.h"

#include <gtest/gtest.h>

#include <vector>

namespace fw::analysis {
namespace {

using aggregator::NodeId;
using aggregator::ReportedProbe;
using aggregator::Transport;

constexpr int64_t kSecond = 1'000'000'000;

ReportedProbe Rdma(NodeId src, NodeId dst, int64_t prober_ns, int64_t responder_ns,
                   const std::string& src_nic = "mlx5_0", const std::string& dst_nic = "mlx5_0") {
  ReportedProbe r;
  r.src_id = src;
  r.dst_id = dst;
  r.transport = Transport::kRdmaUd;
  r.rtt_ns = 4'000;
  r.prober_host_ns = prober_ns;
  r.responder_host_ns = responder_ns;
  r.src_nic = src_nic;
  r.dst_nic = dst_nic;
  return r;
}

const HostDelayVerdict* Find(const std::vector<HostDelayVerdict>& vs, NodeId node, HostRole role,
                             const std::string& device = "mlx5_0") {
  for (const HostDelayVerdict& v : vs) {
    if (v.node == node && v.role == role && v.device == device) return &v;
  }
  return nullptr;
}

TEST(HostDelays, EachRoleIsJudgedAgainstItsOwnFleet) {
  HostDelays d;
  // Nodes 0..3 probe each other; node 2 polls slowly (5 ms) but answers quickly.
  std::vector<ReportedProbe> rs;
  for (int k = 0; k < 6; ++k) {
    for (NodeId s = 0; s < 4; ++s) {
      for (NodeId t = 0; t < 4; ++t) {
        if (s != t) rs.push_back(Rdma(s, t, s == 2 ? 5'000'000 : 10'000 + k, 8'000 + k));
      }
    }
  }
  d.Record(rs, 10 * kSecond);
  const auto vs = d.Judge(11 * kSecond, HostDelayLimits{});
  ASSERT_EQ(vs.size(), 8u);  // 4 nodes x 2 roles, one device each
  const HostDelayVerdict* slow = Find(vs, 2, HostRole::kProber);
  ASSERT_NE(slow, nullptr);
  EXPECT_TRUE(slow->high);
  EXPECT_EQ(slow->samples, 18u);
  EXPECT_DOUBLE_EQ(slow->median_ns, 5'000'000);
  EXPECT_GT(slow->fleet_median_ns, 10'000);
  EXPECT_LT(slow->fleet_median_ns, 10'010);
  EXPECT_FALSE(Find(vs, 2, HostRole::kResponder)->high);
  EXPECT_FALSE(Find(vs, 0, HostRole::kProber)->high);
}

TEST(HostDelays, UnderTheFloorOrTheFleetRatioIsNotHigh) {
  HostDelays d;
  std::vector<ReportedProbe> rs;
  // Every prober at 2 ms: over the floor but the fleet's own level.
  for (int k = 0; k < 5; ++k) {
    for (NodeId s = 0; s < 3; ++s) rs.push_back(Rdma(s, (s + 1) % 3, 2'000'000, 0));
  }
  d.Record(rs, kSecond);
  for (const HostDelayVerdict& v : d.Judge(kSecond, HostDelayLimits{})) {
    EXPECT_FALSE(v.high) << v.node;
    EXPECT_EQ(v.role, HostRole::kProber) << "a 0 responder delay is not measured";
  }
  // Alone (fewer series than fleet_min_series), the floor judges.
  HostDelays alone;
  alone.Record(std::vector<ReportedProbe>(5, Rdma(0, 1, 2'000'000, 0)), kSecond);
  const auto vs = alone.Judge(kSecond, HostDelayLimits{});
  ASSERT_EQ(vs.size(), 1u);
  EXPECT_TRUE(vs[0].high);
  EXPECT_EQ(vs[0].fleet_median_ns, 0);
}

TEST(HostDelays, OldSamplesAgeOutAndFewSamplesAreNotJudged) {
  HostDelays d;
  d.Record(std::vector<ReportedProbe>(4, Rdma(0, 1, 3'000'000, 0)), kSecond);
  EXPECT_TRUE(d.Judge(kSecond, HostDelayLimits{}).empty()) << "4 samples, 5 needed";
  d.Record(std::vector<ReportedProbe>(1, Rdma(0, 1, 3'000'000, 0)), 2 * kSecond);
  EXPECT_EQ(d.Judge(2 * kSecond, HostDelayLimits{}).size(), 1u);
  // 10 s later the first four are out of the window, and then the last.
  EXPECT_TRUE(d.Judge(11'500'000'000, HostDelayLimits{}).empty());
  EXPECT_TRUE(d.Judge(13 * kSecond, HostDelayLimits{}).empty());
}

TEST(HostDelays, OnlyAnsweredRdmaUdResultsWithIdsCount) {
  HostDelays d;
  std::vector<ReportedProbe> rs(5, Rdma(0, 1, 3'000'000, 3'000'000));
  rs[0].lost = true;
  rs[1].transport = Transport::kUdp;
  rs[2].src_id = aggregator::kNoNode;
  d.Record(rs, kSecond);
  d.Record(rs, kSecond);
  HostDelayLimits limits;
  limits.min_samples = 4;
  const auto vs = d.Judge(kSecond, limits);
  ASSERT_EQ(vs.size(), 2u);  // prober 0 and responder 1: 2 of 5 results count, twice
  for (const HostDelayVerdict& v : vs) EXPECT_EQ(v.samples, 4u);
  EXPECT_NE(Find(vs, 0, HostRole::kProber), nullptr);
  EXPECT_NE(Find(vs, 1, HostRole::kResponder), nullptr);
}

}  // namespace
}  // namespace fw::analysis
