// The qualification suite and queue against a fake fleet whose "agents" feed synthetic probe
// results while the mesh is on: verdicts, reasons, agent states, timeouts and queueing.
#include "daemon/aggregator/qualify/suite.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <thread>

#include "common/http/http_client.h"
#include "common/http/web_client.h"
#include "common/mutex.h"
#include "common/testing/temp_dir.h"
#include "daemon/aggregator/qualify/jobs.h"
#include "daemon/aggregator/qualify/qualify_http.h"
#include "daemon/aggregator/qualify/qualify_store.h"
#include "exporter/http_server.h"
#include "exporter/registry.h"

namespace fw::qualify {
namespace {

using ::testing::HasSubstr;

class FakeFleet : public QualifyEnv {
 public:
  explicit FakeFleet(QualifyInputs& inputs) : inputs_(inputs) {}
  ~FakeFleet() override { StopFeed(); }

  std::map<std::string, AgentStatus> agents;
  std::vector<analysis::TrackedFinding> findings;
  // RTT of a probe from a to b, in ns; loss every n-th probe when loss_every(a, b) > 0.
  std::function<int64_t(const std::string&, const std::string&)> rtt_ns = [](auto&, auto&) {
    return int64_t{300'000};
  };
  std::function<int(const std::string&, const std::string&)> loss_every = [](auto&, auto&) {
    return 0;
  };
  std::atomic<int> meshes_started{0};
  // Goodput of a burst from a to b, bits/s; lost when it is 0. Results arrive when asked for.
  std::function<double(const std::string&, const std::string&)> goodput_bps = [](auto&, auto&) {
    return 9.4e9;
  };
  std::function<std::string(const std::string&, const std::string&)> path_class = [](auto&, auto&) {
    return std::string("unknown");
  };
  std::atomic<int> burst_rounds{0};
  // The collective step: without a stage the default answer; `collective` is what every poll
  // returns (nullopt: the group never answers). Set before a run.
  bool has_collective = true;
  std::optional<CollectiveOutcome> collective = CollectiveOutcome{{}, {}, 1e9, 0};
  std::vector<std::string> allreduce_members;
  uint64_t allreduce_bytes = 0;
  bool allreduce_ended = false;
  std::atomic<int> bursts_in_flight_max{0};  // the most bursts one node was in within a round
  // RDMA: the nodes whose agents announced RDMA ports (set before a run); the network RTT of an
  // rdma_ud probe; the goodput of an RC burst (no result when <= 0, as RC reports none).
  std::set<std::string> rdma_nodes;
  std::function<int64_t(const std::string&, const std::string&)> rdma_rtt_ns = [](auto&, auto&) {
    return int64_t{5'000};
  };
  std::function<double(const std::string&, const std::string&)> rc_goodput_bps =
      [](auto&, auto&) { return 90e9; };
  std::atomic<int> rc_rounds{0};
  std::atomic<int> rc_in_flight_max{0};
  std::atomic<int> ip_bursts_during_rc{0};  // TCP bursts asked while an RC round was open
  std::atomic<bool> rc_open{false};

  std::vector<AgentStatus> Agents(const std::vector<std::string>& nodes) const override {
    std::vector<AgentStatus> out;
    for (const std::string& n : nodes) {
      auto it = agents.find(n);
      out.push_back(it == agents.end() ? AgentStatus{} : it->second);
    }
    return out;
  }
  std::vector<analysis::TrackedFinding> ActiveFindings() const override { return findings; }
  aggregator::NodeId IdOf(const std::string& node) override {
    MutexLock lock(ids_mu_);
    auto [it, added] = ids_.emplace(node, static_cast<aggregator::NodeId>(ids_.size() + 1));
    return it->second;
  }
  void SetMesh(const std::string& id, const std::vector<std::string>& nodes,
               const SuiteSpec&) override {
    MutexLock lock(mu_);
    if (nodes.empty()) {
      meshes_.erase(id);
      return;
    }
    ++meshes_started;
    meshes_[id] = nodes;
    if (feeder_.joinable()) return;
    feeding_ = true;
    feeder_ = std::thread([this] {
      uint64_t seq = 0;
      while (feeding_) {
        std::vector<aggregator::ReportedProbe> batch;
        std::map<std::string, std::vector<std::string>> meshes;
        {
          MutexLock lock(mu_);
          meshes = meshes_;
        }
        for (const auto& [id, nodes] : meshes) {
          for (const auto& a : nodes) {
            for (const auto& b : nodes) {
              if (a == b) continue;
              for (int i = 0; i < 5; ++i) {
                aggregator::ReportedProbe r;
                r.src_id = IdOf(a);
                r.dst_id = IdOf(b);
                r.seq = ++seq;
                const int every = loss_every(a, b);
                r.lost = every > 0 && seq % every == 0;
                r.rtt_ns = rtt_ns(a, b) + static_cast<int64_t>(seq % 7) * 5'000;
                batch.push_back(r);
                if (rdma_nodes.contains(a) && rdma_nodes.contains(b)) {
                  r.transport = aggregator::Transport::kRdmaUd;
                  r.rtt_ns = rdma_rtt_ns(a, b) + static_cast<int64_t>(seq % 5) * 100;
                  batch.push_back(r);
                }
              }
            }
          }
        }
        inputs_.OnResults(batch);
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
    });
  }
  std::string PathClassOf(const std::string& a, const std::string& b) override {
    return path_class(a, b);
  }
  StatusOr<std::string> StartAllReduce(const std::vector<std::string>& nodes, uint64_t bytes,
                                       uint32_t iterations) override {
    if (!has_collective) return QualifyEnv::StartAllReduce(nodes, bytes, iterations);
    allreduce_members = nodes;
    allreduce_bytes = bytes;
    return std::string("q1");
  }
  std::optional<CollectiveOutcome> AllReduceOutcome(const std::string&) override {
    return collective;
  }
  void EndAllReduce(const std::string&) override { allreduce_ended = true; }
  void SetBursts(const std::string&, const BurstRound& bursts, uint64_t round,
                 const SuiteSpec& suite) override {
    if (bursts.empty()) return;
    if (rc_open) ++ip_bursts_during_rc;
    ++burst_rounds;
    std::map<std::string, int> busy;
    std::vector<aggregator::ReportedProbe> batch;
    for (const Burst& b : bursts) {
      for (const std::string* n : {&b.src, &b.dst}) {
        bursts_in_flight_max = std::max(bursts_in_flight_max.load(), ++busy[*n]);
      }
      aggregator::ReportedProbe r;
      r.src_id = IdOf(b.src);
      r.dst_id = IdOf(b.dst);
      r.transport = aggregator::Transport::kTcpBw;
      r.seq = round;
      r.bytes = suite.bw_bytes;
      r.goodput_bps = goodput_bps(b.src, b.dst);
      r.lost = r.goodput_bps <= 0;
      batch.push_back(r);
    }
    inputs_.OnResults(batch);
  }
  // The collective schedule: busy for the first `collective_busy_polls` polls; what was paused
  // and resumed (a node in `already_paused` is not the suite's to pause or resume).
  std::atomic<int> collective_busy_polls{0};
  std::set<std::string> already_paused;
  std::vector<std::string> paused, resumed;
  std::vector<std::string> PauseCollectives(const std::vector<std::string>& nodes) override {
    for (const std::string& n : nodes) {
      if (!already_paused.contains(n)) paused.push_back(n);
    }
    return paused;
  }
  void ResumeCollectives(const std::vector<std::string>& nodes) override { resumed = nodes; }
  bool CollectivesRunningOn(const std::vector<std::string>&) override {
    return collective_busy_polls-- > 0;
  }
  std::vector<std::string> RdmaUnavailable(const std::vector<std::string>& nodes) const override {
    std::vector<std::string> out;
    for (const std::string& n : nodes) {
      out.push_back(rdma_nodes.contains(n) ? "" : "unavailable: no RDMA devices");
    }
    return out;
  }
  void SetRdmaRcBursts(const std::string&, const BurstRound& bursts, uint64_t round,
                       const SuiteSpec&) override {
    rc_open = !bursts.empty();
    if (bursts.empty()) return;
    ++rc_rounds;
    std::map<std::string, int> busy;
    std::vector<aggregator::ReportedProbe> batch;
    for (const Burst& b : bursts) {
      for (const std::string* n : {&b.src, &b.dst}) {
        rc_in_flight_max = std::max(rc_in_flight_max.load(), ++busy[*n]);
      }
      const double g = rc_goodput_bps(b.src, b.dst);
      if (g <= 0) continue;  // a failed RC burst reports nothing
      aggregator::ReportedProbe r;
      r.src_id = IdOf(b.src);
      r.dst_id = IdOf(b.dst);
      r.transport = aggregator::Transport::kRdmaRc;
      r.seq = round;
      r.bytes = 4u << 20;
      r.goodput_bps = g;
      batch.push_back(r);
    }
    inputs_.OnResults(batch);
  }

 private:
  void StopFeed() {
    feeding_ = false;
    if (feeder_.joinable()) feeder_.join();
  }
  QualifyInputs& inputs_;
  Mutex mu_, ids_mu_;
  std::map<std::string, aggregator::NodeId> ids_ FW_GUARDED_BY(ids_mu_);
  std::map<std::string, std::vector<std::string>> meshes_ FW_GUARDED_BY(mu_);
  std::atomic<bool> feeding_{false};
  std::thread feeder_;
};

class SuiteTest : public ::testing::Test {
 protected:
  SuiteTest() : inputs_(RealClock::Get()), fleet_(inputs_) {}

  std::vector<std::string> Nodes(int n) {
    std::vector<std::string> out;
    for (int i = 1; i <= n; ++i) {
      out.push_back("gpu" + std::to_string(i));
      fleet_.agents[out.back()] = {true, true, 0.5};
      inputs_.OnCheckReport(out.back());
    }
    return out;
  }

  // Runs `a`, and `b` 50 ms later, on two threads at once; both results.
  static std::pair<StatusOr<QualifyReport>, StatusOr<QualifyReport>> RunBoth(
      QualifyJobs& jobs, const QualifyJobRequest& a, const QualifyJobRequest& b) {
    StatusOr<QualifyReport> ra = Status::Internal("unset"), rb = Status::Internal("unset");
    std::thread ta([&] { ra = jobs.Run(a); });
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    std::thread tb([&] { rb = jobs.Run(b); });
    ta.join();
    tb.join();
    return {std::move(ra), std::move(rb)};
  }

  // A request of the fast test suite ("t", generic profile) due in `timeout_s`.
  static SuiteRequest Request(const std::vector<std::string>& nodes, double timeout_s = 10) {
    SuiteRequest req;
    req.id = "t";
    req.nodes = nodes;
    req.profile = *FindQualifyProfile("generic");
    req.suite = {"test", 50, 2, 1.0, 0.9, 0.4};
    req.suite.allreduce_wait_s = 0.5;
    req.deadline_ns = RealClock::Get().MonotonicNanos() + static_cast<int64_t>(timeout_s * 1e9);
    return req;
  }
  QualifyReport Run(const SuiteRequest& req) {
    return RunSuite(fleet_, inputs_, RealClock::Get(), req, stop_);
  }
  QualifyReport Run(const std::vector<std::string>& nodes, double timeout_s = 10) {
    return Run(Request(nodes, timeout_s));
  }

  // Jobs whose suites run at a tenth of their times (quick: ramp <= 0.4 s, measure 0.5 s).
  std::unique_ptr<QualifyJobs> FastJobs(metrics::Registry& registry) {
    QualifyJobs::Options o;
    o.time_scale = 0.1;
    return std::make_unique<QualifyJobs>(fleet_, inputs_, RealClock::Get(), registry, o);
  }

  // Runs `n` nodes whose bursts to and from `slow` move at `goodput` (0: lost), the rest at
  // 9.4 Gbit/s; expects `slow` alone to fail, its first reason containing `reason`.
  void CheckOnlySlowNodeFails(int n, const std::string& slow, double goodput,
                              const std::string& reason) {
    auto nodes = Nodes(n);
    fleet_.goodput_bps = [slow, goodput](const std::string& a, const std::string& b) {
      return a == slow || b == slow ? goodput : 9.4e9;
    };
    ExpectOnlyFails(Run(nodes), slow, reason);
  }

  // Exit 2: `bad` fails, its first reason containing `reason`; every other node passes.
  void ExpectOnlyFails(const QualifyReport& r, const std::string& bad, const std::string& reason) {
    EXPECT_EQ(r.exit_code, 2);
    const NodeResult& b = Node(r, bad);
    EXPECT_EQ(b.verdict, Verdict::kFail);
    ASSERT_FALSE(b.reasons.empty());
    EXPECT_THAT(b.reasons[0], HasSubstr(reason));
    for (const auto& x : r.nodes) {
      if (x.node != bad) EXPECT_EQ(x.verdict, Verdict::kPass) << x.node;
    }
  }

  const NodeResult& Node(const QualifyReport& r, const std::string& n) {
    for (const NodeResult& x : r.nodes) {
      if (x.node == n) return x;
    }
    throw std::runtime_error("no node " + n);
  }

  QualifyInputs inputs_;
  FakeFleet fleet_;
  std::atomic<bool> stop_{false};
};

TEST_F(SuiteTest, HealthySetPasses) {
  auto r = Run(Nodes(6));
  EXPECT_EQ(r.state, "done");
  EXPECT_EQ(r.exit_code, 0);
  for (const auto& n : r.nodes) EXPECT_EQ(n.verdict, Verdict::kPass) << n.node;
  EXPECT_TRUE(r.pairs.empty());
  ASSERT_GE(r.steps.size(), 4u);
  EXPECT_EQ(r.steps[2].name, "mesh");
  EXPECT_EQ(r.steps[2].state, "done");
  EXPECT_THAT(r.steps[2].note, HasSubstr("30 pairs"));
}

TEST_F(SuiteTest, BandwidthStepRunsTheRingInRounds) {
  auto r = Run(Nodes(6));
  EXPECT_EQ(r.exit_code, 0);
  ASSERT_GE(r.steps.size(), 4u);
  EXPECT_EQ(r.steps[3].name, "bandwidth");
  EXPECT_EQ(r.steps[3].state, "done");
  EXPECT_THAT(r.steps[3].note, HasSubstr("ring: 2 of 2 rounds, 6 bursts of 8 MiB"));
  EXPECT_EQ(fleet_.burst_rounds, 2);
  EXPECT_EQ(fleet_.bursts_in_flight_max, 1);  // no node in two bursts of one round
}

const StepResult& StepOf(const QualifyReport& r, const std::string& name) {
  for (const StepResult& s : r.steps) {
    if (s.name == name) return s;
  }
  throw std::runtime_error("no step " + name);
}

TEST_F(SuiteTest, CollectiveStepRunsOneAllReduceOverTheNodesUp) {
  auto nodes = Nodes(6);
  fleet_.agents["gpu6"] = {true, false, 90};
  auto r = Run(nodes);
  const StepResult& c = StepOf(r, "collective");
  EXPECT_EQ(c.state, "done");
  EXPECT_THAT(c.note, HasSubstr("Gloo all-reduce of 1 MiB x 5 over 5 nodes (job q1): busbw "
                                "1 Gbit/s"));
  EXPECT_EQ(fleet_.allreduce_members,
            (std::vector<std::string>{"gpu1", "gpu2", "gpu3", "gpu4", "gpu5"}));
  EXPECT_EQ(fleet_.allreduce_bytes, 1u << 20);
  EXPECT_FALSE(fleet_.allreduce_ended);
  for (const auto& n : r.nodes) {
    if (n.node != "gpu6") EXPECT_EQ(n.verdict, Verdict::kPass) << n.node;
  }
}

// A node an earlier step failed is left out of the group.
TEST_F(SuiteTest, NodesFailedEarlierAreLeftOutOfTheAllReduce) {
  auto nodes = Nodes(5);
  fleet_.goodput_bps = [](const std::string& a, const std::string& b) {
    return a == "gpu3" || b == "gpu3" ? 0.0 : 9.4e9;
  };
  auto r = Run(nodes);
  EXPECT_EQ(Node(r, "gpu3").verdict, Verdict::kFail);
  EXPECT_EQ(fleet_.allreduce_members, (std::vector<std::string>{"gpu1", "gpu2", "gpu4", "gpu5"}));
  EXPECT_THAT(StepOf(r, "collective").note,
              HasSubstr("over 4 nodes (job q1), 1 failed nodes left out"));
}

TEST_F(SuiteTest, FailedAllReduceFailsTheMembersItNames) {
  fleet_.collective =
      CollectiveOutcome{{{"gpu2", "gloo: rendezvous of rank 2 timed out"}}, {"gpu4"}, 0, 0};
  auto r = Run(Nodes(6));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(StepOf(r, "collective").note, HasSubstr("failed, 1 errors, 1 without an answer"));
  ASSERT_FALSE(Node(r, "gpu2").reasons.empty());
  EXPECT_THAT(Node(r, "gpu2").reasons.back(),
              HasSubstr("failed on gpu2: gloo: rendezvous of rank 2 timed out"));
  EXPECT_THAT(Node(r, "gpu4").reasons.back(), HasSubstr("gpu4 did not answer"));
  EXPECT_EQ(Node(r, "gpu4").verdict, Verdict::kFail);
  EXPECT_EQ(Node(r, "gpu1").verdict, Verdict::kPass);
}

TEST_F(SuiteTest, AllReduceWithoutAnOutcomeTimesTheGroupOut) {
  fleet_.collective = std::nullopt;
  auto r = Run(Nodes(4));
  EXPECT_EQ(r.state, "done");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(fleet_.allreduce_ended);
  EXPECT_THAT(StepOf(r, "collective").note, HasSubstr("timed out after"));
  for (const auto& n : r.nodes) {
    EXPECT_EQ(n.verdict, Verdict::kFail) << n.node;
    EXPECT_THAT(n.reasons.back(), HasSubstr("no outcome within 0.5 s (group timed out)"));
  }
}

TEST_F(SuiteTest, SlowAllReduceIsJudgedAgainstTheProfileAndTheFleet) {
  fleet_.collective = CollectiveOutcome{{}, {}, 1e6, 0};
  auto r = Run(Nodes(4));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(Node(r, "gpu1").reasons.back(),
              HasSubstr("busbw 1 Mbit/s of the set, below profile generic's fail limit"));
  fleet_.collective = CollectiveOutcome{{}, {}, 300e6, 1e9};
  r = Run(Nodes(4));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(StepOf(r, "collective").note, HasSubstr("fleet's last Gloo group: 1 Gbit/s"));
  for (const auto& n : r.nodes) {
    EXPECT_EQ(n.verdict, Verdict::kWarn) << n.node;
    EXPECT_THAT(n.reasons.back(), HasSubstr("3.3\xc3\x97 below the fleet's last Gloo group"));
  }
  fleet_.collective = CollectiveOutcome{{}, {}, 600e6, 1e9};
  EXPECT_EQ(Run(Nodes(4)).exit_code, 0);
}

TEST_F(SuiteTest, CollectiveStepIsSkippedWithoutAStageOrWithoutGloo) {
  fleet_.has_collective = false;
  auto r = Run(Nodes(4));
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(StepOf(r, "collective").state, "skipped");
  EXPECT_THAT(StepOf(r, "collective").note, HasSubstr("this aggregator runs no collective stage"));
  fleet_.has_collective = true;
  fleet_.collective = CollectiveOutcome{
      {{"gpu1", "unknown backend 'gloo'"}, {"gpu2", "unknown backend 'gloo'"}}, {}, 0, 0};
  r = Run(Nodes(2));
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(StepOf(r, "collective").state, "skipped");
  EXPECT_THAT(StepOf(r, "collective").note, HasSubstr("gpu1's agent has no Gloo backend"));
}

// Runs `n` nodes whose bursts to and from `slow` move at `goodput` (0: lost) and the rest at
// 9.4 Gbit/s; expects `slow` alone to fail, its first reason containing `reason`.
// A node slow both ways (its NIC) fails with its figure; its neighbours in the ring, slow toward
// it only, pass on their other burst.
TEST_F(SuiteTest, SlowNicFailsOnGoodputWithItsFigure) {
  CheckOnlySlowNodeFails(8, "gpu3", 1.5e9,
                         "goodput best of 2 bursts 1.5 Gbit/s, 0.16\xc3\x97 the set's median of "
                         "9.4 Gbit/s (fail at 0.20\xc3\x97");
}

// A node none of whose ring bursts get through (a dead or throttled link) fails outright; its
// neighbours, each with one good burst, pass.
TEST_F(SuiteTest, NodeWhoseBurstsAllFailFails) {
  CheckOnlySlowNodeFails(5, "gpu2", 0,
                         "goodput: all 2 of its bursts failed or did not complete within 2.0 s "
                         "(below 33.6 Mbit/s)");
}

// All pairs (--full): one slow path is a pair verdict with its figure; a lost burst fails its
// pair with the bound it implies.
TEST_F(SuiteTest, SlowPairAndLostBurstAreOnTheirPairs) {
  auto nodes = Nodes(6);
  fleet_.goodput_bps = [](const std::string& a, const std::string& b) {
    const auto is = [&](const char* x, const char* y) {
      return (a == x && b == y) || (a == y && b == x);
    };
    if (is("gpu1", "gpu2")) return 1.5e9;
    if (is("gpu4", "gpu5")) return 0.0;  // lost
    return 9.4e9;
  };
  SuiteRequest req = Request(nodes);
  req.suite = *FindSuite("full");
  req.suite.ramp_max_s = 1;
  req.suite.measure_s = 0.3;
  auto r = Run(req);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(fleet_.burst_rounds, 5);  // 15 pairs, 3 bursts a round
  EXPECT_EQ(fleet_.bursts_in_flight_max, 1);
  // Each unordered pair bursts once, in the direction the schedule picked.
  const auto either = [&](const std::string& a, const std::string& b) -> const PairResult* {
    for (const PairResult& p : r.pairs) {
      if ((p.src == a && p.dst == b) || (p.src == b && p.dst == a)) return &p;
    }
    return nullptr;
  };
  const PairResult* slow = either("gpu1", "gpu2");
  ASSERT_NE(slow, nullptr);
  EXPECT_EQ(slow->verdict, Verdict::kFail);
  EXPECT_THAT(slow->reasons[0], HasSubstr("goodput to " + slow->dst +
                                          " 1.5 Gbit/s, 0.16\xc3\x97 the set's median of 9.4 "
                                          "Gbit/s"));
  const PairResult* lost = either("gpu4", "gpu5");
  ASSERT_NE(lost, nullptr);
  EXPECT_EQ(lost->verdict, Verdict::kFail);
  EXPECT_THAT(lost->reasons[0], HasSubstr("did not complete within 5.0 s (goodput below 13.4 "
                                          "Mbit/s)"));
  for (const auto& n : r.nodes) EXPECT_EQ(n.verdict, Verdict::kPass) << n.node;
}

// Two leaves of four; cross-leaf paths uniformly at 2.4 ms where the fleet's history for them is
// 0.41 ms. The set is uniform (no outlier within it), so only the history can fail it.
TEST_F(SuiteTest, UniformlyBadSetFailsAgainstTheFleetHistory) {
  auto nodes = Nodes(8);
  const auto leaf = [](const std::string& n) { return n < "gpu5" ? 0 : 1; };
  fleet_.path_class = [&](const std::string& a, const std::string& b) {
    return std::string(leaf(a) == leaf(b) ? "intra_leaf" : "inter_leaf");
  };
  fleet_.rtt_ns = [&](const std::string& a, const std::string& b) {
    return leaf(a) == leaf(b) ? int64_t{300'000} : int64_t{2'400'000};
  };
  auto healthy_history = Run(nodes);  // no baseline yet: set-relative and profile only
  EXPECT_EQ(healthy_history.exit_code, 0);
  EXPECT_EQ(healthy_history.path_classes.count("inter_leaf"), 1u);

  SuiteRequest req = Request(nodes);
  req.fleet_baseline = {{"inter_leaf", {0.00041, 20}}, {"intra_leaf", {0.0003, 20}}};
  auto r = Run(req);
  EXPECT_EQ(r.exit_code, 2);
  for (const auto& n : r.nodes) {
    EXPECT_EQ(n.verdict, Verdict::kFail) << n.node;
    ASSERT_EQ(n.reasons.size(), 1u) << n.node;
    EXPECT_THAT(n.reasons[0], HasSubstr("RTT p99 to 4 cross-leaf peers 2.4"));
    EXPECT_THAT(n.reasons[0], HasSubstr("the fleet's history for cross-leaf paths (0.41 ms, the "
                                        "median of 20 runs; fail at 3.0\xc3\x97)"));
  }
  // Nothing of a failed set joins the history.
  EXPECT_TRUE(r.path_classes.empty());
}

// One slow host on a leaf of three: against the history it fails, while its two leaf neighbours,
// slow toward it only, are held to the lower median of their same-leaf peers and pass.
TEST_F(SuiteTest, OneBadPeerDoesNotFlagItsNeighboursAgainstTheHistory) {
  auto nodes = Nodes(6);
  const auto leaf = [](const std::string& n) { return n < "gpu4" ? 0 : 1; };
  fleet_.path_class = [&](const std::string& a, const std::string& b) {
    return std::string(leaf(a) == leaf(b) ? "intra_leaf" : "inter_leaf");
  };
  fleet_.rtt_ns = [](const std::string& a, const std::string& b) {
    return a == "gpu2" || b == "gpu2" ? int64_t{2'400'000} : int64_t{300'000};
  };
  SuiteRequest req = Request(nodes);
  req.fleet_baseline = {{"inter_leaf", {0.0003, 20}}, {"intra_leaf", {0.0003, 20}}};
  auto r = Run(req);
  EXPECT_EQ(Node(r, "gpu2").verdict, Verdict::kFail);
  for (const char* n : {"gpu1", "gpu3", "gpu4", "gpu5", "gpu6"}) {
    EXPECT_EQ(Node(r, n).verdict, Verdict::kPass) << n << ": " << Node(r, n).reasons.at(0);
  }
}

TEST_F(SuiteTest, SlowHostFailsWithItsFigureAndItsPairsAreExplainedAway) {
  auto nodes = Nodes(8);
  fleet_.rtt_ns = [](const std::string& a, const std::string& b) {
    return a == "gpu5" || b == "gpu5" ? int64_t{2'400'000} : int64_t{300'000};
  };
  auto r = Run(nodes);
  ExpectOnlyFails(r, "gpu5", "RTT p99 to 7 peers 2.4");
  EXPECT_THAT(Node(r, "gpu5").reasons[0], HasSubstr("the set's median of 0.3"));
  EXPECT_TRUE(r.pairs.empty()) << r.pairs.front().src << "->" << r.pairs.front().dst;
}

TEST_F(SuiteTest, LossyPairIsAPairVerdictNotANodeOne) {
  auto nodes = Nodes(6);
  fleet_.loss_every = [](const std::string& a, const std::string& b) {
    return (a == "gpu1" && b == "gpu2") || (a == "gpu2" && b == "gpu1") ? 4 : 0;  // ~25%
  };
  auto r = Run(nodes);
  EXPECT_EQ(r.exit_code, 2);
  ASSERT_EQ(r.pairs.size(), 1u);
  EXPECT_EQ(r.pairs[0].src, "gpu1");
  EXPECT_EQ(r.pairs[0].dst, "gpu2");
  EXPECT_THAT(r.pairs[0].reasons[0], HasSubstr("loss"));
  EXPECT_THAT(r.pairs[0].reasons[0], HasSubstr("while the set's median is 0%"));
}

TEST_F(SuiteTest, DownAndUnknownAgentsFailWithThatReason) {
  auto nodes = Nodes(4);
  fleet_.agents["gpu3"] = {true, false, 42};
  nodes.push_back("ghost");
  auto r = Run(nodes);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(Node(r, "gpu3").verdict, Verdict::kFail);
  EXPECT_THAT(Node(r, "gpu3").reasons[0], HasSubstr("agent down: last heard from 42.0 s ago"));
  EXPECT_THAT(Node(r, "ghost").reasons[0], HasSubstr("agent unknown"));
  EXPECT_EQ(Node(r, "gpu1").verdict, Verdict::kPass);
}

TEST_F(SuiteTest, LocalChecksAndFindingsCount) {
  auto nodes = Nodes(4);
  analysis::TrackedFinding pcie;
  pcie.element = "node:gpu2";
  pcie.finding.kind = "pcie_downtrained";
  pcie.finding.severity = Severity::kCritical;
  pcie.finding.location.node = "gpu2";
  pcie.finding.summary = "GPU1 trained at x8 of x16";
  analysis::TrackedFinding host = pcie;
  host.finding.kind = "host_network";
  host.finding.severity = Severity::kWarning;
  host.finding.location.node = "gpu4";
  host.finding.summary = "gpu4 is slow toward all its peers";
  fleet_.findings = {pcie, host};
  auto r = Run(nodes);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(Node(r, "gpu2").reasons[0], HasSubstr("local check pcie_downtrained (critical)"));
  EXPECT_EQ(Node(r, "gpu4").verdict, Verdict::kWarn);
  EXPECT_THAT(Node(r, "gpu4").reasons[0], HasSubstr("active finding host_network"));
}

TEST_F(SuiteTest, TimeoutShorterThanTheSuiteIsAPartialReport) {
  auto nodes = Nodes(4);
  fleet_.agents["gpu4"] = {true, false, 30};
  auto r = Run(nodes, /*timeout_s=*/0.3);
  EXPECT_EQ(r.state, "timeout");
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_THAT(r.note, HasSubstr("the timeout came during step mesh"));
  EXPECT_EQ(Node(r, "gpu4").verdict, Verdict::kFail);  // judged before the timeout
  EXPECT_EQ(Node(r, "gpu1").verdict, Verdict::kUnknown);
  EXPECT_EQ(r.steps.back().state, "skipped");
}

TEST_F(SuiteTest, OverlappingRunsQueueAndDisjointRunsDoNot) {
  auto nodes = Nodes(6);
  metrics::Registry registry;
  QualifyJobs::Options o;
  o.time_scale = 0.1;  // quick: ramp <= 0.4 s, measure 0.5 s
  QualifyJobs jobs(fleet_, inputs_, RealClock::Get(), registry, o);
  const QualifyJobRequest a{{"gpu1", "gpu2", "gpu3"}, "", "quick", 20, ""};
  const QualifyJobRequest b{{"gpu3", "gpu4"}, "", "quick", 20, ""};
  auto [ra, rb] = RunBoth(jobs, a, b);
  ASSERT_TRUE(ra.ok() && rb.ok());
  EXPECT_EQ(ra->exit_code, 0);
  EXPECT_EQ(rb->exit_code, 0);
  // b started only after a finished.
  EXPECT_GE(rb->started_wall_ns, ra->finished_wall_ns);
  EXPECT_GT(rb->queued_s, 0.3);
  EXPECT_EQ(jobs.Recent().size(), 2u);
  EXPECT_EQ(jobs.Recent().front().id, rb->id);
  // Refusals.
  EXPECT_FALSE(jobs.Run({{}, "", "", 5, ""}).ok());
  EXPECT_THAT(jobs.Run({{"a"}, "nope", "", 5, ""}).status().message(), HasSubstr("known: generic"));
  EXPECT_THAT(jobs.Run({{"a b"}, "", "", 5, ""}).status().message(), HasSubstr("not valid"));
  EXPECT_FALSE(jobs.Run({{"a"}, "", "slow", 5, ""}).ok());
  const std::string text = registry.RenderToString();
  EXPECT_THAT(text, HasSubstr("fabricwatch_qualification_result{node=\"gpu3\",suite=\"quick\"} 0"));
  EXPECT_THAT(text, HasSubstr("fabricwatch_qualify_refused_total{reason=\"bad_request\"} 4"));
}

TEST_F(SuiteTest, DisjointRunsOverlapInTime) {
  auto nodes = Nodes(4);
  metrics::Registry registry;
  auto jobs = FastJobs(registry);
  StatusOr<QualifyReport> ra = Status::Internal("unset"), rb = Status::Internal("unset");
  std::thread ta([&] { ra = jobs->Run({{"gpu1", "gpu2"}, "", "", 20, ""}); });
  std::thread tb([&] { rb = jobs->Run({{"gpu3", "gpu4"}, "", "", 20, ""}); });
  ta.join();
  tb.join();
  ASSERT_TRUE(ra.ok() && rb.ok());
  EXPECT_LT(rb->started_wall_ns, ra->finished_wall_ns);
  EXPECT_LT(ra->started_wall_ns, rb->finished_wall_ns);
}

// Every node's Slurm prolog asks for the whole set under one job id: one run answers them all,
// also a request that comes after it finished; another job or set runs on its own.
TEST_F(SuiteTest, RequestsOfOneJobShareOneRun) {
  auto nodes = Nodes(3);
  metrics::Registry registry;
  QualifyJobs::Options o;
  o.time_scale = 0.1;
  QualifyJobs jobs(fleet_, inputs_, RealClock::Get(), registry, o);
  QualifyJobRequest req{nodes, "", "quick", 20, "4711"};
  auto [ra, rb] = RunBoth(jobs, req, req);
  ASSERT_TRUE(ra.ok() && rb.ok());
  EXPECT_EQ(ra->id, rb->id);
  EXPECT_EQ(rb->job, "4711");
  EXPECT_EQ(fleet_.meshes_started.load(), 1);
  auto late = jobs.Run(req);
  ASSERT_TRUE(late.ok());
  EXPECT_EQ(late->id, ra->id);
  req.job = "4712";
  auto other = jobs.Run(req);
  ASSERT_TRUE(other.ok());
  EXPECT_NE(other->id, ra->id);
  EXPECT_EQ(jobs.Recent().size(), 2u);
  EXPECT_FALSE(jobs.Run({nodes, "", "", 5, "bad job"}).ok());
}

ReportQuery ByNode(std::string node) {
  ReportQuery q;
  q.node = std::move(node);
  return q;
}

ReportQuery ByJob(std::string job) {
  ReportQuery q;
  q.job = std::move(job);
  return q;
}

// Reports go into the findings history: a new QualifyJobs over the same state directory (an
// aggregator restart) still lists them, by node and by job.
TEST_F(SuiteTest, ReportsSurviveARestartThroughTheHistory) {
  auto nodes = Nodes(3);
  ::fw::testing::TempDir dir;
  std::string id;
  {
    metrics::Registry registry;
    QualificationStore store(dir.path());
    ASSERT_TRUE(store.Open().ok());
    QualifyJobs::Options o;
    o.time_scale = 0.1;
    QualifyJobs jobs(fleet_, inputs_, RealClock::Get(), registry, o, &store);
    auto r = jobs.Run({nodes, "", "", 20, "77"});
    ASSERT_TRUE(r.ok());
    id = r->id;
  }
  metrics::Registry registry;
  QualificationStore store(dir.path());
  ASSERT_TRUE(store.Open().ok());
  QualifyJobs jobs(fleet_, inputs_, RealClock::Get(), registry, {}, &store);
  EXPECT_TRUE(jobs.Recent().empty());
  const nlohmann::json listed = jobs.Find(ByNode("gpu2"));
  ASSERT_EQ(listed.size(), 1u);
  EXPECT_EQ(listed[0]["id"], id);
  EXPECT_EQ(listed[0]["job"], "77");
  EXPECT_EQ(listed[0]["state"], "done");
  EXPECT_EQ(jobs.Find(ByJob("78")).size(), 0u);
  // The run's healthy median joined the fleet history and came back with the store.
  EXPECT_EQ(listed[0]["path_classes"]["unknown"]["pairs"], 3);
}

// Runs feed the fleet history; after kMinRuns of them new runs are held to it.
TEST_F(SuiteTest, FinishedRunsBuildTheFleetHistory) {
  auto nodes = Nodes(3);
  metrics::Registry registry;
  auto jobs = FastJobs(registry);
  for (size_t i = 0; i < FleetHistory::kMinRuns; ++i) {
    ASSERT_TRUE(jobs->Run({nodes, "", "", 20, ""}).ok());
  }
  auto b = jobs->history().Baseline("unknown");
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(b->runs, FleetHistory::kMinRuns);
  EXPECT_NEAR(b->rtt_p99_s, 0.00033, 0.00005);
}

// POST /api/v1/qualify probes the fabric: with users in the web config it needs their
// credentials (401 and counted without them); the report list stays readable.
TEST_F(SuiteTest, QualifyEndpointRequiresAuthenticationWhenTheWebConfigHasUsers) {
  auto nodes = Nodes(2);
  metrics::Registry registry;
  auto jobs = FastJobs(registry);
  http::WebConfig web;
  // SHA-256-crypt of "correct horse" (openssl passwd -5 -salt fwtestsalt).
  web.users["ops"] = "$5$fwtestsalt$PiwAEY5vHgAJc2MTOh1lcxjLubLfiKihC5CwF6d3dH5";
  auto server = http::Server::Start("127.0.0.1:0", 4, &web);
  ASSERT_TRUE(server.ok()) << server.status().message();
  (*server)->HandleMetrics(registry);
  InstallQualifyHandlers(**server, *jobs);
  const std::string addr = "127.0.0.1:" + std::to_string((*server)->port());
  const std::string body = R"({"nodes":["gpu1","gpu2"],"timeout_s":20})";

  auto anonymous = http::Fetch(addr, "POST", "/api/v1/qualify", body);
  ASSERT_TRUE(anonymous.ok());
  EXPECT_EQ(anonymous->status, 401);
  http::WebClientOptions wrong;
  wrong.headers = {"Authorization: " + http::BasicAuthorization("ops", "wrong")};
  EXPECT_EQ(http::FetchWeb(addr, "POST", "/api/v1/qualify", wrong, 5000, body)->status, 401);
  EXPECT_EQ(fleet_.meshes_started.load(), 0);  // nothing was probed for them

  http::WebClientOptions ops;
  ops.headers = {"Authorization: " + http::BasicAuthorization("ops", "correct horse")};
  auto ran = http::FetchWeb(addr, "POST", "/api/v1/qualify", ops, 20000, body);
  ASSERT_TRUE(ran.ok()) << ran.status().message();
  EXPECT_EQ(ran->status, 200) << ran->body;
  EXPECT_EQ(nlohmann::json::parse(ran->body)["state"], "done");
  auto listed = http::Fetch(addr, "GET", "/api/v1/qualifications");
  ASSERT_TRUE(listed.ok());
  EXPECT_EQ(listed->status, 200);
  EXPECT_EQ(nlohmann::json::parse(listed->body).size(), 1u);
  EXPECT_THAT(registry.RenderToString(),
              HasSubstr("fabricwatch_http_rejected_requests_total{code=\"401\"} 2"));
}

}  // namespace
}  // namespace fw::qualify

namespace fw::qualify {
namespace {

// `n` results at `base_ns` and `spikes` more at `spike_ns` into `h` (and the whole window).
void Fill(PairSamples& s, int half, int n, int64_t base_ns, int spikes, int64_t spike_ns) {
  for (int i = 0; i < n + spikes; ++i) {
    const int64_t v = i < n ? base_ns + (i % 7) * 5'000 : spike_ns;
    ++s.probes;
    s.rtt.Record(v);
    s.halves[half].Record(v);
  }
}

// Noise: a healthy pair (0.3 ms) whose host stalled three times in one half of the window (5 ms
// spikes) has a whole-window p99 of 5 ms but a sustained one of 0.3 ms.
TEST(SustainedRttP99, StallsInOneHalfAreNoise) {
  PairSamples s;
  Fill(s, 0, 125, 300'000, 3, 5'000'000);
  Fill(s, 1, 125, 300'000, 0, 0);
  EXPECT_GT(s.rtt.QuantileSeconds(0.99), 4e-3);
  EXPECT_LT(SustainedRttP99(s), 0.4e-3);
}

// A fault of the path (2% of probes queue 5 ms throughout) shows in both halves.
TEST(SustainedRttP99, TailThroughBothHalvesIsTheFault) {
  PairSamples s;
  Fill(s, 0, 125, 300'000, 3, 5'000'000);
  Fill(s, 1, 125, 300'000, 3, 5'000'000);
  EXPECT_GT(SustainedRttP99(s), 4e-3);
  // A shaped link: every probe queues.
  PairSamples q;
  Fill(q, 0, 125, 40'000'000, 0, 0);
  Fill(q, 1, 125, 40'000'000, 0, 0);
  EXPECT_NEAR(SustainedRttP99(q), 40e-3, 2e-3);
}

// Few results (40 a half, where a p99 is each half's worst): one stall still raises one half
// only. Below kMinHalfSamples a half, the whole window's p99 (the split is not made lenient).
TEST(SustainedRttP99, FewSamples) {
  PairSamples s;
  Fill(s, 0, 40, 300'000, 1, 5'000'000);
  Fill(s, 1, 40, 300'000, 0, 0);
  EXPECT_LT(SustainedRttP99(s), 0.4e-3);
  PairSamples few;
  Fill(few, 0, 10, 300'000, 1, 5'000'000);
  Fill(few, 1, 10, 300'000, 0, 0);
  EXPECT_GT(SustainedRttP99(few), 4e-3);
  EXPECT_TRUE(std::isnan(SustainedRttP99(PairSamples{})));
}

}  // namespace
}  // namespace fw::qualify

namespace fw::qualify {
namespace {

// Step 4 on a set where 6 of 8 nodes have RDMA: the RDMA UD mesh and RC rounds run among those 6,
// one RC burst per NIC at a time and never beside a TCP burst; the 2 others are skipped by name.
TEST_F(SuiteTest, RdmaStepRunsAmongTheNodesWithRdmaAndNamesTheOthers) {
  auto nodes = Nodes(8);
  fleet_.rdma_nodes = {"gpu1", "gpu2", "gpu3", "gpu4", "gpu5", "gpu6"};
  auto r = Run(nodes);
  EXPECT_EQ(r.exit_code, 0);
  const StepResult& s = StepOf(r, "rdma");
  EXPECT_EQ(s.state, "done");
  EXPECT_THAT(s.note, HasSubstr("30 RDMA UD pairs"));
  EXPECT_THAT(s.note, HasSubstr("RDMA RC ring: 2 of 2 rounds, 6 bursts"));
  EXPECT_THAT(s.note, HasSubstr("rdma unavailable on gpu7 (unavailable: no RDMA devices); rdma "
                                "unavailable on gpu8 (unavailable: no RDMA devices): skipped for "
                                "them"));
  EXPECT_EQ(fleet_.rc_rounds, 2);
  EXPECT_EQ(fleet_.rc_in_flight_max, 1);
  EXPECT_EQ(fleet_.ip_bursts_during_rc, 0);
  for (const auto& n : r.nodes) EXPECT_EQ(n.verdict, Verdict::kPass) << n.node;
  // The RDMA network RTTs keep their own history class, apart from the UDP ones.
  ASSERT_TRUE(r.path_classes.contains("rdma_unknown"));
  EXPECT_LT(r.path_classes.at("rdma_unknown").rtt_p99_s, 10e-6);
  EXPECT_GT(r.path_classes.at("unknown").rtt_p99_s, 250e-6);
}

TEST_F(SuiteTest, RdmaStepIsSkippedWithTheReasonWhenNoNodeHasRdma) {
  auto r = Run(Nodes(3));
  EXPECT_EQ(r.exit_code, 0);
  const StepResult& s = StepOf(r, "rdma");
  EXPECT_EQ(s.state, "skipped");
  EXPECT_THAT(s.note, HasSubstr("rdma unavailable on gpu1 (unavailable: no RDMA devices)"));
  EXPECT_THAT(s.note, HasSubstr("fewer than 2 nodes up with RDMA"));
  EXPECT_EQ(fleet_.rc_rounds, 0);
}

// A node whose RDMA UD network RTT is high toward every peer fails on it, with the figure, while
// its UDP RTT is healthy (the host stack's path does not cross the RDMA NIC's queues).
TEST_F(SuiteTest, RdmaUdRttOutlierFailsItsNode) {
  auto nodes = Nodes(8);
  fleet_.rdma_nodes = {nodes.begin(), nodes.end()};
  fleet_.rdma_rtt_ns = [](const std::string& a, const std::string& b) {
    return a == "gpu5" || b == "gpu5" ? int64_t{3'000'000} : int64_t{5'000};
  };
  ExpectOnlyFails(Run(nodes), "gpu5", "RDMA UD RTT p99 to 7 peers 3");
}

// RC goodput: a slow NIC is named against the set's median; a pair whose burst gave no result
// warns with the reason.
TEST_F(SuiteTest, RdmaRcSlowNodeFailsAndAMissingBurstWarns) {
  auto nodes = Nodes(6);
  fleet_.rdma_nodes = {nodes.begin(), nodes.end()};
  fleet_.rc_goodput_bps = [](const std::string& a, const std::string& b) {
    if (a == "gpu3" || b == "gpu3") return 5e9;
    if (a == "gpu5" && b == "gpu6") return 0.0;
    return 90e9;
  };
  SuiteRequest req = Request(nodes);
  req.suite.bw_timeout_s = 0.3;  // the round with the missing result waits 0.6 s
  req.suite.bw_round_slack_s = 0.3;
  auto r = Run(req);
  EXPECT_EQ(r.exit_code, 2);
  const NodeResult& bad = Node(r, "gpu3");
  EXPECT_EQ(bad.verdict, Verdict::kFail);
  ASSERT_FALSE(bad.reasons.empty());
  EXPECT_THAT(bad.reasons[0], HasSubstr("RDMA RC goodput"));
  bool warned = false;
  for (const PairResult& p : r.pairs) {
    if (p.src == "gpu5" && p.dst == "gpu6") {
      warned = true;
      EXPECT_EQ(p.verdict, Verdict::kWarn);
      EXPECT_THAT(p.reasons[0], HasSubstr("no RDMA RC write result from gpu5 to gpu6"));
    }
  }
  EXPECT_TRUE(warned);
}

}  // namespace
}  // namespace fw::qualify

namespace fw::qualify {
namespace {

// The mesh waits for the fleet's scheduled collective job on the set to end, with the schedule
// paused on the set for the run and resumed after, except where it was paused before.
TEST_F(SuiteTest, MeshWaitsForScheduledCollectivesAndPausesThemForTheRun) {
  auto nodes = Nodes(4);
  fleet_.collective_busy_polls = 4;  // about 0.3 s at the suite's 100 ms polls
  fleet_.already_paused = {"gpu2"};  // e.g. by the Slurm prolog
  auto r = Run(nodes);
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_THAT(StepOf(r, "mesh").note, HasSubstr("for a scheduled collective job to end; 12 pairs"));
  EXPECT_EQ(fleet_.paused, (std::vector<std::string>{"gpu1", "gpu3", "gpu4"}));
  EXPECT_EQ(fleet_.resumed, fleet_.paused);
}

}  // namespace
}  // namespace fw::qualify
