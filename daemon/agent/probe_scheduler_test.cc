// ProbeScheduler on loopback: a plan with the planner's default budget admits bandwidth bursts.
#include "daemon/agent/probe_scheduler.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <regex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "daemon/agent/rdma_metrics.h"
#include "probes/net/net_test_util.h"
#include "probes/rdma/fake_verbs.h"
#include "probes/rdma/rdma_runner.h"

namespace fw::agent {
namespace {

namespace v1 = fabricwatch::v1;

double MetricValue(const std::string& text, const std::string& series) {
  const std::regex re("(^|\n)" + std::regex_replace(series, std::regex(R"([{}"\\])"), R"(\$&)") +
                      " ([0-9.eE+-]+)");
  std::smatch m;
  if (!std::regex_search(text, m, re)) return -1;
  return std::stod(m[2]);
}

// The planner's defaults (daemon/aggregator/plan/planner.h): 1,000 probes/s and 12.5 MB/s per
// node, 4 MiB bursts. Bursts used to be charged ~2,900 TCP segments against a packet bucket that
// held one second (1,000) of latency probes, so every burst was refused, forever.
TEST(ProbeScheduler, DefaultBudgetAdmitsBandwidthBursts) {
  OutboundBuffer buffer(1000, 64 << 20);
  metrics::Registry registry;
  ProbeSchedulerOptions o;
  o.listen_address = "127.0.0.1";
  o.port = 0;
  o.tcp_connect_interval_s = 3600;
  ProbeScheduler scheduler(
      o, buffer, [] {}, registry);
  ASSERT_TRUE(scheduler.Start().ok());

  v1::ProbePlan plan;
  plan.set_version(1);
  plan.mutable_budget()->set_packets_per_s(1000);
  plan.mutable_budget()->set_bytes_per_s(12.5e6);
  plan.set_bandwidth_interval_s(1);
  plan.set_bandwidth_bytes(4u << 20);
  v1::PlannedPeer* peer = plan.add_peers();
  peer->set_node("self");
  peer->set_address("127.0.0.1");
  peer->set_port(scheduler.responder_port());
  peer->set_transport(v1::TRANSPORT_UDP);
  peer->add_src_ports(0);
  peer->set_rate_pps(10);
  peer->set_bandwidth(true);
  scheduler.ApplyPlan(plan);

  double sent = 0;
  std::string text;
  for (int i = 0; i < 100 && sent < 2; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    text = registry.RenderToString();
    sent = MetricValue(text, R"(fabricwatch_probe_sent_total{transport="tcp_bw"})");
  }
  scheduler.Stop();
  EXPECT_GE(sent, 2) << text;
  EXPECT_EQ(MetricValue(text, "fabricwatch_probe_budget_rejected_total"), 0) << text;
  EXPECT_GT(MetricValue(text, "fabricwatch_probe_goodput_bps"), 0) << text;
  // Each burst carries this host's CPU busy share over its lead and itself (/proc/stat), in the
  // batch's CPU columns; the latency rows of the same batches say "not measured". Where the
  // kernel has PSI, each burst also carries its CPU pressure (column 18) and the gauge shows it.
  const bool psi = access("/proc/pressure/cpu", R_OK) == 0;
  int bursts = 0;
  for (const v1::ProbeBatch& b : buffer.TakeUnsent(1 << 20)) {
    const v1::ProbeColumns& c = b.columns();
    if (c.cpu_busy_permille().empty()) continue;
    ASSERT_EQ(c.cpu_busy_permille_size(), c.peer_size());
    ASSERT_EQ(c.cpu_peak_permille_size(), c.peer_size());
    ASSERT_EQ(c.cpu_pressure_permille_size(), psi ? c.peer_size() : 0);
    for (int i = 0; i < c.peer_size(); ++i) {
      if (c.transport(i) != v1::TRANSPORT_TCP_BW) {
        EXPECT_EQ(c.cpu_busy_permille(i), 0u);
        if (psi) {
          EXPECT_EQ(c.cpu_pressure_permille(i), 0u);
        }
        continue;
      }
      if (c.lost(i)) continue;
      ++bursts;
      EXPECT_GE(c.cpu_busy_permille(i), 1u);
      EXPECT_LE(c.cpu_busy_permille(i), 1000u);
      EXPECT_GE(c.cpu_peak_permille(i), c.cpu_busy_permille(i));
      if (psi) {
        EXPECT_GE(c.cpu_pressure_permille(i), 1u);
        EXPECT_LE(c.cpu_pressure_permille(i), 1000u);
      }
    }
  }
  EXPECT_GE(bursts, 1);
  if (psi) {
    EXPECT_GT(MetricValue(text, "fabricwatch_probe_burst_cpu_pressure_ratio"), 0) << text;
    EXPECT_EQ(MetricValue(text, "fabricwatch_probe_cpu_pressure_unmeasured_total"), 0) << text;
  }
}

// A column block's name table, name k at index k.
std::vector<std::string> ColumnNames(const v1::ProbeColumns& c) {
  std::vector<std::string> names;
  size_t at = 0;
  for (uint32_t len : c.name_lengths()) {
    names.push_back(c.names().substr(at, len));
    at += len;
  }
  return names;
}

// The UDP results batched so far that were answered (or, with `lost`, lost), by peer name.
std::map<std::string, int> UdpAnsweredByPeer(OutboundBuffer& buffer, bool lost = false) {
  std::map<std::string, int> answered;
  for (const v1::ProbeBatch& b : buffer.TakeUnsent(1 << 20)) {
    const v1::ProbeColumns& c = b.columns();
    const std::vector<std::string> names = ColumnNames(c);
    for (int i = 0; i < c.peer_size(); ++i) {
      if (c.transport(i) == v1::TRANSPORT_UDP && c.lost(i) == lost) ++answered[names.at(c.peer(i))];
    }
  }
  return answered;
}

// The peer names of the UDP results batched so far.
std::set<std::string> UdpPeersProbed(OutboundBuffer& buffer) {
  std::set<std::string> peers;
  for (const auto& [peer, n] : UdpAnsweredByPeer(buffer)) peers.insert(peer);
  return peers;
}

// TCP connect probes run on the prober's thread, every interval per peer: answered ones carry a
// round trip, a peer that refuses counts as a probe error, and between bursts no thread of the
// scheduler's own exists (bursts get one only while they run).
TEST(ProbeScheduler, ConnectProbesRunOnTheProbersThreadAndBurstsOnlyGetAThreadWhileTheyRun) {
  OutboundBuffer buffer(1000, 64 << 20);
  metrics::Registry registry;
  ProbeSchedulerOptions o;
  o.listen_address = "127.0.0.1";
  o.port = 0;
  o.tcp_connect_interval_s = 0.2;
  ProbeScheduler scheduler(
      o, buffer, [] {}, registry);
  ASSERT_TRUE(scheduler.Start().ok());
  // A port nothing listens on: bind one, close it.
  uint16_t closed_port = 0;
  {
    net::Fd fd(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    ASSERT_EQ(bind(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    ASSERT_EQ(getsockname(fd.get(), reinterpret_cast<sockaddr*>(&a), &len), 0);
    closed_port = ntohs(a.sin_port);
  }
  v1::ProbePlan plan;
  plan.set_version(1);
  for (auto [node, port] : {std::pair<std::string, uint32_t>{"self", scheduler.responder_port()},
                            {"closed", closed_port}}) {
    v1::PlannedPeer* peer = plan.add_peers();
    peer->set_node(node);
    peer->set_address("127.0.0.1");
    peer->set_port(port);
    peer->set_transport(v1::TRANSPORT_TCP_CONNECT);
  }
  scheduler.ApplyPlan(plan);
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  EXPECT_EQ(net::testing::ThreadsNamed("fw-sched-slow"), 0);
  EXPECT_EQ(net::testing::ThreadsNamed("fw-sched-burst"), 0) << "no burst was due";
  const std::string text = registry.RenderToString();
  scheduler.Stop();
  int answered = 0;
  for (const v1::ProbeBatch& b : buffer.TakeUnsent(1 << 20)) {
    const v1::ProbeColumns& c = b.columns();
    const std::vector<std::string> names = ColumnNames(c);
    for (int i = 0; i < c.peer_size(); ++i) {
      if (c.transport(i) != v1::TRANSPORT_TCP_CONNECT) continue;
      EXPECT_EQ(names.at(c.peer(i)), "self");
      EXPECT_FALSE(c.lost(i));
      EXPECT_GT(c.rtt_ns(i), 0u);
      ++answered;
    }
  }
  // 1.5 s at one probe per 0.2 s, the first within 0.2 s of the plan: 7 or so.
  EXPECT_GE(answered, 3);
  EXPECT_LE(answered, 9);
  EXPECT_GE(MetricValue(text, "fabricwatch_probe_errors_total"), 3) << text;
}

ProbeSchedulerOptions LoopbackOptions() {
  ProbeSchedulerOptions o;
  o.listen_address = "127.0.0.1";
  o.port = 0;
  o.tcp_connect_interval_s = 3600;
  o.bandwidth_probes = false;
  o.batch_interval_s = 0.1;
  return o;
}

// Runs `plan` on a scheduler on loopback for `run`, its results batched into `buffer`.
void RunPlan(const v1::ProbePlan& plan, std::chrono::milliseconds run, OutboundBuffer& buffer) {
  metrics::Registry registry;
  ProbeScheduler scheduler(
      LoopbackOptions(), buffer, [] {}, registry);
  ASSERT_TRUE(scheduler.Start().ok());
  scheduler.ApplyPlan(plan);
  std::this_thread::sleep_for(run);
  scheduler.Stop();
}

void AddUdpPeer(v1::ProbePlan& plan, std::string node, std::string address, uint32_t port) {
  v1::PlannedPeer* p = plan.add_peers();
  p->set_node(std::move(node));
  p->set_address(std::move(address));
  p->set_port(port);
  p->set_transport(v1::TRANSPORT_UDP);
  p->add_src_ports(0);
  p->set_rate_pps(20);
}

// Probes the scheduler's own responder on loopback (peer "peer") with `flows` UDP flows at
// `rate_pps` for 2.2 s, then stops the scheduler.
void ProbeOwnResponder(ProbeScheduler& scheduler, uint32_t flows, uint32_t rate_pps) {
  v1::ProbePlan plan;
  plan.set_version(1);
  AddUdpPeer(plan, "peer", "127.0.0.1", scheduler.responder_port());
  v1::PlannedPeer& peer = *plan.mutable_peers(0);
  for (uint32_t j = 1; j < flows; ++j) peer.add_src_ports(j);
  peer.set_rate_pps(rate_pps);
  scheduler.ApplyPlan(plan);
  std::this_thread::sleep_for(std::chrono::milliseconds(2200));
  scheduler.Stop();
}

// The rounds of the tcp_bw results batched so far (a requested burst's probe_seq is its round),
// with how many results each.
std::map<uint64_t, int> BurstRounds(OutboundBuffer& buffer, int* lost) {
  std::map<uint64_t, int> rounds;
  for (const v1::ProbeBatch& b : buffer.TakeUnsent(1 << 20)) {
    const v1::ProbeColumns& c = b.columns();
    for (int i = 0; i < c.peer_size(); ++i) {
      if (c.transport(i) != v1::TRANSPORT_TCP_BW) continue;
      ++rounds[c.probe_seq(i)];
      if (c.lost(i)) ++*lost;
    }
  }
  return rounds;
}

void AddBurst(v1::ProbePlan& plan, uint32_t port, uint64_t round) {
  v1::BurstRequest* b = plan.add_bursts();
  b->set_node("self");
  b->set_address("127.0.0.1");
  b->set_port(port);
  b->set_bytes(1u << 20);
  b->set_round(round);
  b->set_timeout_s(5);
}

// A scheduler on loopback, its responder the target of the requested bursts, and the rounds of
// the burst results it batched.
class RequestedBurstTest : public ::testing::Test {
 protected:
  RequestedBurstTest()
      : scheduler_(
            LoopbackOptions(), buffer_, [] {}, registry_) {
    EXPECT_TRUE(scheduler_.Start().ok());
  }
  // Polls the batches for up to 5 s until results of `want` rounds arrived.
  void Collect(size_t want) {
    for (int i = 0; i < 50 && rounds_.size() < want; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      for (auto [r, n] : BurstRounds(buffer_, &lost_)) rounds_[r] += n;
    }
  }
  double Outcome(const std::string& outcome) {
    return MetricValue(registry_.RenderToString(),
                       "fabricwatch_probe_burst_requests_total{outcome=\"" + outcome + "\"}");
  }

  OutboundBuffer buffer_{1000, 64 << 20};
  metrics::Registry registry_;
  ProbeScheduler scheduler_;
  std::map<uint64_t, int> rounds_;
  int lost_ = 0;
};

// Issue 14: a burst the plan asks for runs at once and exactly once per round, however often
// plans carrying it arrive (a newer plan, the same plan sent again); a new round runs again.
TEST_F(RequestedBurstTest, ARequestedBurstRunsOncePerRound) {
  const uint32_t port = scheduler_.responder_port();
  v1::ProbePlan plan;
  plan.set_version(1);
  AddBurst(plan, port, 77);
  AddBurst(plan, port, 0);  // invalid: round 0
  scheduler_.ApplyPlan(plan);
  Collect(1);
  plan.set_version(2);  // the same request in a newer plan
  scheduler_.ApplyPlan(plan);
  scheduler_.ApplyPlan(plan);  // and that plan again
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  Collect(1);
  EXPECT_EQ(rounds_, (std::map<uint64_t, int>{{77, 1}}));

  v1::ProbePlan next;
  next.set_version(3);
  AddBurst(next, port, 78);
  scheduler_.ApplyPlan(next);
  Collect(2);
  EXPECT_EQ(rounds_, (std::map<uint64_t, int>{{77, 1}, {78, 1}}));
  EXPECT_EQ(lost_, 0);
  EXPECT_EQ(Outcome("run"), 2);
  EXPECT_EQ(Outcome("repeat"), 1);
  EXPECT_EQ(Outcome("invalid"), 2);
  EXPECT_GT(MetricValue(registry_.RenderToString(), "fabricwatch_probe_goodput_bps"), 0);
}

// A burst to a closed port is reported, lost, under its round: the aggregator learns at once
// rather than waiting out the round.
TEST_F(RequestedBurstTest, AFailedRequestedBurstIsReportedLost) {
  v1::ProbePlan plan;
  plan.set_version(1);
  AddBurst(plan, 1, 9);  // nothing listens on port 1
  scheduler_.ApplyPlan(plan);
  Collect(1);
  EXPECT_EQ(rounds_, (std::map<uint64_t, int>{{9, 1}}));
  EXPECT_EQ(lost_, 1);
  EXPECT_EQ(Outcome("lost"), 1);
}

// Issue 12: a peer's plan with one over-long name was rejected whole by the UDP prober after its
// version had been recorded, so nothing of it was ever probed, and it was never retried.
TEST(ProbeScheduler, APlanWithOneUnusableEntryProbesTheOthers) {
  OutboundBuffer buffer(1000, 64 << 20);
  metrics::Registry registry;
  ProbeScheduler scheduler(
      LoopbackOptions(), buffer, [] {}, registry);
  ASSERT_TRUE(scheduler.Start().ok());
  v1::ProbePlan plan;
  plan.set_version(7);
  AddUdpPeer(plan, "good-a", "127.0.0.1", scheduler.responder_port());
  AddUdpPeer(plan, std::string(64, 'n'), "127.0.0.1", scheduler.responder_port());
  AddUdpPeer(plan, "good-b", "127.0.0.1", scheduler.responder_port());
  scheduler.ApplyPlan(plan);

  std::set<std::string> peers;
  for (int i = 0; i < 50 && peers.size() < 2; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    for (const std::string& p : UdpPeersProbed(buffer)) peers.insert(p);
  }
  const std::string text = registry.RenderToString();
  scheduler.Stop();
  EXPECT_EQ(peers, (std::set<std::string>{"good-a", "good-b"}));
  EXPECT_EQ(MetricValue(text, R"(fabricwatch_probe_plan_entries_skipped_total{reason="name"})"), 1)
      << text;
  EXPECT_EQ(MetricValue(text, "fabricwatch_probe_planned_peers"), 2) << text;
  EXPECT_EQ(MetricValue(text, "fabricwatch_probe_plans_applied_total"), 1) << text;
}

// Each plan entry runs at its own rate: a pair escalated to 10 Hz beside four peers at 1 Hz
// raises that entry's flows only: 2 x 10 + 8 x 1 = 28 probes/s here, not every flow at the plan's
// highest entry rate (5 entries x 2 flows x 10 Hz = 100).
TEST(ProbeScheduler, AnEscalatedEntryRaisesOnlyItsOwnFlows) {
  OutboundBuffer buffer(1000, 64 << 20);
  metrics::Registry registry;
  ProbeScheduler scheduler(
      LoopbackOptions(), buffer, [] {}, registry);
  ASSERT_TRUE(scheduler.Start().ok());
  v1::ProbePlan plan;
  plan.set_version(1);
  const std::vector<std::string> base = {"base-0", "base-1", "base-2", "base-3"};
  AddUdpPeer(plan, "hot", "127.0.0.1", scheduler.responder_port());
  for (const std::string& node : base) {
    AddUdpPeer(plan, node, "127.0.0.1", scheduler.responder_port());
  }
  for (v1::PlannedPeer& p : *plan.mutable_peers()) {
    p.add_src_ports(1);  // 2 flows each
    p.set_rate_pps(p.node() == "hot" ? 10 : 1);
  }
  const auto sent = [&] {
    return MetricValue(registry.RenderToString(),
                       R"(fabricwatch_probe_sent_total{transport="udp"})");
  };
  const double sent_before = std::max(0.0, sent());
  const auto start = std::chrono::steady_clock::now();
  scheduler.ApplyPlan(plan);
  std::this_thread::sleep_for(std::chrono::seconds(2));
  const double sent_after = sent();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // the last replies and batch
  scheduler.Stop();
  const std::map<std::string, int> answered = UdpAnsweredByPeer(buffer);
  const double pps = (sent_after - sent_before) / seconds;
  std::printf("udp probes sent: %.0f in %.2f s = %.1f/s\n", sent_after - sent_before, seconds, pps);
  RecordProperty("udp_probes_per_s", std::to_string(pps));
  // 2.2 s until Stop: 44 probes of the escalated entry, 4-5 of each base one, on a quiet host;
  // a loaded one may stall a few slots (the schedule re-anchors rather than catching up).
  const auto count = [&](const std::string& node) {
    auto it = answered.find(node);
    return it == answered.end() ? 0 : it->second;
  };
  EXPECT_GE(count("hot"), 28);
  EXPECT_LE(count("hot"), 50);
  for (const std::string& node : base) {
    EXPECT_GE(count(node), 2) << node;
    EXPECT_LE(count(node), 7) << node;
  }
  EXPECT_GE(sent_after - sent_before, 36);
  EXPECT_LE(sent_after - sent_before, 64);
}

// An entry's per-flow rates reach the prober: of one peer's 4 flows, raised_flows {1, 3} probe at
// rate_pps (20/s) and flows 0 and 2 at unraised_rate_pps (2/s), each result under its own flow id.
TEST(ProbeScheduler, AnEntrysRaisedFlowsRunAtItsRateAndTheOthersAtTheUnraisedRate) {
  auto responder = net::testing::StartResponder();
  ASSERT_TRUE(responder);
  v1::ProbePlan plan;
  plan.set_version(1);
  AddUdpPeer(plan, "pair", "127.0.0.1", responder->port());
  v1::PlannedPeer& peer = *plan.mutable_peers(0);
  for (uint32_t j = 1; j < 4; ++j) peer.add_src_ports(j);  // 4 flows
  peer.set_rate_pps(20);
  for (uint32_t id : {3u, 1u, 9u}) peer.add_raised_flows(id);  // 9: out of range, ignored
  peer.set_unraised_rate_pps(2);
  OutboundBuffer buffer(1000, 64 << 20);
  RunPlan(plan, std::chrono::seconds(2), buffer);
  std::map<uint32_t, int> by_flow;
  int lost = 0;
  for (const v1::ProbeBatch& b : buffer.TakeUnsent(1 << 20)) {
    const v1::ProbeColumns& c = b.columns();
    for (int i = 0; i < c.peer_size(); ++i) {
      if (c.transport(i) != v1::TRANSPORT_UDP) continue;
      lost += c.lost(i);
      ++by_flow[c.flow_id_size() > i ? c.flow_id(i) : 0];
    }
  }
  std::printf("per flow: 0=%d 1=%d 2=%d 3=%d\n", by_flow[0], by_flow[1], by_flow[2], by_flow[3]);
  // 2 s: 40 probes of each raised flow and 4 of each other on a quiet host; a loaded one may
  // stall a few slots (re-anchored, not caught up). Every flow at 20/s would give 0 and 2 ~40.
  const std::map<uint32_t, std::pair<int, int>> expected = {
      {0, {2, 6}}, {1, {26, 46}}, {2, {2, 6}}, {3, {26, 46}}};  // flow: fewest, most
  for (const auto& [flow, range] : expected) {
    EXPECT_GE(by_flow[flow], range.first) << flow;
    EXPECT_LE(by_flow[flow], range.second) << flow;
  }
  EXPECT_EQ(by_flow.size(), 4u);
  EXPECT_EQ(lost, 0);
}

// The plan's timeouts reach the prober entry by entry: toward two silent peers, the entry with
// timeout_ms 200 reports its probes lost within the run, the other, on the plan's
// probe_timeout_ms of 30 s, reports none.
TEST(ProbeScheduler, EachEntryTimesOutOnItsOwnTimeout) {
  net::Fd quick_sink = net::testing::UdpSocket();  // bound, never read: nothing answers
  net::Fd slow_sink = net::testing::UdpSocket();
  auto quick_addr = net::LocalAddress(quick_sink.get());
  auto slow_addr = net::LocalAddress(slow_sink.get());
  ASSERT_TRUE(quick_addr.ok() && slow_addr.ok());
  v1::ProbePlan plan;
  plan.set_version(1);
  plan.set_probe_timeout_ms(30'000);
  AddUdpPeer(plan, "quick", "127.0.0.1", quick_addr->port());
  plan.mutable_peers(0)->set_timeout_ms(200);
  AddUdpPeer(plan, "slow", "127.0.0.1", slow_addr->port());
  // 20 probes/s each: by 2 s, ~36 of quick's are past their 200 ms on a quiet host; a loaded one
  // stalls some slots and batches later, hence the margins.
  OutboundBuffer buffer(1000, 64 << 20);
  RunPlan(plan, std::chrono::seconds(2), buffer);
  const std::map<std::string, int> lost = UdpAnsweredByPeer(buffer, /*lost=*/true);
  EXPECT_GE(lost.count("quick") ? lost.at("quick") : 0, 10);
  EXPECT_EQ(lost.count("slow"), 0u) << "the 30 s timeout cannot have passed";
}

// ProbeSchedulerOptions::send_slots: the flows of one rate go out in that many batches a period,
// so the prober (and the responders it probes) wake that many times a second for them, however
// many flows there are.
TEST(ProbeScheduler, TheFlowsOfARateGoOutInItsSendSlots) {
  for (const uint32_t slots : {4u, 10u}) {
    OutboundBuffer buffer(1000, 64 << 20);
    metrics::Registry registry;
    ProbeSchedulerOptions o = LoopbackOptions();
    o.send_slots = slots;
    ProbeScheduler scheduler(
        o, buffer, [] {}, registry);
    ASSERT_TRUE(scheduler.Start().ok());
    ProbeOwnResponder(scheduler, 20, 1);
    std::vector<int64_t> sent;
    for (const v1::ProbeBatch& b : buffer.TakeUnsent(1 << 20)) {
      const v1::ProbeColumns& c = b.columns();
      int64_t t = 0;
      for (int i = 0; i < c.sent_unix_ns_delta_size(); ++i) {
        t += c.sent_unix_ns_delta(i);
        if (c.transport(i) == v1::TRANSPORT_UDP) sent.push_back(t);
      }
    }
    std::sort(sent.begin(), sent.end());
    // A slot's probes leave in one sendmmsg, microseconds apart; slots are 250 or 100 ms apart.
    int batches = sent.empty() ? 0 : 1;
    for (size_t i = 1; i < sent.size(); ++i) batches += sent[i] - sent[i - 1] > 20'000'000;
    std::printf("send_slots %u: %zu probes in %d batches\n", slots, sent.size(), batches);
    // 2 s of sending at 1/s: 40 probes in 2 x slots batches; a slot at either end may fall
    // outside the window, and a loaded host may delay one slot past the 20 ms gap.
    EXPECT_GE(sent.size(), 30u) << slots;
    EXPECT_GE(batches, static_cast<int>(2 * slots) - 2) << slots;
    EXPECT_LE(batches, static_cast<int>(2 * slots) + 3) << slots;
  }
}

// ProbeSchedulerOptions::reply_reads (--probe-reply-reads deferred) reaches the UDP prober: its
// replies wait up to a send slot (250 ms at 2/s in 2 slots) and each is reported with the network's
// round trip, not that wait. A UDP result answered without a round trip (a deferred reply that came
// without a receive stamp, rtt_ns 0) counts as sent, not in the RTT histogram.
TEST(ProbeScheduler, DeferredReplyReadsReportTheNetworksRoundTrip) {
  OutboundBuffer buffer(1000, 64 << 20);
  metrics::Registry registry;
  ProbeSchedulerOptions o = LoopbackOptions();
  o.reply_reads = net::ReplyReads::kDeferred;
  ProbeScheduler scheduler(
      o, buffer, [] {}, registry);
  ASSERT_TRUE(scheduler.Start().ok());
  ProbeOwnResponder(scheduler, 2, 2);
  int answered = 0;
  for (const v1::ProbeBatch& b : buffer.TakeUnsent(1 << 20)) {
    const v1::ProbeColumns& c = b.columns();
    for (int i = 0; i < c.transport_size(); ++i) {
      if (c.transport(i) != v1::TRANSPORT_UDP) continue;
      EXPECT_FALSE(c.lost(i));
      EXPECT_GT(c.rtt_ns(i), 0u);
      EXPECT_LT(c.rtt_ns(i), 20'000'000u);
      ++answered;
    }
  }
  EXPECT_GE(answered, 5);

  net::ProbeResult unknown;
  unknown.transport = net::Transport::kUdp;
  scheduler.RecordResult(unknown);
  const std::string text = registry.RenderToString();
  EXPECT_EQ(MetricValue(text, R"(fabricwatch_probe_rtt_seconds_count{transport="udp"})"),
            answered)
      << text;
  EXPECT_EQ(MetricValue(text, R"(fabricwatch_probe_sent_total{transport="udp"})"), answered + 1)
      << text;
  EXPECT_EQ(MetricValue(text, "fabricwatch_probe_receive_drops_total"), 0) << text;
}

TEST(ProbeScheduler, AVersionIsRecordedOnlyOnceItsPlanApplied) {
  OutboundBuffer buffer(1000, 64 << 20);
  metrics::Registry registry;
  ProbeSchedulerOptions o = LoopbackOptions();
  o.ceilings.max_targets = 1;
  ProbeScheduler scheduler(
      o, buffer, [] {}, registry);
  v1::ProbePlan plan;
  plan.set_version(3);
  AddUdpPeer(plan, "first", "127.0.0.1", 9);
  AddUdpPeer(plan, "second", "127.0.0.1", 9);
  scheduler.ApplyPlan(plan);  // not started: the UDP prober refuses it, the version stays open
  auto applied = [&] {
    return MetricValue(registry.RenderToString(), "fabricwatch_probe_plans_applied_total");
  };
  EXPECT_EQ(applied(), 0);
  ASSERT_TRUE(scheduler.Start().ok());
  scheduler.ApplyPlan(plan);  // the same version again is tried again
  EXPECT_EQ(applied(), 1);
  scheduler.ApplyPlan(plan);  // and once applied, it is not applied twice
  plan.set_version(2);
  scheduler.ApplyPlan(plan);  // nor is an older one
  EXPECT_EQ(applied(), 1);
  const std::string text = registry.RenderToString();
  scheduler.Stop();
  EXPECT_EQ(MetricValue(text, "fabricwatch_probe_planned_peers"), 1) << text;
  EXPECT_EQ(MetricValue(text, R"(fabricwatch_probe_plan_trimmed_total{limit="targets"})"), 2)
      << text;
  EXPECT_EQ(MetricValue(text, R"(fabricwatch_probe_plan_trimmed_total{limit="pps"})"), 0) << text;
}

// Issue 12: the responder answers only the nodes whose plans name this one (the aggregator's
// ProbePlan.allowed_probers); here the scheduler probes its own responder from 127.0.0.1.
TEST(ProbeScheduler, TheResponderAnswersOnlyThePlansAllowedProbers) {
  OutboundBuffer buffer(1000, 64 << 20);
  metrics::Registry registry;
  ProbeSchedulerOptions o = LoopbackOptions();
  o.allowed_probers_grace = std::chrono::nanoseconds(0);
  ProbeScheduler scheduler(
      o, buffer, [] {}, registry);
  ASSERT_TRUE(scheduler.Start().ok());
  auto dropped = [&] {
    return MetricValue(registry.RenderToString(),
                       R"(fabricwatch_responder_dropped_total{reason="not_in_plan"})");
  };
  // Not listed (and one address that is not an IP, skipped and counted): refused.
  v1::ProbePlan plan;
  plan.set_version(1);
  AddUdpPeer(plan, "self", "127.0.0.1", scheduler.responder_port());
  plan.add_allowed_probers("127.0.0.2");
  plan.add_allowed_probers("gpu7.example");
  scheduler.ApplyPlan(plan);
  for (int i = 0; i < 50 && dropped() < 3; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_GE(dropped(), 3);
  // Probes answered before the list took effect (within one responder loop turn) are batched
  // by now; none after.
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  (void)UdpPeersProbed(buffer);
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  EXPECT_TRUE(UdpPeersProbed(buffer).empty());
  EXPECT_EQ(MetricValue(registry.RenderToString(),
                        R"(fabricwatch_probe_plan_entries_skipped_total{reason="address"})"),
            1);

  // Listed: answered.
  plan.set_version(2);
  plan.clear_allowed_probers();
  plan.add_allowed_probers("127.0.0.1");
  scheduler.ApplyPlan(plan);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  (void)UdpPeersProbed(buffer);  // probes sent before the switch may still come back lost
  const double refused = dropped();
  std::set<std::string> peers;
  for (int i = 0; i < 50 && peers.empty(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    peers = UdpPeersProbed(buffer);
  }
  EXPECT_EQ(peers, (std::set<std::string>{"self"}));
  EXPECT_EQ(dropped(), refused);

  // An empty list (an aggregator before the field) answers everyone.
  plan.set_version(3);
  plan.clear_allowed_probers();
  scheduler.ApplyPlan(plan);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_EQ(dropped(), refused);
  scheduler.Stop();
}

// --responder-allow-any: the list is ignored (probes leaving from an unlisted address).
TEST(ProbeScheduler, AllowAnyIgnoresTheList) {
  OutboundBuffer buffer(1000, 64 << 20);
  metrics::Registry registry;
  ProbeSchedulerOptions o = LoopbackOptions();
  o.allowed_probers_grace = std::chrono::nanoseconds(0);
  o.responder_allow_any = true;
  ProbeScheduler scheduler(
      o, buffer, [] {}, registry);
  ASSERT_TRUE(scheduler.Start().ok());
  v1::ProbePlan plan;
  plan.set_version(1);
  AddUdpPeer(plan, "self", "127.0.0.1", scheduler.responder_port());
  plan.add_allowed_probers("127.0.0.2");
  scheduler.ApplyPlan(plan);
  std::set<std::string> peers;
  for (int i = 0; i < 50 && peers.empty(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    peers = UdpPeersProbed(buffer);
  }
  const std::string text = registry.RenderToString();
  scheduler.Stop();
  EXPECT_EQ(peers, (std::set<std::string>{"self"}));
  // No series at all: nothing was ever refused.
  EXPECT_LE(MetricValue(text, R"(fabricwatch_responder_dropped_total{reason="not_in_plan"})"), 0)
      << text;
}

// The agent's side of the RDMA UD probes (docs/rdma.md "In the agent"): their results count in
// the probe metrics by transport, and they pay from the scheduler's shared node budget.
ProbeSchedulerOptions RdmaLoopback() {
  ProbeSchedulerOptions o;
  o.listen_address = "127.0.0.1";
  o.port = 0;
  o.tcp_connect_interval_s = 3600;
  return o;
}

TEST(RdmaAgent, ResultsCountInTheProbeMetricsByTransport) {
  OutboundBuffer buffer(100, 1 << 20);
  metrics::Registry registry;
  ProbeScheduler scheduler(
      RdmaLoopback(), buffer, [] {}, registry);
  rdma::RdmaProbeResult answered;
  answered.base.transport = net::Transport::kRdmaUd;
  answered.base.rtt_ns = 4'000;  // the network RTT
  rdma::RdmaProbeResult lost = answered;
  lost.base.lost = true;
  lost.base.rtt_ns = 0;
  scheduler.RecordResult(answered.base);
  scheduler.RecordResult(answered.base);
  scheduler.RecordResult(lost.base);
  const std::string text = registry.RenderToString();
  EXPECT_EQ(MetricValue(text, R"(fabricwatch_probe_sent_total{transport="rdma_ud"})"), 3) << text;
  EXPECT_EQ(MetricValue(text, R"(fabricwatch_probe_lost_total{transport="rdma_ud"})"), 1) << text;
  EXPECT_EQ(MetricValue(text, R"(fabricwatch_probe_rtt_seconds_count{transport="rdma_ud"})"), 2)
      << text;
  EXPECT_EQ(
      MetricValue(text, R"(fabricwatch_probe_rtt_seconds_bucket{transport="rdma_ud",le="1e-05"})"),
      2)
      << text;
  EXPECT_EQ(MetricValue(text, R"(fabricwatch_probe_sent_total{transport="udp"})"), 0) << text;
}

// The UD mesh's waits on the agent's own work (docs/rdma.md) are on /metrics, each read from its
// UdMeshStats counter at render; without a mesh (RDMA unavailable) they are 0.
TEST(RdmaAgent, BusyCountersAreExported) {
  metrics::Registry registry;
  rdma::UdMeshStats stats;
  RegisterRdmaUdMetrics(registry, &stats);
  metrics::Registry none;
  RegisterRdmaUdMetrics(none, nullptr);
  stats.busy_prober_delays = 3;
  stats.busy_software_results = 1;
  stats.busy_turnarounds = 7;
  stats.peer_busy_turnarounds = 5;
  std::string text = registry.RenderToString();
  EXPECT_EQ(MetricValue(text, "fabricwatch_rdma_ud_busy_prober_delays_total"), 3) << text;
  EXPECT_EQ(MetricValue(text, "fabricwatch_rdma_ud_busy_software_results_total"), 1) << text;
  EXPECT_EQ(MetricValue(text, "fabricwatch_rdma_ud_busy_turnarounds_total"), 7) << text;
  EXPECT_EQ(MetricValue(text, "fabricwatch_rdma_ud_peer_busy_turnarounds_total"), 5) << text;
  stats.busy_turnarounds++;
  text = registry.RenderToString();
  EXPECT_EQ(MetricValue(text, "fabricwatch_rdma_ud_busy_turnarounds_total"), 8) << text;
  EXPECT_NE(text.find("# TYPE fabricwatch_rdma_ud_busy_turnarounds_total counter"),
            std::string::npos)
      << text;
  const std::string zero = none.RenderToString();
  EXPECT_EQ(MetricValue(zero, "fabricwatch_rdma_ud_peer_busy_turnarounds_total"), 0) << zero;
}

// Two fake NICs probe each other at 200/s per flow while the plan gives the node 20 probes/s:
// the RDMA mesh pays from the scheduler's budget, so most of its probes are refused and counted
// there (fabricwatch_probe_budget_rejected_total) and in the mesh's budget_skipped.
TEST(RdmaAgent, ProbesPayFromTheSchedulersNodeBudget) {
  OutboundBuffer buffer(100, 1 << 20);
  metrics::Registry registry;
  ProbeScheduler scheduler(
      RdmaLoopback(), buffer, [] {}, registry);
  ASSERT_TRUE(scheduler.Start().ok());
  ASSERT_NE(scheduler.budget(), nullptr);
  v1::ProbePlan plan;
  plan.set_version(1);
  plan.mutable_budget()->set_packets_per_s(20);
  plan.mutable_budget()->set_bytes_per_s(12.5e6);  // a burst of one second (the 4 MiB burst fits)
  scheduler.ApplyPlan(plan);

  rdma::FakeFabric fabric(RealClock::Get());
  for (uint16_t lid : {1, 2}) {
    rdma::FakeDeviceConfig d;
    d.name = "mlx5_" + std::to_string(lid);
    rdma::FakePortConfig p;
    p.lid = lid;
    d.ports = {p};
    fabric.AddDevice(d);
  }
  rdma::RdmaRunnerOptions o;
  o.batch_interval_s = 0.05;
  std::atomic<uint64_t> results{0};
  rdma::RdmaRunner prober(
      fabric.MakeVerbs({"mlx5_1"}), RealClock::Get(), o,
      [&](std::vector<rdma::RdmaProbeResult>&& b) {
        for (const auto& r : b) scheduler.RecordResult(r.base);
        results += b.size();
      },
      scheduler.budget());
  rdma::RdmaRunner responder(fabric.MakeVerbs({"mlx5_2"}), RealClock::Get(), o, [](auto&&) {});
  ASSERT_TRUE(prober.Start().ok());
  ASSERT_TRUE(responder.Start().ok());
  rdma::UdTarget t;
  t.peer = "node-b";
  t.remote = responder.state().endpoints.front();
  t.flows = 2;
  t.rate_hz = 200;
  prober.SetTargets({t});
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  prober.Stop();
  responder.Stop();
  const rdma::UdMeshStats& s = *prober.stats();
  const std::string text = registry.RenderToString();
  scheduler.Stop();
  // 1.5 s at 20/s after a full bucket of 20: about 50 admitted of about 600 asked.
  EXPECT_GT(s.sent.load(), 10u);
  EXPECT_LT(s.sent.load(), 90u);
  EXPECT_GT(s.budget_skipped.load(), 300u);
  EXPECT_GE(MetricValue(text, "fabricwatch_probe_budget_rejected_total"),
            static_cast<double>(s.budget_skipped.load()))
      << text;
  EXPECT_GT(MetricValue(text, R"(fabricwatch_probe_sent_total{transport="rdma_ud"})"), 10) << text;
  EXPECT_EQ(MetricValue(text, R"(fabricwatch_probe_sent_total{transport="rdma_ud"})"),
            static_cast<double>(results.load()))
      << text;
}

// The (src_nic, dst_nic) names of the answered UDP results batched so far.
std::set<std::pair<std::string, std::string>> UdpNicPairs(OutboundBuffer& buffer) {
  std::set<std::pair<std::string, std::string>> out;
  for (const v1::ProbeBatch& b : buffer.TakeUnsent(1 << 20)) {
    const v1::ProbeColumns& c = b.columns();
    const std::vector<std::string> names = ColumnNames(c);
    for (int i = 0; i < c.peer_size(); ++i) {
      if (c.transport(i) != v1::TRANSPORT_UDP || c.lost(i)) continue;
      out.emplace(i < c.src_nic_size() ? names.at(c.src_nic(i)) : "",
                  i < c.dst_nic_size() ? names.at(c.dst_nic(i)) : "");
    }
  }
  return out;
}

// Every fabric NIC (docs/probes.md): one prober per NIC bound to its address. A NIC whose
// address cannot be bound (not on this host) and one without an address are skipped, counted and
// said why; the others probe, each its own plan entries, and results name both NICs.
TEST(ProbeScheduler, EachFabricNicProbesItsPeersAndABadNicIsSkipped) {
  OutboundBuffer buffer(1000, 64 << 20);
  metrics::Registry registry;
  ProbeSchedulerOptions o = LoopbackOptions();
  o.nics = {{"lo_a", "127.0.0.1", "", ""},
            {"bad", "192.0.2.1", "", ""},  // TEST-NET-1: no interface here holds it
            {"none", "", "", "interface none has no IPv4 address"},
            {"lo_b", "127.0.0.2", "", ""}};
  ProbeScheduler scheduler(
      o, buffer, [] {}, registry);
  ASSERT_TRUE(scheduler.Start().ok());
  ASSERT_EQ(scheduler.prober_count(), 2u);
  EXPECT_EQ(scheduler.prober_nic(0).name, "lo_a");
  EXPECT_EQ(scheduler.prober_nic(1).name, "lo_b");
  const auto& states = scheduler.nic_states();
  ASSERT_EQ(states.size(), 4u);
  EXPECT_TRUE(states[0].probing);
  EXPECT_FALSE(states[1].probing);
  EXPECT_EQ(states[1].reason.rfind("bind: ", 0), 0u) << states[1].reason;
  EXPECT_FALSE(states[2].probing);
  EXPECT_EQ(states[2].reason, "no_address: interface none has no IPv4 address");
  EXPECT_TRUE(states[3].probing);

  v1::ProbePlan plan;
  plan.set_version(1);
  AddUdpPeer(plan, "peer", "127.0.0.1", scheduler.responder_port());
  plan.mutable_peers(0)->set_src_nic("lo_a");
  plan.mutable_peers(0)->set_dst_nic("p0");
  AddUdpPeer(plan, "peer", "127.0.0.1", scheduler.responder_port());
  plan.mutable_peers(1)->set_src_nic("lo_b");
  plan.mutable_peers(1)->set_dst_nic("p1");
  EXPECT_EQ(scheduler.ProberFor(plan.peers(0)), 0u);
  EXPECT_EQ(scheduler.ProberFor(plan.peers(1)), 1u);
  v1::PlannedPeer unknown;
  unknown.set_src_nic("mlx5_9");
  EXPECT_EQ(scheduler.ProberFor(unknown), 0u);  // a NIC we do not probe from: the first
  scheduler.ApplyPlan(plan);
  std::set<std::pair<std::string, std::string>> pairs;
  for (int i = 0; i < 50 && pairs.size() < 2; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    scheduler.BatchNow();
    for (const auto& p : UdpNicPairs(buffer)) pairs.insert(p);
  }
  const std::string text = registry.RenderToString();
  scheduler.Stop();
  EXPECT_EQ(pairs, (std::set<std::pair<std::string, std::string>>{{"lo_a", "p0"}, {"lo_b", "p1"}}));
  EXPECT_GT(scheduler.UdpProbesSent(0), 0u);
  EXPECT_GT(scheduler.UdpProbesSent(1), 0u);
  EXPECT_EQ(MetricValue(text, R"(fabricwatch_probe_nic_setup_failures_total{reason="bind"})"), 1)
      << text;
  EXPECT_EQ(MetricValue(text, R"(fabricwatch_probe_nic_setup_failures_total{reason="no_address"})"),
            1)
      << text;
  EXPECT_EQ(MetricValue(text, "fabricwatch_probe_nics"), 2) << text;
}

// No NIC usable at all: Start fails and names each NIC's reason.
TEST(ProbeScheduler, NoUsableFabricNicFailsStart) {
  OutboundBuffer buffer(100, 1 << 20);
  metrics::Registry registry;
  ProbeSchedulerOptions o = LoopbackOptions();
  o.nics = {{"bad", "192.0.2.1", "", ""}, {"none", "", "", ""}};
  ProbeScheduler scheduler(
      o, buffer, [] {}, registry);
  Status s = scheduler.Start();
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("bad: bind"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("none: no_address"), std::string::npos) << s.message();
  scheduler.Stop();
}

}  // namespace
}  // namespace fw::agent
