// TraceRunner with a fake tracer that keeps the real tracer's order and budget (TraceScheduler)
// and "traces" instantly: the plan's flows are traced within the budget, each trace request once,
// stale flows again after the refresh period, and the traces reach the uplink as the wire says.
#include "daemon/agent/trace_runner.h"

#include <gtest/gtest.h>

#include <map>

namespace fw::agent {
namespace {
namespace v1 = fabricwatch::v1;

constexpr double kFraction = 0.02;
constexpr uint8_t kMaxTtl = 8;
constexpr int64_t kSecond = 1'000'000'000;

class FakeTracer final : public Tracer {
 public:
  // Shared with the test, which keeps a pointer after handing the tracer over.
  struct Log {
    std::vector<net::TraceFlow> traced;  // in order
    std::vector<std::pair<net::TraceFlow, bool>> changed;
    uint64_t probe_packets = 0;
  };
  explicit FakeTracer(Log& log) : log_(log), scheduler_(kFraction, kMaxTtl) {}
  void SetFlows(std::vector<net::TraceFlow> flows) override { scheduler_.SetFlows(flows); }
  void Changed(const net::TraceFlow& flow, bool suspect) override {
    log_.changed.emplace_back(flow, suspect);
    scheduler_.Changed(flow, suspect);
  }
  void AddProbePackets(uint64_t n) override {
    log_.probe_packets += n;
    scheduler_.AddProbePackets(n);
  }
  std::vector<net::TracedPath> TakeTraces() override {
    std::vector<net::TracedPath> out;
    while (auto f = scheduler_.Next()) {
      net::TracedPath p;
      p.flow = *f;
      p.hops = {"198.19.0.1", "", "198.19.64.2"};  // leaf, a silent hop, spine
      p.hop_rtt_ns = {20'000, 0, 45'000};
      p.reached_peer = true;
      p.finished_ns = now_ns;
      log_.traced.push_back(*f);
      out.push_back(std::move(p));
    }
    return out;
  }
  int64_t now_ns = 0;

 private:
  Log& log_;
  net::TraceScheduler scheduler_;
};

v1::ProbePlan Plan(int peers, int flows, double refresh_s) {
  v1::ProbePlan p;
  for (int i = 0; i < peers; ++i) {
    v1::PlannedPeer* pp = p.add_peers();
    pp->set_node("n" + std::to_string(i));
    pp->set_address("198.18.1." + std::to_string(i + 1));
    pp->set_port(9753);
    pp->set_transport(v1::TRANSPORT_UDP);
    for (int j = 0; j < flows; ++j) pp->add_src_ports(static_cast<uint32_t>(j));
  }
  v1::PlannedPeer* tcp = p.add_peers();  // not traced
  tcp->set_node("t");
  tcp->set_address("198.18.9.9");
  tcp->set_port(9753);
  tcp->set_transport(v1::TRANSPORT_TCP_CONNECT);
  tcp->add_src_ports(0);
  p.set_trace_refresh_s(refresh_s);
  return p;
}

void Request(v1::ProbePlan& p, const std::string& peer, uint64_t id) {
  v1::TraceRequest* r = p.add_trace_requests();
  r->set_peer(peer);
  r->set_id(id);
}

constexpr uint16_t kResponderPort = 9753;

class TraceRunnerTest : public ::testing::Test {
 protected:
  TraceRunnerTest() {
    auto t = std::make_unique<FakeTracer>(log_);
    tracer_ = t.get();
    runner_ = std::make_unique<TraceRunner>(
        std::move(t), "198.18.0.1", [this](v1::AgentMessage m) { sent_.push_back(m); },
        kResponderPort);
  }
  // One second of probing: `packets` probe packets sent, and `answered_` answered.
  void Second(uint64_t packets) {
    now_ += kSecond;
    tracer_->now_ns = now_;
    runner_->OnAnswered(answered_, now_);
    runner_->Pump(packets, ports_, now_, 1'700'000'000 * kSecond + now_);
  }
  // The traces sent so far, echoes or not.
  std::vector<v1::PathTrace> SentTraces(bool echo) const {
    std::vector<v1::PathTrace> out;
    for (const v1::AgentMessage& m : sent_) {
      for (const v1::PathTrace& t : m.path_traces().traces()) {
        if (t.echo() == echo) out.push_back(t);
      }
    }
    return out;
  }
  size_t Traced(const std::string& peer) const {
    size_t n = 0;
    for (const auto& f : log_.traced) n += f.peer == peer;
    return n;
  }

  FakeTracer::Log log_;
  FakeTracer* tracer_ = nullptr;
  std::unique_ptr<TraceRunner> runner_;
  std::vector<v1::AgentMessage> sent_;
  std::vector<uint16_t> ports_ = {40000, 40001, 40002, 40003};
  std::vector<net::AnsweredUdpFlow> answered_;  // what the responder answers each second
  int64_t now_ = 0;
};

TEST_F(TraceRunnerTest, TracesEveryPlannedUdpFlowWithinTheBudget) {
  runner_->OnPlan(Plan(8, 4, 0));
  for (int i = 0; i < 200; ++i) Second(100);  // 100 probes/s: 2 trace packets/s of budget
  EXPECT_EQ(log_.traced.size(), 32u);         // every UDP flow once, none of the TCP peer
  EXPECT_EQ(Traced("t"), 0u);
  // Trace packets never beyond the budget: kFraction of the probes, plus one trace to start.
  for (int i = 0; i < 100; ++i) Second(100);
  EXPECT_LE(static_cast<double>(log_.traced.size() * kMaxTtl),
            kFraction * static_cast<double>(log_.probe_packets) + kMaxTtl);
}

TEST_F(TraceRunnerTest, BudgetHoldsTracesBackWhenFewProbesAreSent) {
  runner_->OnPlan(Plan(8, 4, 0));
  for (int i = 0; i < 20; ++i) Second(100);  // 2,000 probes: 40 packets, 5 traces at most
  EXPECT_LE(log_.traced.size(), 6u);
  EXPECT_GE(log_.traced.size(), 4u);
}

TEST_F(TraceRunnerTest, EachRequestIsTracedOnceAndAheadOfTheOthers) {
  runner_->OnPlan(Plan(8, 4, 0));
  Second(0);  // flows known; only the starting credit
  v1::ProbePlan p = Plan(8, 4, 0);
  Request(p, "n5", 7);
  runner_->OnPlan(p);
  log_.traced.clear();
  for (int i = 0; i < 60; ++i) Second(100);
  ASSERT_GE(log_.traced.size(), 4u);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(log_.traced[static_cast<size_t>(i)].peer, "n5") << i;
  EXPECT_EQ(Traced("n5"), 4u);  // the request, once; no longer queued as new flows
  // The same request in the next plan asks nothing more; a new id asks again.
  runner_->OnPlan(p);
  for (int i = 0; i < 60; ++i) Second(100);
  EXPECT_EQ(Traced("n5"), 4u);
  v1::ProbePlan q = Plan(8, 4, 0);
  Request(q, "n5", 8);
  runner_->OnPlan(q);
  for (int i = 0; i < 60; ++i) Second(100);
  EXPECT_EQ(Traced("n5"), 8u);
  const TraceRunnerStats s = runner_->stats();
  EXPECT_EQ(s.requests, 2u);
  EXPECT_EQ(s.requested_flows, 8u);
}

TEST_F(TraceRunnerTest, RequestsWaitForTheProberToBindItsFlows) {
  ports_.clear();
  v1::ProbePlan p = Plan(2, 2, 0);
  Request(p, "n1", 1);
  Request(p, "nobody", 2);
  runner_->OnPlan(p);
  Second(1000);
  EXPECT_TRUE(log_.changed.empty());
  ports_ = {40000, 40001};
  Second(1000);
  ASSERT_EQ(log_.changed.size(), 2u);
  EXPECT_TRUE(log_.changed[0].second);               // as a suspect
  EXPECT_EQ(runner_->stats().requests_dropped, 1u);  // "nobody" is no planned peer
}

TEST_F(TraceRunnerTest, StaleFlowsAreTracedAgainAfterTheRefreshPeriod) {
  runner_->OnPlan(Plan(2, 2, 30));
  for (int i = 0; i < 25; ++i) Second(1000);
  EXPECT_EQ(log_.traced.size(), 4u);
  for (int i = 0; i < 30; ++i) Second(1000);  // to t = 55 s: one refresh of each flow
  EXPECT_EQ(log_.traced.size(), 8u);
  EXPECT_EQ(runner_->stats().refreshes, 4u);
}

TEST_F(TraceRunnerTest, TracesReachTheUplinkAsTheWireSaysThem) {
  runner_->OnPlan(Plan(1, 1, 0));
  Second(0);
  ASSERT_EQ(sent_.size(), 1u);
  ASSERT_TRUE(sent_[0].has_path_traces());
  ASSERT_EQ(sent_[0].path_traces().traces_size(), 1);
  const v1::PathTrace& t = sent_[0].path_traces().traces(0);
  EXPECT_EQ(t.src_address(), "198.18.0.1");
  EXPECT_EQ(t.dst_address(), "198.18.1.1");
  EXPECT_EQ(t.src_port(), 40000u);
  EXPECT_EQ(t.dst_port(), 9753u);
  EXPECT_EQ(t.transport(), v1::TRANSPORT_UDP);
  EXPECT_EQ(t.dst_node(), "n0");
  EXPECT_EQ(t.status(), v1::TRACE_STATUS_REACHED_PEER);
  EXPECT_EQ(t.finished_unix_ns(), 1'700'000'000 * kSecond + now_);
  ASSERT_EQ(t.hops_size(), 2);  // the silent hop is left out
  EXPECT_EQ(t.hops(0).ttl(), 1u);
  EXPECT_EQ(t.hops(0).address(), "198.19.0.1");
  EXPECT_EQ(t.hops(1).ttl(), 3u);
  EXPECT_EQ(t.hops(1).address(), "198.19.64.2");
  EXPECT_EQ(t.hops(0).rtt_ns(), 20'000u);
  EXPECT_EQ(t.hops(1).rtt_ns(), 45'000u);
}

// 198.18.1.1 is planned peer n0 (Plan); 198.18.7.7 probes this node but is no planned peer.
constexpr uint32_t kN0 = 0xc6120101, kStranger = 0xc6120707;

TEST_F(TraceRunnerTest, TheEchoOfEachAnsweredFlowIsTracedFromTheResponderPort) {
  runner_->OnPlan(Plan(1, 1, 0));
  answered_ = {{kN0, 41000}, {kStranger, 42000}, {kN0, 41000}};
  for (int i = 0; i < 30; ++i) Second(1000);
  const std::vector<v1::PathTrace> echoes = SentTraces(true);
  ASSERT_EQ(echoes.size(), 2u);  // each answered flow once
  std::map<uint32_t, v1::PathTrace> by_port;
  for (const v1::PathTrace& t : echoes) by_port[t.dst_port()] = t;
  ASSERT_TRUE(by_port.contains(41000) && by_port.contains(42000));
  const v1::PathTrace& e = by_port[41000];
  EXPECT_EQ(e.src_port(), kResponderPort);  // the echo's 5-tuple: responder port -> prober port
  EXPECT_EQ(e.src_address(), "198.18.0.1");
  EXPECT_EQ(e.dst_address(), "198.18.1.1");
  EXPECT_EQ(e.dst_node(), "n0");  // the prober, named from the plan
  EXPECT_EQ(e.transport(), v1::TRANSPORT_UDP);
  EXPECT_EQ(by_port[42000].dst_address(), "198.18.7.7");
  EXPECT_EQ(by_port[42000].dst_node(), "");  // unknown here: the aggregator names it by address
  // The planned flow is traced as before, not as an echo.
  ASSERT_EQ(SentTraces(false).size(), 1u);
  EXPECT_EQ(SentTraces(false)[0].src_port(), 40000u);
  const TraceRunnerStats s = runner_->stats();
  EXPECT_EQ(s.echo_flows, 2u);
  EXPECT_EQ(s.echo_traces_sent, 2u);
  EXPECT_EQ(s.traces_sent, 3u);
}

TEST_F(TraceRunnerTest, EchoesShareTheBudgetWithThePlannedFlows) {
  runner_->OnPlan(Plan(8, 4, 0));
  for (uint16_t p = 0; p < 16; ++p)
    answered_.push_back({kStranger, static_cast<uint16_t>(50000 + p)});
  for (int i = 0; i < 20; ++i) Second(100);  // 2,000 probes: 40 packets, 5 traces at most
  EXPECT_LE(log_.traced.size(), 6u);
  for (int i = 0; i < 400; ++i) Second(100);
  EXPECT_EQ(log_.traced.size(), 48u);  // 32 planned flows and 16 echoes, each once
  EXPECT_LE(static_cast<double>(log_.traced.size() * kMaxTtl),
            kFraction * static_cast<double>(log_.probe_packets) + kMaxTtl);
}

TEST_F(TraceRunnerTest, EchoesAreTracedAgainOnRefreshAndOnARequestNamingTheProber) {
  runner_->OnPlan(Plan(2, 1, 30));
  answered_ = {{kN0, 41000}, {kStranger, 42000}};
  for (int i = 0; i < 25; ++i) Second(1000);
  EXPECT_EQ(SentTraces(true).size(), 2u);
  for (int i = 0; i < 30; ++i) Second(1000);  // to t = 55 s: one refresh of each
  EXPECT_EQ(SentTraces(true).size(), 4u);
  // Escalation asks both ends of the pair: this node's request names the prober n0, and the echo
  // toward n0 is retraced as a suspect, with n0's own flows; the stranger's is not.
  log_.changed.clear();
  v1::ProbePlan p = Plan(2, 1, 30);
  Request(p, "n0", 9);
  runner_->OnPlan(p);
  Second(1000);
  size_t echo_suspects = 0;
  for (const auto& [f, suspect] : log_.changed) {
    if (f.src_port != kResponderPort) continue;
    EXPECT_TRUE(suspect);
    EXPECT_EQ(f.peer_address, kN0);
    EXPECT_EQ(f.dst_port, 41000);
    ++echo_suspects;
  }
  EXPECT_EQ(echo_suspects, 1u);
  EXPECT_EQ(runner_->stats().echo_requested, 1u);
  EXPECT_EQ(SentTraces(true).size(), 5u);
}

TEST_F(TraceRunnerTest, EchoFlowsThatStopAreForgottenAndNoneWithoutAResponderPort) {
  runner_->OnPlan(Plan(1, 1, 0));
  answered_ = {{kStranger, 42000}};
  Second(1000);
  EXPECT_EQ(runner_->stats().echo_flows, 1u);
  answered_.clear();
  for (int i = 0; i < 31; ++i) Second(1000);
  EXPECT_EQ(runner_->stats().echo_flows, 0u);

  FakeTracer::Log log;
  TraceRunner plain(std::make_unique<FakeTracer>(log), "198.18.0.1", [](v1::AgentMessage) {});
  plain.OnPlan(Plan(1, 1, 0));
  plain.OnAnswered({{kStranger, 42000}}, kSecond);
  plain.Pump(1000, ports_, kSecond, kSecond);
  EXPECT_EQ(plain.stats().echo_flows, 0u);
  ASSERT_EQ(log.traced.size(), 1u);
  EXPECT_EQ(log.traced[0].src_port, 40000);
}

}  // namespace
}  // namespace fw::agent
