// HostDelays: per (node, device, role) series of rdma_ud host delays, judged against the fleet.
#include "daemon/aggregator/analysis/host_delay.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <functional>
#include <map>
#include <optional>
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

// The median, floor and fleet rules alone: no settling of new series, no persistence.
HostDelayLimits Immediate() {
  HostDelayLimits l;
  l.settle_s = 0;
  l.persist_s = 0;
  return l;
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
  const auto vs = d.Judge(11 * kSecond, Immediate());
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
  for (const HostDelayVerdict& v : d.Judge(kSecond, Immediate())) {
    EXPECT_FALSE(v.high) << v.node;
    EXPECT_EQ(v.role, HostRole::kProber) << "a 0 responder delay is not measured";
  }
  // Alone (fewer series than fleet_min_series), the floor judges.
  HostDelays alone;
  alone.Record(std::vector<ReportedProbe>(5, Rdma(0, 1, 2'000'000, 0)), kSecond);
  const auto vs = alone.Judge(kSecond, Immediate());
  ASSERT_EQ(vs.size(), 1u);
  EXPECT_TRUE(vs[0].high);
  EXPECT_EQ(vs[0].fleet_median_ns, 0);
}

TEST(HostDelays, OldSamplesAgeOutAndFewSamplesAreNotJudged) {
  HostDelays d;
  d.Record(std::vector<ReportedProbe>(4, Rdma(0, 1, 3'000'000, 0)), kSecond);
  EXPECT_TRUE(d.Judge(kSecond, Immediate()).empty()) << "4 samples, 5 needed";
  d.Record(std::vector<ReportedProbe>(1, Rdma(0, 1, 3'000'000, 0)), 2 * kSecond);
  EXPECT_EQ(d.Judge(2 * kSecond, Immediate()).size(), 1u);
  // 10 s later the first four are out of the window, and then the last.
  EXPECT_TRUE(d.Judge(11'500'000'000, Immediate()).empty());
  EXPECT_TRUE(d.Judge(13 * kSecond, Immediate()).empty());
}

TEST(HostDelays, OnlyAnsweredRdmaUdResultsWithIdsCount) {
  HostDelays d;
  std::vector<ReportedProbe> rs(5, Rdma(0, 1, 3'000'000, 3'000'000));
  rs[0].lost = true;
  rs[1].transport = Transport::kUdp;
  rs[2].src_id = aggregator::kNoNode;
  d.Record(rs, kSecond);
  d.Record(rs, kSecond);
  HostDelayLimits limits = Immediate();
  limits.min_samples = 4;
  const auto vs = d.Judge(kSecond, limits);
  ASSERT_EQ(vs.size(), 2u);  // prober 0 and responder 1: 2 of 5 results count, twice
  for (const HostDelayVerdict& v : vs) EXPECT_EQ(v.samples, 4u);
  EXPECT_NE(Find(vs, 0, HostRole::kProber), nullptr);
  EXPECT_NE(Find(vs, 1, HostRole::kResponder), nullptr);
}


// A fleet of three agents that start at once (their sessions begin at 0.5 s) and upload every
// second, each with two probes per peer (a rate like rdma_fleet_fake's); `delay(node, role, t)`
// gives each sample's delay, and nodes in `down` neither probe nor answer. Judge() runs every
// 0.5 s, like the test's ticks.
struct Fleet {
  static constexpr NodeId kNodes = 3;
  HostDelays d;
  Fleet() {
    for (NodeId n = 0; n < kNodes; ++n) d.NoteSessionStart(n, kSecond / 2);
  }
  std::function<int64_t(NodeId, HostRole, int64_t)> delay;
  std::function<bool(NodeId, int64_t)> down = [](NodeId, int64_t) { return false; };

  // The first tick at or after `from` at which (node, role) is high, within [from, to).
  std::optional<int64_t> FirstHigh(NodeId node, HostRole role, int64_t from, int64_t to,
                                   const HostDelayLimits& limits, int64_t* t) {
    std::optional<int64_t> first;
    for (; *t < to; *t += kSecond / 2) {
      if (*t % kSecond == 0) Upload(*t);
      for (const HostDelayVerdict& v : d.Judge(*t, limits)) {
        if (!first && *t >= from && v.high && v.node == node && v.role == role) first = *t;
      }
    }
    return first;
  }
  // Each agent's upload arrives 0.1 s after the last one's.
  void Upload(int64_t t) {
    for (NodeId src = 0; src < kNodes; ++src) {
      if (down(src, t)) continue;
      std::vector<ReportedProbe> batch;
      for (NodeId dst = 0; dst < kNodes; ++dst) {
        if (dst == src || down(dst, t)) continue;
        for (int k = 0; k < 2; ++k) {
          batch.push_back(
              Rdma(src, dst, delay(src, HostRole::kProber, t), delay(dst, HostRole::kResponder, t)));
        }
      }
      d.Record(batch, t + src * kSecond / 10);
    }
  }
};

constexpr int64_t kQuick = 200'000;  // 0.2 ms, a loaded but healthy host
constexpr int64_t kSlow = 5'000'000;

// rdma_fleet_fake's flake: right after three agents start at once, start-up contention makes one
// read as a slow responder (5 ms) over its first two uploads (8 samples), then it is quick. Those
// samples came in the settling of their ends' sessions: not judged, and nothing is named. The
// rules without settling and persistence (Immediate) named it.
TEST(HostDelays, AStartUpBurstOfAFreshAgentIsNotHigh) {
  auto burst = [](NodeId n, HostRole role, int64_t t) {
    return n == 1 && role == HostRole::kResponder && t <= 2 * kSecond ? kSlow : kQuick;
  };
  for (bool immediate : {false, true}) {
    Fleet f;
    f.delay = burst;
    int64_t t = kSecond;
    const HostDelayLimits limits = immediate ? Immediate() : HostDelayLimits{};
    bool any_high = false;
    for (; t < 15 * kSecond; t += kSecond / 2) {
      if (t % kSecond == 0) f.Upload(t);
      for (const HostDelayVerdict& v : f.d.Judge(t, limits)) any_high = any_high || v.high;
    }
    EXPECT_EQ(any_high, immediate) << (immediate ? "the control" : "settled");
  }
}

// Later in a series' life one upload that carries many high samples is not a slow host, even
// when they outnumber the quick ones in the window; the same delay sustained is, once its run of
// high evidence spans persist_s (2 s), and a quick upload in between starts the run again.
TEST(HostDelays, OneUploadsBurstIsNotHighAndASustainedDelayIsWithinPersistS) {
  for (bool immediate : {false, true}) {
    HostDelays d;
    const HostDelayLimits limits = immediate ? Immediate() : HostDelayLimits{};
    auto record = [&d](int n, int64_t delay, int64_t at) {
      d.Record(std::vector<ReportedProbe>(n, Rdma(0, 1, 0, delay)), at);
    };
    // One prober, one sample a second (no session noted: nothing settles).
    for (int s = 0; s < 10; ++s) record(1, kQuick, s * kSecond);
    record(12, kSlow, 10 * kSecond);
    auto judged = d.Judge(10 * kSecond, limits);
    ASSERT_EQ(judged.size(), 1u);
    EXPECT_TRUE(judged[0].over_level);
    EXPECT_EQ(judged[0].high, immediate) << "one upload";
    EXPECT_EQ(judged[0].high_span_s, 0);
    record(1, kQuick, 11 * kSecond);
    EXPECT_EQ(d.Judge(11 * kSecond, limits)[0].high, immediate) << "followed by a quick one";
    if (immediate) continue;
    for (int s = 12; s <= 14; ++s) {
      record(4, kSlow, s * kSecond);
      judged = d.Judge(s * kSecond, limits);
      EXPECT_EQ(judged[0].high, s == 14) << s << " s: the run began at 12 s";
    }
    EXPECT_DOUBLE_EQ(judged[0].high_span_s, 2.0);
    EXPECT_DOUBLE_EQ(judged[0].median_ns, kSlow);
    // A Judge that saw nothing new keeps the run; a quick upload ends it.
    EXPECT_TRUE(d.Judge(14 * kSecond + kSecond / 2, limits)[0].high);
    record(3, kQuick, 15 * kSecond);
    EXPECT_FALSE(d.Judge(15 * kSecond, limits)[0].high);
  }
}

// More samples per upload than a series keeps (kRing): the run spans uploads, not the ring.
TEST(HostDelays, ARunOutlastsTheRing) {
  HostDelays d;
  for (int s = 0; s <= 3; ++s) {
    d.Record(std::vector<ReportedProbe>(3 * HostDelays::kRing, Rdma(0, 1, 0, kSlow)), s * kSecond);
    const auto judged = d.Judge(s * kSecond, HostDelayLimits{});
    ASSERT_EQ(judged.size(), 1u);
    EXPECT_EQ(judged[0].samples, HostDelays::kRing);
    EXPECT_EQ(judged[0].high, s >= 2) << s;
  }
}

// rdma_fleet_fake's fault phase: node 2 restarts (down from 20 s, Hello at 21.5 s) and is slow
// from then on, both as prober and responder. Its samples settle until 24.5 s, and it is named as
// soon as its slow samples since then outnumber the quick ones from before in the window: within
// the settling time of when the rules without it name it, and within 8 s of the restart.
TEST(HostDelays, ASlowHostIsNamedWithinSecondsOfItsRestart) {
  std::map<bool, std::optional<int64_t>> first;
  for (bool immediate : {false, true}) {
    for (HostRole role : {HostRole::kProber, HostRole::kResponder}) {
      Fleet f;
      f.delay = [](NodeId n, HostRole, int64_t t) {
        return n == 2 && t >= 22 * kSecond ? kSlow : kQuick;
      };
      f.down = [](NodeId n, int64_t t) { return n == 2 && t >= 20 * kSecond && t < 22 * kSecond; };
      int64_t t = kSecond;
      EXPECT_FALSE(f.FirstHigh(2, role, 0, 20 * kSecond, Immediate(), &t)) << "healthy";
      f.d.NoteSessionStart(2, 21 * kSecond + kSecond / 2);
      const HostDelayLimits limits = immediate ? Immediate() : HostDelayLimits{};
      const auto at = f.FirstHigh(2, role, 22 * kSecond, 40 * kSecond, limits, &t);
      ASSERT_TRUE(at) << "immediate " << immediate << " role " << int(role);
      EXPECT_LE(*at, 30 * kSecond) << "immediate " << immediate << " role " << int(role);
      if (role == HostRole::kResponder) first[immediate] = at;
      if (!immediate) {
        // Both rules at this tick's figures: the persistence is already met.
        int64_t u = kSecond;
        Fleet g;
        g.delay = f.delay;
        g.down = f.down;
        const auto plain = g.FirstHigh(2, role, 22 * kSecond, 40 * kSecond, Immediate(), &u);
        ASSERT_TRUE(plain);
        std::printf("role %d: named %.1f s after the restart, %.1f s without settling\n",
                    int(role), double(*at - 20 * kSecond) * 1e-9,
                    double(*plain - 20 * kSecond) * 1e-9);
        EXPECT_LE(*at - *plain, 3 * kSecond) << "role " << int(role);
      }
    }
  }
  EXPECT_TRUE(first[false] && first[true]);
}

}  // namespace
}  // namespace fw::analysis
