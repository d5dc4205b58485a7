// GuardPlan: unusable entries are skipped by cause, the rest kept in order; ceilings trim.
#include "daemon/agent/plan_guard.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "probes/net/udp_prober.h"

namespace fw::agent {
namespace {

namespace v1 = fabricwatch::v1;
using net::PlanSkip;

v1::PlannedPeer* AddPeer(v1::ProbePlan& plan, std::string node, std::string address,
                         uint32_t port = 9753, int flows = 1, double rate = 1) {
  v1::PlannedPeer* p = plan.add_peers();
  p->set_node(std::move(node));
  p->set_address(std::move(address));
  p->set_port(port);
  p->set_transport(v1::TRANSPORT_UDP);
  for (int j = 0; j < flows; ++j) p->add_src_ports(j);
  p->set_rate_pps(rate);
  return p;
}

uint32_t Skipped(const GuardedPlan& g, PlanSkip s) { return g.skipped[static_cast<size_t>(s)]; }
bool Trimmed(const GuardedPlan& g, PlanTrim t) { return g.trimmed[static_cast<size_t>(t)]; }

TEST(GuardPlan, EachUnusableEntryIsSkippedForItsCauseAndTheRestKeptInOrder) {
  v1::ProbePlan plan;
  AddPeer(plan, "a", "198.18.0.1");
  AddPeer(plan, std::string(64, 'x'), "198.18.0.2");        // name too long for a result
  AddPeer(plan, "b", "leaf1-node02");                       // not numeric
  AddPeer(plan, "c", "198.18.0.3", 0);                      // port 0
  AddPeer(plan, "d", "198.18.0.4", 70000);                  // past 65535
  AddPeer(plan, "e", "198.18.0.5", 9753, 65);               // more flows than the prober has
  AddPeer(plan, "f", "198.18.0.6", 9753, 1, std::nan(""));  // rate
  AddPeer(plan, "g", "198.18.0.7")->set_transport(static_cast<v1::Transport>(99));
  AddPeer(plan, "a", "198.18.0.1");  // the first entry again
  AddPeer(plan, "h", "fd00::8");
  AddPeer(plan, "i", "198.18.0.9")->set_transport(v1::TRANSPORT_TCP_CONNECT);
  const GuardedPlan g = GuardPlan(plan, PlanCeilings{});
  ASSERT_EQ(g.peers.size(), 3u);
  EXPECT_EQ(g.peers[0]->node(), "a");
  EXPECT_EQ(g.peers[1]->node(), "h");
  EXPECT_EQ(g.peers[2]->node(), "i");
  EXPECT_EQ(Skipped(g, PlanSkip::kName), 1u);
  EXPECT_EQ(Skipped(g, PlanSkip::kAddress), 1u);
  EXPECT_EQ(Skipped(g, PlanSkip::kPort), 2u);
  EXPECT_EQ(Skipped(g, PlanSkip::kFlows), 1u);
  EXPECT_EQ(Skipped(g, PlanSkip::kRate), 1u);
  EXPECT_EQ(Skipped(g, PlanSkip::kTransport), 1u);
  EXPECT_EQ(Skipped(g, PlanSkip::kDuplicate), 1u);
  EXPECT_NE(g.example[static_cast<size_t>(PlanSkip::kAddress)].find("leaf1-node02"),
            std::string::npos);
  EXPECT_EQ(g.udp_flows, 2u);  // the TCP connect peer has no UDP flows
  for (bool t : g.trimmed) EXPECT_FALSE(t);
}

// Each UDP entry's timeout is its own, else the plan's, else 0 (the prober's 1 s); one past 60 s
// is skipped for `timeout`. A TCP entry ignores both.
TEST(GuardPlan, EachUdpEntryGetsItsOwnTimeoutElseThePlans) {
  v1::ProbePlan plan;
  plan.set_probe_timeout_ms(2000);
  AddPeer(plan, "plans", "198.18.0.1");
  AddPeer(plan, "own", "198.18.0.2")->set_timeout_ms(250);
  AddPeer(plan, "too-long", "198.18.0.3")->set_timeout_ms(60001);
  AddPeer(plan, "longest", "198.18.0.4")->set_timeout_ms(60000);
  v1::PlannedPeer* tcp = AddPeer(plan, "tcp", "198.18.0.5");
  tcp->set_transport(v1::TRANSPORT_TCP_CONNECT);
  tcp->set_timeout_ms(70000);
  GuardedPlan g = GuardPlan(plan, PlanCeilings{});
  ASSERT_EQ(g.peers.size(), 4u);
  EXPECT_EQ(Skipped(g, PlanSkip::kTimeout), 1u);
  EXPECT_EQ(g.udp_timeouts_ns,
            (std::vector<int64_t>{2'000'000'000, 250'000'000, 60'000'000'000, 0}));
  plan.set_probe_timeout_ms(0);  // an aggregator before the field: the prober's default
  g = GuardPlan(plan, PlanCeilings{});
  ASSERT_EQ(g.udp_timeouts_ns.size(), 4u);
  EXPECT_EQ(g.udp_timeouts_ns[0], 0);
  EXPECT_EQ(g.udp_timeouts_ns[1], 250'000'000);
}

// The plan's timeout floor goes to every UDP prober, in ns, at most the prober's 60 s limit; an
// aggregator before the field sends 0 (fixed timeouts).
TEST(GuardPlan, ThePlansTimeoutFloorIsPassedOnInNanoseconds) {
  v1::ProbePlan plan;
  AddPeer(plan, "a", "198.18.0.1");
  EXPECT_EQ(GuardPlan(plan, PlanCeilings{}).udp_timeout_floor_ns, 0);
  plan.set_probe_timeout_floor_ms(200);
  EXPECT_EQ(GuardPlan(plan, PlanCeilings{}).udp_timeout_floor_ns, 200'000'000);
  plan.set_probe_timeout_floor_ms(4'000'000'000u);
  EXPECT_EQ(GuardPlan(plan, PlanCeilings{}).udp_timeout_floor_ns, net::kUdpMaxTimeoutNs);
}

TEST(GuardPlan, TheSameDestinationFromTwoSourceNicsIsNotADuplicate) {
  v1::ProbePlan plan;
  AddPeer(plan, "b", "198.18.0.2")->set_src_nic("mlx5_0");
  AddPeer(plan, "b", "198.18.0.2")->set_src_nic("mlx5_1");
  const GuardedPlan g = GuardPlan(plan, PlanCeilings{});
  EXPECT_EQ(g.peers.size(), 2u);
  EXPECT_EQ(Skipped(g, PlanSkip::kDuplicate), 0u);
}

TEST(GuardPlan, TargetsPastTheCeilingAreCutInPlanOrder) {
  v1::ProbePlan plan;
  for (int i = 0; i < 10; ++i)
    AddPeer(plan, "n" + std::to_string(i), "198.18.0." + std::to_string(i + 1));
  PlanCeilings c;
  c.max_targets = 4;
  const GuardedPlan g = GuardPlan(plan, c);
  ASSERT_EQ(g.peers.size(), 4u);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(g.peers[i]->node(), "n" + std::to_string(i));
  EXPECT_TRUE(Trimmed(g, PlanTrim::kTargets));
  EXPECT_FALSE(Trimmed(g, PlanTrim::kPps));
  EXPECT_NE(g.trim_detail.find("targets 10->4"), std::string::npos) << g.trim_detail;
}

TEST(GuardPlan, PacketRateAndBudgetAreHeldToTheCeiling) {
  v1::ProbePlan plan;
  AddPeer(plan, "a", "198.18.0.1", 9753, 8, 500);  // 8 flows x 500/s = 4,000 probes/s
  AddPeer(plan, "b", "198.18.0.2", 9753, 2, 100);  // + 200
  plan.mutable_budget()->set_packets_per_s(1e9);
  plan.mutable_budget()->set_bytes_per_s(12.5e6);
  PlanCeilings c;
  c.max_pps = 1000;
  const GuardedPlan g = GuardPlan(plan, c);
  EXPECT_TRUE(Trimmed(g, PlanTrim::kPps));
  EXPECT_FALSE(Trimmed(g, PlanTrim::kBytesPerS));
  // Both entries scaled by 1000 / 4200: each keeps its rate relative to the other.
  EXPECT_NEAR(g.udp_pps, 1000, 1e-9);
  ASSERT_EQ(g.udp_rates_hz.size(), 2u);
  EXPECT_NEAR(g.udp_rates_hz[0], 500 * 1000 / 4200.0, 1e-9);
  EXPECT_NEAR(g.udp_rates_hz[1], 100 * 1000 / 4200.0, 1e-9);
  EXPECT_DOUBLE_EQ(g.udp_max_rate_hz, g.udp_rates_hz[0]);
  EXPECT_NE(g.trim_detail.find("udp_pps 4200"), std::string::npos) << g.trim_detail;
  EXPECT_DOUBLE_EQ(g.budget_pps, 1000);
  EXPECT_DOUBLE_EQ(g.budget_bytes_per_s, 12.5e6);
}

// Each entry keeps its own rate (an unset one gets the base rate, a TCP entry none), and the
// packet ceiling is held against the sum of each entry's flows x its rate.
TEST(GuardPlan, EachUdpEntryKeepsItsOwnRate) {
  v1::ProbePlan plan;
  AddPeer(plan, "hot", "198.18.0.1", 9753, 2, 10);
  AddPeer(plan, "base", "198.18.0.2", 9753, 4, 1);
  AddPeer(plan, "unset", "198.18.0.3", 9753, 1, 0);
  AddPeer(plan, "tcp", "198.18.0.4", 9753, 1, 0)->set_transport(v1::TRANSPORT_TCP_CONNECT);
  AddPeer(plan, "too-slow", "198.18.0.5", 9753, 1, 1e-300);  // its period would overflow
  const GuardedPlan g = GuardPlan(plan, PlanCeilings{});
  EXPECT_EQ(Skipped(g, PlanSkip::kRate), 1u);
  ASSERT_EQ(g.peers.size(), 4u);
  EXPECT_EQ(g.udp_rates_hz, (std::vector<double>{10, 1, kDefaultUdpRateHz, 0}));
  EXPECT_EQ(g.udp_flows, 7u);
  EXPECT_DOUBLE_EQ(g.udp_pps, 2 * 10 + 4 * 1 + 1 * 1);
  EXPECT_DOUBLE_EQ(g.udp_max_rate_hz, 10);
  for (bool t : g.trimmed) EXPECT_FALSE(t) << g.trim_detail;
}

// A one-pair escalation (one entry at 10 Hz beside four at 1 Hz) asks 14 probes/s, not the
// 5 x 10 that pricing every flow at the highest rate made of it, so a 14/s ceiling keeps it.
TEST(GuardPlan, AOnePairEscalationIsPricedPerEntry) {
  v1::ProbePlan plan;
  AddPeer(plan, "hot", "198.18.0.1", 9753, 1, 10);
  for (int i = 0; i < 4; ++i) {
    AddPeer(plan, "n" + std::to_string(i), "198.18.0." + std::to_string(i + 2), 9753, 1, 1);
  }
  PlanCeilings c;
  c.max_pps = 14;
  GuardedPlan g = GuardPlan(plan, c);
  EXPECT_FALSE(Trimmed(g, PlanTrim::kPps)) << g.trim_detail;
  EXPECT_TRUE(g.trim_detail.empty()) << g.trim_detail;

  // Below it, every entry is scaled alike: the escalated one keeps its 10x.
  c.max_pps = 7;
  g = GuardPlan(plan, c);
  EXPECT_TRUE(Trimmed(g, PlanTrim::kPps));
  EXPECT_NEAR(g.udp_pps, 7, 1e-9);
  EXPECT_NEAR(g.udp_rates_hz[0], 5, 1e-9);
  for (size_t k = 1; k < 5; ++k) EXPECT_NEAR(g.udp_rates_hz[k], 0.5, 1e-9);
}

// An entry past the prober's per-flow ceiling is held to it on its own; the others keep theirs.
TEST(GuardPlan, AnEntryPastThePerFlowCeilingIsHeldToIt) {
  v1::ProbePlan plan;
  AddPeer(plan, "a", "198.18.0.1", 9753, 1, 2 * net::kUdpMaxRateHz);
  AddPeer(plan, "b", "198.18.0.2", 9753, 1, 1);
  PlanCeilings c;
  c.max_pps = 1e9;
  const GuardedPlan g = GuardPlan(plan, c);
  EXPECT_TRUE(Trimmed(g, PlanTrim::kPps));
  EXPECT_EQ(g.udp_rates_hz, (std::vector<double>{net::kUdpMaxRateHz, 1}));
  EXPECT_DOUBLE_EQ(g.udp_pps, net::kUdpMaxRateHz + 1);
}

v1::PlannedPeer* Raise(v1::PlannedPeer* p, std::vector<uint32_t> ids, double unraised) {
  for (uint32_t id : ids) p->add_raised_flows(id);
  p->set_unraised_rate_pps(unraised);
  return p;
}

// An entry with raised_flows runs those flows at rate_pps and its others at unraised_rate_pps
// (0: the default rate), and is priced so: an escalation of 2 of 8 flows at 10/s costs 2 x 10 +
// 6 x 1, not 8 x 10. Without raised_flows, unraised_rate_pps means nothing.
TEST(GuardPlan, RaisedFlowsRunAtTheRateAndTheOthersAtTheUnraisedRate) {
  v1::ProbePlan plan;
  Raise(AddPeer(plan, "hot", "198.18.0.1", 9753, 8, 10), {1, 5}, 1);
  Raise(AddPeer(plan, "default", "198.18.0.2", 9753, 4, 20), {0}, 0);
  AddPeer(plan, "plain", "198.18.0.3", 9753, 4, 1)->set_unraised_rate_pps(7);
  const GuardedPlan g = GuardPlan(plan, PlanCeilings{});
  ASSERT_EQ(g.peers.size(), 3u);
  EXPECT_EQ(g.udp_rates_hz, (std::vector<double>{10, 20, 1}));
  EXPECT_EQ(g.udp_unraised_rates_hz, (std::vector<double>{1, kDefaultUdpRateHz, 0}));
  EXPECT_EQ(g.udp_raised_flows, (std::vector<uint64_t>{0b100010, 0b1, 0}));
  EXPECT_EQ(g.udp_flows, 16u);
  EXPECT_EQ(g.udp_raised_flows_total, 3u);
  EXPECT_EQ(g.udp_unraised_flows_total, 9u);
  EXPECT_EQ(g.raised_ids_ignored, 0u);
  EXPECT_DOUBLE_EQ(g.udp_pps, (2 * 10 + 6 * 1) + (1 * 20 + 3 * 1) + 4 * 1);
  EXPECT_DOUBLE_EQ(g.udp_max_rate_hz, 20);
  for (bool t : g.trimmed) EXPECT_FALSE(t) << g.trim_detail;
}

// Ids past the entry's flows and ids listed twice are ignored (and counted); ids that name every
// flow make a plain entry at rate_pps, ids none of which is in range one at the unraised rate.
TEST(GuardPlan, RaisedFlowIdsOutOfRangeOrRepeatedAreIgnored) {
  v1::ProbePlan plan;
  Raise(AddPeer(plan, "mixed", "198.18.0.1", 9753, 4, 10), {3, 4, 3, 64, 1000000, 0}, 2);
  Raise(AddPeer(plan, "all", "198.18.0.2", 9753, 2, 10), {1, 0, 1}, 2);
  Raise(AddPeer(plan, "none", "198.18.0.3", 9753, 2, 10), {2, 7}, 3);
  Raise(AddPeer(plan, "one-flow", "198.18.0.4", 9753, 0, 10), {0}, 2);  // no src_ports: 1 flow
  Raise(AddPeer(plan, "tcp", "198.18.0.5", 9753, 1, 0), {0}, 2)
      ->set_transport(v1::TRANSPORT_TCP_CONNECT);
  Raise(AddPeer(plan, "sixty-four", "198.18.0.6", 9753, 64, 10), {63}, 2);
  const GuardedPlan g = GuardPlan(plan, PlanCeilings{});
  ASSERT_EQ(g.peers.size(), 6u);
  EXPECT_EQ(g.udp_raised_flows, (std::vector<uint64_t>{0b1001, 0, 0, 0, 0, uint64_t{1} << 63}));
  EXPECT_EQ(g.udp_rates_hz, (std::vector<double>{10, 10, 3, 10, 0, 10}));
  EXPECT_EQ(g.udp_unraised_rates_hz, (std::vector<double>{2, 0, 0, 0, 0, 2}));
  // mixed: 4, 3 (again), 64, 1000000; all: 1 (again); none: 2, 7.
  EXPECT_EQ(g.raised_ids_ignored, 7u);
  EXPECT_DOUBLE_EQ(g.udp_pps, (2 * 10 + 2 * 2) + 2 * 10 + 2 * 3 + 10 + (10 + 63 * 2));
  EXPECT_DOUBLE_EQ(g.udp_max_rate_hz, 10);
}

// An unraised rate the prober cannot run (NaN, infinite, negative, below its minimum) skips the
// entry for `rate`, as a bad rate_pps does; without raised_flows it is not read.
TEST(GuardPlan, AnUnusableUnraisedRateSkipsTheEntry) {
  v1::ProbePlan plan;
  Raise(AddPeer(plan, "nan", "198.18.0.1", 9753, 4, 10), {1}, std::nan(""));
  Raise(AddPeer(plan, "inf", "198.18.0.2", 9753, 4, 10), {1}, INFINITY);
  Raise(AddPeer(plan, "negative", "198.18.0.3", 9753, 4, 10), {1}, -1);
  Raise(AddPeer(plan, "too-slow", "198.18.0.4", 9753, 4, 10), {1}, 1e-300);
  Raise(AddPeer(plan, "good", "198.18.0.5", 9753, 4, 10), {1}, 1);
  AddPeer(plan, "unread", "198.18.0.6", 9753, 4, 10)->set_unraised_rate_pps(-1);
  const GuardedPlan g = GuardPlan(plan, PlanCeilings{});
  EXPECT_EQ(Skipped(g, PlanSkip::kRate), 4u);
  EXPECT_NE(g.example[static_cast<size_t>(PlanSkip::kRate)].find("'nan'"), std::string::npos)
      << g.example[static_cast<size_t>(PlanSkip::kRate)];
  ASSERT_EQ(g.peers.size(), 2u);
  EXPECT_EQ(g.peers[0]->node(), "good");
  EXPECT_EQ(g.peers[1]->node(), "unread");
  EXPECT_EQ(g.udp_unraised_rates_hz, (std::vector<double>{1, 0}));
}

// The ceilings hold raised and unraised rates alike: each is held to the prober's per-flow
// ceiling on its own, and past max_pps both are scaled by the one factor (the raised flows keep
// their multiple of the others'), priced per flow.
TEST(GuardPlan, CeilingsScaleRaisedAndUnraisedRatesAlike) {
  v1::ProbePlan plan;
  Raise(AddPeer(plan, "hot", "198.18.0.1", 9753, 8, 100), {0, 1}, 10);  // 200 + 60
  AddPeer(plan, "base", "198.18.0.2", 9753, 4, 10);                     // + 40 = 300
  PlanCeilings c;
  c.max_pps = 150;
  GuardedPlan g = GuardPlan(plan, c);
  EXPECT_TRUE(Trimmed(g, PlanTrim::kPps));
  EXPECT_NEAR(g.udp_pps, 150, 1e-9);
  EXPECT_NEAR(g.udp_rates_hz[0], 50, 1e-9);
  EXPECT_NEAR(g.udp_unraised_rates_hz[0], 5, 1e-9);
  EXPECT_NEAR(g.udp_rates_hz[1], 5, 1e-9);
  EXPECT_EQ(g.udp_unraised_rates_hz[1], 0);  // a plain entry stays plain
  EXPECT_DOUBLE_EQ(g.udp_max_rate_hz, g.udp_rates_hz[0]);
  EXPECT_NE(g.trim_detail.find("udp_pps 300"), std::string::npos) << g.trim_detail;
  // Priced per flow, 300/s fits a 300/s ceiling that 8 x 100 + 4 x 10 would not.
  c.max_pps = 300;
  g = GuardPlan(plan, c);
  EXPECT_FALSE(Trimmed(g, PlanTrim::kPps)) << g.trim_detail;

  // Per-flow ceiling: an unraised rate past it is held to it (and counted once per entry), and
  // the highest flow rate is the unraised one when it is the higher.
  v1::ProbePlan fast;
  Raise(AddPeer(fast, "odd", "198.18.0.1", 9753, 4, 2 * net::kUdpMaxRateHz), {0},
        3 * net::kUdpMaxRateHz);
  Raise(AddPeer(fast, "inverted", "198.18.0.2", 9753, 2, 1), {0}, 50);
  c.max_pps = 1e9;
  g = GuardPlan(fast, c);
  EXPECT_TRUE(Trimmed(g, PlanTrim::kPps));
  EXPECT_EQ(g.udp_rates_hz, (std::vector<double>{net::kUdpMaxRateHz, 1}));
  EXPECT_EQ(g.udp_unraised_rates_hz, (std::vector<double>{net::kUdpMaxRateHz, 50}));
  EXPECT_NE(g.trim_detail.find("udp_entries_over_max_rate 1->"), std::string::npos)
      << g.trim_detail;
  EXPECT_DOUBLE_EQ(g.udp_pps, 4 * net::kUdpMaxRateHz + 1 + 50);
  EXPECT_DOUBLE_EQ(g.udp_max_rate_hz, net::kUdpMaxRateHz);
  fast.mutable_peers(0)->set_transport(v1::TRANSPORT_TCP_CONNECT);
  g = GuardPlan(fast, c);
  EXPECT_DOUBLE_EQ(g.udp_max_rate_hz, 50);
}

TEST(GuardPlan, ByteBudgetIsCappedAndBurstsSpreadOut) {
  v1::ProbePlan plan;
  for (int i = 0; i < 4; ++i) {
    AddPeer(plan, "n" + std::to_string(i), "198.18.0." + std::to_string(i + 1))
        ->set_bandwidth(true);
  }
  plan.mutable_budget()->set_packets_per_s(1000);
  plan.mutable_budget()->set_bytes_per_s(1e12);
  plan.set_bandwidth_bytes(100'000'000);
  plan.set_bandwidth_interval_s(1);  // 4 x 100 MB every second asked
  PlanCeilings c;
  c.max_bytes_per_s = 50e6;
  const GuardedPlan g = GuardPlan(plan, c);
  EXPECT_TRUE(Trimmed(g, PlanTrim::kBytesPerS));
  EXPECT_DOUBLE_EQ(g.budget_bytes_per_s, 50e6);
  EXPECT_DOUBLE_EQ(g.bandwidth_interval_s, 8);  // 4 x 100 MB / 50 MB/s
}

TEST(GuardPlan, APlanThePlannerSendsIsNotTrimmed) {
  // docs/planner.md: 1,000 probes/s and 12.5 MB/s per node, 4 MiB bursts every 300 s, at most
  // 127 peers per node measured.
  v1::ProbePlan plan;
  for (int i = 0; i < 127; ++i) {
    AddPeer(plan, "n" + std::to_string(i), "198.18.1." + std::to_string(i + 1), 9753, 4, 1)
        ->set_bandwidth(true);
  }
  plan.mutable_budget()->set_packets_per_s(1000);
  plan.mutable_budget()->set_bytes_per_s(12.5e6);
  plan.set_bandwidth_bytes(4u << 20);
  plan.set_bandwidth_interval_s(300);
  const GuardedPlan g = GuardPlan(plan, PlanCeilings{});
  for (bool t : g.trimmed) EXPECT_FALSE(t) << g.trim_detail;
  EXPECT_EQ(g.peers.size(), 127u);
}

}  // namespace
}  // namespace fw::agent
