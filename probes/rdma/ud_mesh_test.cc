// The UD latency mesh against the fake fabric: the six-timestamp split for each timestamp
// source, RoCE GIDs and flow labels, loss and timeouts, completion errors and QP recovery, port
// and device events, and the no-device path.
#include "probes/rdma/ud_mesh.h"

#include <gtest/gtest.h>

#include <set>

#include "probes/rdma/fake_verbs.h"

namespace fw::rdma {
namespace {

using namespace std::chrono_literals;

struct Collect : ResultSink {
  void OnResult(const RdmaProbeResult& r) override { results.push_back(r); }
  std::vector<RdmaProbeResult> answered() const {
    std::vector<RdmaProbeResult> out;
    for (const auto& r : results) {
      if (!r.base.lost) out.push_back(r);
    }
    return out;
  }
  size_t lost() const { return results.size() - answered().size(); }
  std::vector<RdmaProbeResult> results;
};

Gid V4Gid(uint8_t host) {
  Gid g;
  g.raw[10] = g.raw[11] = 0xff;
  g.raw[12] = 198;
  g.raw[13] = 18;
  g.raw[14] = 1;
  g.raw[15] = host;
  return g;
}

FakeDeviceConfig Ib(const std::string& name, uint16_t lid) {
  FakeDeviceConfig d;
  d.name = name;
  FakePortConfig p;
  p.lid = lid;
  p.latency_ns = 5'000;
  Gid g;
  g.raw[0] = 0xfe;
  g.raw[1] = 0x80;
  g.raw[15] = static_cast<uint8_t>(lid);
  p.gids = {{0, g, GidType::kIb, ""}};
  d.ports = {p};
  return d;
}

FakeDeviceConfig Roce(const std::string& name, uint8_t host) {
  FakeDeviceConfig d;
  d.name = name;
  FakePortConfig p;
  p.link_layer = LinkLayer::kEthernet;
  p.latency_ns = 5'000;
  Gid ll;
  ll.raw[0] = 0xfe;
  ll.raw[1] = 0x80;
  ll.raw[15] = host;
  // Index 0/1 link-local (v1, v2), 2/3 the IPv4 address (v1, v2): the v2 IPv4 one is index 3.
  p.gids = {{0, ll, GidType::kRoceV1, "eth0"},
            {1, ll, GidType::kRoceV2, "eth0"},
            {2, V4Gid(host), GidType::kRoceV1, "eth0"},
            {3, V4Gid(host), GidType::kRoceV2, "eth0"}};
  d.ports = {p};
  return d;
}

// Two hosts, each with one device, probing each other.
class MeshTest : public ::testing::Test {
 protected:
  // Reports go at the first wakeup after their ack's send stamp unless a test keeps the hold
  // (keep_hold_): most tests look at one exchange within microseconds.
  void Start(FakeDeviceConfig a, FakeDeviceConfig b, UdMeshOptions opts = {}) {
    if (!keep_hold_) opts.report_hold_ns = 0;
    // Windows of one period at Target()'s default 100/s, so that a window posts one probe per
    // flow, as these tests of single exchanges count; keep_window_ keeps the option as given.
    if (!keep_window_ && opts.send_window_ns == UdMeshOptions{}.send_window_ns) {
      opts.send_window_ns = 10'000'000;
    }
    name_a = a.name;
    name_b = b.name;
    fabric.AddDevice(a);
    fabric.AddDevice(b);
    verbs_a = fabric.MakeVerbs({name_a});
    verbs_b = fabric.MakeVerbs({name_b});
    auto ma = UdMesh::Create(*verbs_a, clock, opts, &sink_a);
    auto mb = UdMesh::Create(*verbs_b, clock, opts, &sink_b);
    ASSERT_TRUE(ma.ok()) << ma.status().ToString();
    ASSERT_TRUE(mb.ok()) << mb.status().ToString();
    a_ = std::move(ma.value());
    b_ = std::move(mb.value());
  }
  // A probes B (and B probes nobody: it only answers).
  void Target(int flows = 1, double rate = 100) {
    UdTarget t;
    t.peer = "node-b";
    t.remote = b_->Endpoints().front();
    t.flows = flows;
    t.rate_hz = rate;
    ASSERT_EQ(a_->SetTargets({t}), 0);
  }
  void Run(std::chrono::nanoseconds total, std::chrono::nanoseconds step = 1us) {
    for (int64_t t = 0; t < total.count(); t += step.count()) {
      a_->Step();
      b_->Step();
      clock.Advance(step);
    }
  }

  bool keep_hold_ = false;
  bool keep_window_ = false;
  FakeClock clock;
  FakeFabric fabric{clock, 7};
  std::string name_a, name_b;
  std::unique_ptr<Verbs> verbs_a, verbs_b;
  Collect sink_a, sink_b;
  std::unique_ptr<UdMesh> a_, b_;
};

TEST_F(MeshTest, IbNetworkRttLeavesOutTheRespondersHostDelay) {
  Start(Ib("mlx5_0", 1), Ib("mlx5_1", 2));
  fabric.SetPollDelay("mlx5_1", 30'000);  // the responder's host is slow to see completions
  Target();
  Run(200us);
  auto got = sink_a.answered();
  ASSERT_EQ(got.size(), 1u);
  const RdmaProbeResult& r = got[0];
  EXPECT_EQ(r.source, TsSource::kNicWallclock);
  EXPECT_EQ(r.responder_source, TsSource::kNicWallclock);
  EXPECT_EQ(r.base.transport, net::Transport::kRdmaUd);
  EXPECT_EQ(r.base.PeerName(), "node-b");
  // 5 us each way. T2 and T4 are stamped when a message has left the NIC, so serialization
  // (5 ns for 64 bytes at 100 Gb/s) falls outside the network span.
  EXPECT_NEAR(r.network_rtt_ns, 10'000, 5);
  EXPECT_EQ(r.base.rtt_ns, r.network_rtt_ns);
  EXPECT_GE(r.responder_host_ns, 30'000);
  EXPECT_LE(r.responder_host_ns, 32'000) << "the delay plus at most the 1 us step";
  EXPECT_LE(r.prober_host_ns, 2'000);
}

TEST_F(MeshTest, ProberHostDelayIsSeparatedToo) {
  Start(Ib("mlx5_0", 1), Ib("mlx5_1", 2));
  fabric.SetPollDelay("mlx5_0", 20'000);
  Target();
  Run(200us);
  auto got = sink_a.answered();
  ASSERT_EQ(got.size(), 1u);
  EXPECT_NEAR(got[0].network_rtt_ns, 10'000, 5);
  EXPECT_GE(got[0].prober_host_ns, 20'000);
  EXPECT_LE(got[0].prober_host_ns, 22'000);
  EXPECT_LE(got[0].responder_host_ns, 1'000);
}

TEST_F(MeshTest, RawTicksOnEachNicsOwnClock) {
  FakeDeviceConfig a = Ib("mlx5_0", 1), b = Ib("mlx5_1", 2);
  a.timestamps = b.timestamps = CqTimestamps::kRaw;
  a.hca_core_clock_khz = 156'250;  // 6.4 ns per tick
  b.hca_core_clock_khz = 1'000'000;
  a.clock_offset_ns = 987'654'321'000;  // the clocks share nothing
  b.clock_offset_ns = 3;
  Start(a, b);
  fabric.SetPollDelay("mlx5_1", 10'000);
  Target();
  Run(200us);
  auto got = sink_a.answered();
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].source, TsSource::kNicRaw);
  EXPECT_EQ(got[0].responder_source, TsSource::kNicRaw);
  EXPECT_NEAR(got[0].network_rtt_ns, 10'000, 15) << "two ticks of 6.4 ns";
  EXPECT_GE(got[0].responder_host_ns, 10'000);
}

TEST_F(MeshTest, SoftwareTimestampsWhenTheNicHasNone) {
  FakeDeviceConfig a = Ib("mlx5_0", 1), b = Ib("mlx5_1", 2);
  a.timestamps = b.timestamps = CqTimestamps::kNone;
  Start(a, b);
  EXPECT_EQ(a_->TimestampSources().front(), TsSource::kSoftware);
  fabric.SetPollDelay("mlx5_1", 30'000);
  Target();
  Run(200us);
  auto got = sink_a.answered();
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].source, TsSource::kSoftware);
  // The responder's poll delay is still taken out (it measures its own turnaround); what is left
  // includes the polling granularity of both ends (1 us steps here).
  EXPECT_GE(got[0].network_rtt_ns, 10'000);
  EXPECT_LE(got[0].network_rtt_ns, 14'000);
  EXPECT_GE(got[0].responder_host_ns, 30'000);
  EXPECT_EQ(got[0].prober_host_ns, 0) << "software stamps cannot split the prober's host";
}

// The agent's RC bursts and their QP setup run on the mesh's thread (RdmaRunner): a probe or
// ack that arrives meanwhile waits on this process, not on the host. Each exchange below keeps
// one end from stepping for 2 ms after A posts (its thread on other work); with NoteBusy that
// wait carries no host delay, without it (the control) it reads as a 2 ms host delay.
class MeshBusyTest : public MeshTest {
 protected:
  void Exchange(bool a_busy, bool b_busy, bool note) {
    const int64_t t0 = clock.MonotonicNanos();
    const uint64_t sent = a_->stats().sent.load();
    a_->Step();  // the probe is due: posted now
    ASSERT_EQ(a_->stats().sent.load(), sent + 1);
    const int64_t until = t0 + 2'000'000;
    while (clock.MonotonicNanos() < until) {
      if (!a_busy) a_->Step();
      if (!b_busy) b_->Step();
      clock.Advance(1us);
    }
    if (note && a_busy) a_->NoteBusy(t0, until);
    if (note && b_busy) b_->NoteBusy(t0, until);
    Run(1ms);
    clock.Advance(1s);  // the next probe is due at the next Step
  }
  void StartBusy(CqTimestamps ts) {
    FakeDeviceConfig a = Ib("mlx5_0", 1), b = Ib("mlx5_1", 2);
    a.timestamps = b.timestamps = ts;
    UdMeshOptions o;
    o.send_window_ns = 0;
    Start(a, b, o);
    Target(1, 1);
  }
};

TEST_F(MeshBusyTest, WaitsOnThisThreadsOtherWorkCarryNoHostDelay) {
  StartBusy(CqTimestamps::kWallclock);
  Exchange(false, true, true);  // the responder's thread busy over the probe's arrival
  ASSERT_EQ(sink_a.answered().size(), 1u);
  const RdmaProbeResult r0 = sink_a.answered()[0];
  EXPECT_EQ(r0.responder_host_ns, 0) << "reported busy: left out, not measured";
  EXPECT_NEAR(r0.network_rtt_ns, 10'000, 5) << "the NICs' stamps: the network RTT stays";
  EXPECT_LE(r0.prober_host_ns, 2'000);
  EXPECT_EQ(b_->stats().busy_turnarounds.load(), 1u);
  EXPECT_EQ(a_->stats().peer_busy_turnarounds.load(), 1u);
  Exchange(false, true, false);  // the same wait, not noted: the host's as far as anyone knows
  ASSERT_EQ(sink_a.answered().size(), 2u);
  EXPECT_GE(sink_a.answered()[1].responder_host_ns, 1'980'000);  // 2 ms less the 10 us round trip

  Exchange(true, false, true);  // the prober's thread busy over the ack's arrival
  ASSERT_EQ(sink_a.answered().size(), 3u);
  const RdmaProbeResult r = sink_a.answered()[2];
  EXPECT_EQ(r.prober_host_ns, 0) << "left out: not measured";
  EXPECT_NEAR(r.network_rtt_ns, 10'000, 5);
  EXPECT_LE(r.responder_host_ns, 2'000);
  EXPECT_EQ(a_->stats().busy_prober_delays.load(), 1u);
  Exchange(true, false, false);
  ASSERT_EQ(sink_a.answered().size(), 4u);
  EXPECT_GE(sink_a.answered()[3].prober_host_ns, 1'980'000);  // 2 ms less the 10 us round trip

  // A span under kMinBusyNs is not kept, and one before the probe is none of its business.
  const int64_t now = clock.MonotonicNanos();
  b_->NoteBusy(now - UdMesh::kMinBusyNs + 1, now);
  a_->NoteBusy(now - 10'000'000, now - 5'000'000);
  Exchange(false, false, false);
  ASSERT_EQ(sink_a.answered().size(), 5u);
  EXPECT_GT(sink_a.answered()[4].prober_host_ns, 0);
  EXPECT_GT(sink_a.answered()[4].responder_host_ns, 0);
  EXPECT_EQ(sink_a.lost(), 0u);
  EXPECT_EQ(a_->stats().reports_missing.load(), 0u);
  EXPECT_EQ(a_->stats().busy_prober_delays.load() + b_->stats().busy_turnarounds.load(), 2u);
}

TEST_F(MeshBusyTest, WithSoftwareStampsAProbeThatWaitedOnOtherWorkGivesNoResult) {
  StartBusy(CqTimestamps::kNone);
  Exchange(true, false, true);  // the wait would be in the network RTT itself
  EXPECT_TRUE(sink_a.results.empty());
  EXPECT_EQ(a_->stats().busy_software_results.load(), 1u);
  Exchange(true, false, false);
  ASSERT_EQ(sink_a.answered().size(), 1u);
  EXPECT_GE(sink_a.answered()[0].network_rtt_ns, 1'980'000) << "what the control reads";
}

TEST_F(MeshTest, RoceUsesTheIpv4RoceV2GidAndRotatesFlowLabels) {
  Start(Roce("mlx5_0", 1), Roce("mlx5_1", 2));
  const UdEndpoint e = a_->Endpoints().front();
  EXPECT_EQ(e.link_layer, LinkLayer::kEthernet);
  EXPECT_EQ(e.gid_index, 3) << "not index 0, the RoCE v1 link-local GID";
  EXPECT_TRUE(e.gid.IsIpv4Mapped());
  Target(/*flows=*/4, /*rate=*/1000);
  Run(3ms, 2us);
  std::set<uint32_t> labels;
  for (const auto& r : sink_a.answered()) labels.insert(r.flow_label);
  EXPECT_EQ(labels, (std::set<uint32_t>{1, 2, 3, 4}));
  EXPECT_EQ(sink_a.lost(), 0u);
}

TEST_F(MeshTest, SourceQpsRotateOnIb) {
  UdMeshOptions o;
  o.port.source_qps = 2;
  Start(Ib("mlx5_0", 1), Ib("mlx5_1", 2), o);
  Target(/*flows=*/2, /*rate=*/1000);
  Run(3ms, 2us);
  std::set<uint32_t> qpns;
  for (const auto& r : sink_a.answered()) qpns.insert(r.src_qpn);
  EXPECT_EQ(qpns.size(), 2u);
}

TEST_F(MeshTest, LossIsCountedAfterTheTimeout) {
  keep_hold_ = true;  // reports held up to a quarter of the timeout, most sent with acks
  UdMeshOptions o;
  o.timeout_ns = 5'000'000;
  o.send_window_ns = 1'000'000;  // one period: the next ack comes within the 1.25 ms hold
  Start(Ib("mlx5_0", 1), Ib("mlx5_1", 2), o);
  fabric.SetLoss("mlx5_1", 1, 0.3);
  Target(/*flows=*/1, /*rate=*/1000);
  Run(1100ms, 50us);
  // Probes sent more than a timeout ago have all been decided.
  const auto n = static_cast<double>(a_->stats().sent.load());
  ASSERT_GT(n, 1000);
  // A probe is answered only if probe, ack and report all get through: 0.7^3 = 0.343. An ack
  // without its report is neither a loss nor a result.
  const double answered = static_cast<double>(sink_a.answered().size()) / n;
  const double lost = static_cast<double>(sink_a.lost()) / n;
  EXPECT_NEAR(lost, 1 - 0.7 * 0.7, 0.05) << "a loss is a probe or its ack missing";
  EXPECT_NEAR(answered, 0.343, 0.05);
  EXPECT_GT(a_->stats().reports_missing.load(), 0u) << "ack through, report lost: not a loss";
  EXPECT_GT(b_->stats().reports_with_ack.load(), 0u);
}

TEST_F(MeshTest, HeldReportsGoWithTheNextAckAndChangeNoValue) {
  keep_hold_ = true;  // the default: 250 ms, a quarter of the 1 s timeout
  Start(Ib("mlx5_0", 1), Ib("mlx5_1", 2));
  fabric.SetPollDelay("mlx5_1", 30'000);
  fabric.SetPollDelay("mlx5_0", 20'000);
  Target(/*flows=*/1, /*rate=*/100);
  Run(95ms, 5us);
  const uint64_t sent = a_->stats().sent.load();
  ASSERT_GE(sent, 10u);
  auto got = sink_a.answered();
  // Each report rides after the next probe's ack: all but the last probe have their result.
  EXPECT_EQ(got.size(), sent - 1);
  EXPECT_EQ(sink_a.lost(), 0u);
  EXPECT_EQ(b_->stats().reports_with_ack.load(), sent - 1);
  EXPECT_EQ(b_->stats().reports_after_hold.load(), 0u);
  for (const auto& r : got) {
    // The same values as a report sent at once (IbNetworkRttLeavesOutTheRespondersHostDelay).
    EXPECT_NEAR(r.network_rtt_ns, 10'000, 5);
    EXPECT_GE(r.responder_host_ns, 30'000);
    EXPECT_LE(r.responder_host_ns, 35'000);
    EXPECT_GE(r.prober_host_ns, 20'000);
    EXPECT_LE(r.prober_host_ns, 25'000);
  }
}

TEST_F(MeshTest, AHeldReportGoesAloneWhenItsHoldRunsOut) {
  keep_hold_ = true;
  UdMeshOptions o;
  o.report_hold_ns = 40'000'000;
  Start(Ib("mlx5_0", 1), Ib("mlx5_1", 2), o);
  Target(/*flows=*/1, /*rate=*/5);  // one probe per 200 ms: no next ack within the hold
  Run(39ms, 10us);
  EXPECT_EQ(a_->stats().sent.load(), 1u);
  EXPECT_EQ(a_->stats().acked.load(), 1u);
  EXPECT_TRUE(sink_a.results.empty()) << "the report is held";
  // The responder's Step asks to be woken when the hold ends, not before.
  const int64_t wait = b_->Step();
  EXPECT_GT(wait, 0);
  EXPECT_LE(wait, 1'000'000);
  Run(2ms, 10us);
  ASSERT_EQ(sink_a.answered().size(), 1u);
  EXPECT_EQ(b_->stats().reports_after_hold.load(), 1u);
  EXPECT_EQ(b_->stats().reports_with_ack.load(), 0u);
}

TEST_F(MeshTest, HeldSoftwareStampedReportsKeepTheirTurnaround) {
  keep_hold_ = true;
  FakeDeviceConfig a = Ib("mlx5_0", 1), b = Ib("mlx5_1", 2);
  a.timestamps = b.timestamps = CqTimestamps::kNone;
  Start(a, b);
  fabric.SetPollDelay("mlx5_1", 30'000);
  Target(/*flows=*/1, /*rate=*/100);
  Run(55ms, 1us);
  auto got = sink_a.answered();
  ASSERT_GE(got.size(), 4u);
  for (const auto& r : got) {
    // As SoftwareTimestampsWhenTheNicHasNone, where each report goes at once.
    EXPECT_EQ(r.responder_source, TsSource::kSoftware);
    EXPECT_GE(r.network_rtt_ns, 10'000);
    EXPECT_LE(r.network_rtt_ns, 14'000);
    EXPECT_GE(r.responder_host_ns, 30'000);
  }
  EXPECT_GT(b_->stats().reports_with_ack.load(), 0u);
}

TEST_F(MeshTest, ATargetsFlowsGoOutInOneWakeup) {
  UdMeshOptions o;
  o.send_window_ns = 0;  // each target on its own phase
  Start(Ib("mlx5_0", 1), Ib("mlx5_1", 2), o);
  Target(/*flows=*/4, /*rate=*/10);
  a_->Step();
  EXPECT_EQ(a_->stats().sent.load(), 4u) << "one wakeup at the responder answers all four";
  // The next round goes with a wakeup within a quarter period before it is due.
  clock.Advance(74ms);
  a_->Step();
  EXPECT_EQ(a_->stats().sent.load(), 4u);
  clock.Advance(2ms);
  a_->Step();
  EXPECT_EQ(a_->stats().sent.load(), 8u);
}

TEST_F(MeshTest, SendWindowsSendOnlyAtTheirStartsOnTheWallClocksGrid) {
  keep_window_ = true;
  Start(Ib("mlx5_0", 1), Ib("mlx5_1", 2));  // the default window, 250 ms
  clock.Advance(30ms);  // the FakeClock starts on a window start: move off it
  Target(/*flows=*/4, /*rate=*/10);  // period 100 ms: up to 3 probes a flow in a window
  a_->Step();
  // The current window began 30 ms ago: each flow posts the probes due at 0, 100 and 200 ms of it.
  EXPECT_EQ(a_->stats().sent.load(), 12u) << "target 0 goes in the current window";
  // Wakeups inside the window (this fake without channels is polled every 1 ms) send nothing
  // new; the next window starts 220 ms later, on the wall clock's 250 ms grid, and holds the
  // probes due at 300 and 400 ms.
  int ms = 0;
  while (a_->stats().sent.load() == 12 && ms < 400) {
    clock.Advance(1ms);
    ++ms;
    a_->Step();
  }
  EXPECT_EQ(ms, 220);
  EXPECT_EQ(a_->stats().sent.load(), 20u);
  EXPECT_EQ(clock.WallNanos() % 250'000'000, 0);
  EXPECT_EQ(a_->stats().send_rounds.load(), 2u);
  // Over 10 s the rate holds: 4 flows x 10/s, four send wakeups a second.
  for (int i = 0; i < 10'000; ++i) {
    clock.Advance(1ms);
    a_->Step();
  }
  EXPECT_GE(a_->stats().sent.load(), 400u + 12u);
  EXPECT_LE(a_->stats().sent.load(), 400u + 20u);
  EXPECT_EQ(a_->stats().send_rounds.load(), 42u);
}

// A flow faster than kMaxSendsPerWindow a window shrinks the window: no flow posts more than that
// many probes back to back, and the rate still holds.
TEST_F(MeshTest, FastFlowsShrinkTheSendWindowToBoundTheirBursts) {
  keep_window_ = true;
  Start(Ib("mlx5_0", 1), Ib("mlx5_1", 2));
  Target(/*flows=*/1, /*rate=*/100);  // period 10 ms: 40 ms windows, 4 probes each
  uint64_t max_burst = 0;
  for (int i = 0; i < 1000; ++i) {
    const uint64_t before = a_->stats().sent.load();
    a_->Step();
    b_->Step();
    max_burst = std::max(max_burst, a_->stats().sent.load() - before);
    clock.Advance(1ms);
  }
  EXPECT_EQ(max_burst, static_cast<uint64_t>(kMaxSendsPerWindow));
  EXPECT_GE(a_->stats().sent.load(), 100u);
  EXPECT_LE(a_->stats().sent.load(), 104u);
  EXPECT_GE(a_->stats().send_rounds.load(), 25u);
  EXPECT_LE(a_->stats().send_rounds.load(), 26u);
}

// One prober and eight responders on one fake clock, each probed with 2 flows at 4/s (64/s),
// stepped every 100 us: what the send windows change and what they must not.
class MeshFleetTest : public ::testing::Test {
 protected:
  void Start(UdMeshOptions opts, CqTimestamps ts = CqTimestamps::kWallclock,
             bool keep_hold = false) {
    if (!keep_hold) opts.report_hold_ns = 0;
    for (int i = 0; i <= kPeers; ++i) {
      FakeDeviceConfig d = Ib("mlx5_" + std::to_string(i), static_cast<uint16_t>(i + 1));
      d.timestamps = ts;
      fabric->AddDevice(d);
      verbs.push_back(fabric->MakeVerbs({d.name}));
      auto m = UdMesh::Create(*verbs.back(), clock, opts, i == 0 ? &sink : &ignored);
      ASSERT_TRUE(m.ok()) << m.status().ToString();
      meshes.push_back(std::move(m.value()));
    }
    ASSERT_EQ(meshes[0]->SetTargets(PeerTargets()), 0);
  }
  // The eight responders, each with 2 flows at 4/s.
  std::vector<UdTarget> PeerTargets() const {
    std::vector<UdTarget> targets;
    for (int i = 1; i <= kPeers; ++i) {
      UdTarget t;
      t.peer = "peer" + std::to_string(i);
      t.remote = meshes[static_cast<size_t>(i)]->Endpoints().front();
      t.flows = 2;
      t.rate_hz = 4;
      targets.push_back(t);
    }
    return targets;
  }
  // A fresh fabric and fleet (the clock goes on) with send windows of `window_ns`.
  void StartWithWindow(int64_t window_ns, CqTimestamps ts = CqTimestamps::kWallclock) {
    meshes.clear();
    verbs.clear();
    sink.results.clear();
    fabric = std::make_unique<FakeFabric>(clock, 7);
    UdMeshOptions o;
    o.send_window_ns = window_ns;
    Start(o, ts);
  }
  void Run(std::chrono::nanoseconds total) {
    for (int64_t t = 0; t < total.count(); t += 100'000) {
      for (auto& m : meshes) m->Step();
      clock.Advance(100us);
    }
  }
  static constexpr int kPeers = 8;
  FakeClock clock{1'000'000'000, 1'700'000'000'017'000'000};  // 17 ms past a window start
  std::unique_ptr<FakeFabric> fabric = std::make_unique<FakeFabric>(clock, 7);
  std::vector<std::unique_ptr<Verbs>> verbs;  // after the fabric, before the meshes
  std::vector<std::unique_ptr<UdMesh>> meshes;
  Collect sink, ignored;
};

TEST_F(MeshFleetTest, SendWindowsPostEveryTargetDueInAWindowInOneWakeup) {
  Start(UdMeshOptions{});  // 250 ms windows: 4 a second, every target in each
  Run(2000ms);
  const UdMeshStats& s = meshes[0]->stats();
  // 64/s for 2 s; the windows cut at both ends add at most one window's 16.
  EXPECT_GE(s.sent.load(), 128u) << "the rate holds";
  EXPECT_LE(s.sent.load(), 144u);
  EXPECT_EQ(s.send_rounds.load(), 9u) << "4 send wakeups a second, 9 windows begun in 2 s";
  EXPECT_GE(sink.answered().size(), 128u);
  EXPECT_EQ(sink.lost(), 0u);
}

// With the default hold (250 ms) and windows (250 ms), a responder's report waits for the ack of
// the same prober's next probe, which comes in the next window: none goes alone, none is missing.
TEST_F(MeshFleetTest, HeldReportsRideTheNextWindowsAcks) {
  Start(UdMeshOptions{}, CqTimestamps::kWallclock, /*keep_hold=*/true);
  Run(3000ms);
  uint64_t with_ack = 0, alone = 0;
  for (size_t i = 1; i < meshes.size(); ++i) {
    with_ack += meshes[i]->stats().reports_with_ack.load();
    alone += meshes[i]->stats().reports_after_hold.load();
  }
  EXPECT_GE(with_ack, 160u) << "2 flows x 4/s x 3 s x 8 responders, less the last window's";
  EXPECT_EQ(alone, 0u);
  EXPECT_EQ(meshes[0]->stats().reports_missing.load(), 0u);
  EXPECT_GE(sink.answered().size(), 160u);
  EXPECT_EQ(sink.lost(), 0u);
}

TEST_F(MeshFleetTest, WithoutSendWindowsTheTargetsPhasesCostMoreSendWakeups) {
  UdMeshOptions o;
  o.send_window_ns = 0;
  Start(o);
  Run(2000ms);
  const UdMeshStats& s = meshes[0]->stats();
  EXPECT_GE(s.sent.load(), 128u);
  EXPECT_LE(s.sent.load(), 136u);
  // Each target on its own phase (64 rounds here): the control of the test above.
  EXPECT_GE(s.send_rounds.load(), 48u) << s.send_rounds.load();
}

// Another host's clock: its own monotonic origin, the same (NTP-synced) wall clock.
class OtherHostClock final : public Clock {
 public:
  OtherHostClock(const Clock& base, int64_t mono_offset) : base_(base), offset_(mono_offset) {}
  int64_t MonotonicNanos() const override { return base_.MonotonicNanos() + offset_; }
  int64_t WallNanos() const override { return base_.WallNanos(); }

 private:
  const Clock& base_;
  int64_t offset_;
};

// Two probers on hosts whose monotonic clocks share nothing, given their plans 37 ms apart, send
// at the same wall-clock instants: their targets' probes meet at the responders.
TEST_F(MeshFleetTest, ProbersOnOtherHostsSendAtTheSameWallInstants) {
  Start(UdMeshOptions{});
  clock.Advance(37ms);
  FakeDeviceConfig d = Ib("mlx5_9", 10);
  fabric->AddDevice(d);
  auto verbs2 = fabric->MakeVerbs({d.name});
  OtherHostClock other(clock, 987'654'321'123);
  UdMeshOptions o;
  o.report_hold_ns = 0;
  auto second = UdMesh::Create(*verbs2, other, o, &ignored);
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  ASSERT_EQ((*second)->SetTargets(PeerTargets()), 0);
  std::set<int64_t> first_rounds, second_rounds;
  for (int step = 0; step < 10'000; ++step) {  // 1 s of 100 us steps
    const uint64_t a = meshes[0]->stats().send_rounds.load();
    const uint64_t b = (*second)->stats().send_rounds.load();
    for (auto& m : meshes) m->Step();
    (*second)->Step();
    if (meshes[0]->stats().send_rounds.load() != a) first_rounds.insert(clock.WallNanos());
    if ((*second)->stats().send_rounds.load() != b) second_rounds.insert(clock.WallNanos());
    clock.Advance(100us);
  }
  second.value().reset();
  // Each one's first round is at its first Step after its plan (target 0's window is the
  // current one); every later round of both is at a window start, the same ones.
  ASSERT_FALSE(first_rounds.empty());
  ASSERT_FALSE(second_rounds.empty());
  first_rounds.erase(first_rounds.begin());
  second_rounds.erase(second_rounds.begin());
  EXPECT_EQ(first_rounds, second_rounds);
  EXPECT_GE(second_rounds.size(), 3u);
  for (const int64_t t : second_rounds) EXPECT_EQ(t % 250'000'000, 0) << t;
}

// A fake with a fixed 5 us latency each way reports a 10 us network RTT for every probe, with
// the windows on or off: batching sends (16 probes posted back to back, their acks coming back
// together) moves host delays, never the network RTT.
TEST_F(MeshFleetTest, SendWindowsLeaveTheNetworkRttOfAFixedLatency) {
  for (const int64_t window : {UdMeshOptions{}.send_window_ns, int64_t{0}}) {
    SCOPED_TRACE(window);
    StartWithWindow(window);
    fabric->SetPollDelay("mlx5_3", 30'000);  // one slow responder: its delay is its host's
    Run(1000ms);
    const auto got = sink.answered();
    ASSERT_GE(got.size(), 56u);
    for (const auto& r : got) {
      EXPECT_NEAR(r.network_rtt_ns, 10'000, 5);
      EXPECT_GE(r.prober_host_ns, 0);
      if (r.base.PeerName() == "peer3") {
        EXPECT_GE(r.responder_host_ns, 30'000);
        EXPECT_LE(r.responder_host_ns, 131'000) << "plus at most one 100 us step";
      } else {
        EXPECT_LE(r.responder_host_ns, 101'000);
      }
    }
  }
}

// With software stamps the network RTT holds what neither end can split off (each end's poll
// granularity, 100 us steps here), so the windows must not add to it either: both ends still
// poll as soon as a message is there, and the same probes read the same with and without them.
TEST_F(MeshFleetTest, SendWindowsLeaveTheSoftwareStampedRttToo) {
  std::vector<double> means;
  for (const int64_t window : {UdMeshOptions{}.send_window_ns, int64_t{0}}) {
    SCOPED_TRACE(window);
    StartWithWindow(window, CqTimestamps::kNone);
    Run(1000ms);
    const auto got = sink.answered();
    ASSERT_GE(got.size(), 56u);
    double sum = 0;
    for (const auto& r : got) {
      EXPECT_EQ(r.source, TsSource::kSoftware);
      EXPECT_GE(r.network_rtt_ns, 10'000);
      EXPECT_LE(r.network_rtt_ns, 210'000) << "plus the 100 us steps at each end";
      sum += static_cast<double>(r.network_rtt_ns);
    }
    means.push_back(sum / static_cast<double>(got.size()));
  }
  EXPECT_NEAR(means[0], means[1], 1'000) << "windows on: " << means[0] << ", off: " << means[1];
}

TEST_F(MeshTest, AnAnswerAfterTheTimeoutIsLateNotAResult) {
  UdMeshOptions o;
  o.timeout_ns = 1'000'000;
  Start(Ib("mlx5_0", 1), Ib("mlx5_1", 2), o);
  fabric.SetLatency("mlx5_1", 1, 2'000'000);  // 2 ms each way into and out of B
  Target(1, 10);
  Run(10ms, 10us);
  ASSERT_EQ(sink_a.results.size(), 1u);
  EXPECT_TRUE(sink_a.results[0].base.lost);
  EXPECT_EQ(a_->stats().late.load(), 2u) << "the ack and the report";
}

TEST_F(MeshTest, ACompletionErrorResetsTheQpsAfterABackoffAndProbingResumes) {
  UdMeshOptions o;
  o.recovery_backoff_base_s = 0.01;
  Start(Ib("mlx5_0", 1), Ib("mlx5_1", 2), o);
  Target(1, 1000);
  Run(5ms, 5us);
  const size_t before = sink_a.answered().size();
  ASSERT_GT(before, 3u);
  fabric.FailNextSends("mlx5_0", 1, WcStatus::kGeneralErr);
  Run(5ms, 5us);
  EXPECT_EQ(a_->stats().completion_errors[static_cast<size_t>(WcStatus::kGeneralErr)].load(), 1u);
  Run(30ms, 5us);
  EXPECT_EQ(a_->stats().qp_recoveries.load(), 1u);
  EXPECT_EQ(a_->stats().recovery_failures.load(), 0u);
  EXPECT_GT(sink_a.answered().size(), before + 10) << "probing resumed after the reset";
  EXPECT_GT(a_->stats().skipped_port_down.load(), 0u) << "no sends while the port was broken";
}

TEST_F(MeshTest, PortDownStopsProbingAndPortActiveResumesIt) {
  Start(Ib("mlx5_0", 1), Ib("mlx5_1", 2));
  Target(1, 1000);
  Run(5ms, 5us);
  const uint64_t sent = a_->stats().sent.load();
  fabric.SetPortState("mlx5_0", 1, PortState::kDown);
  Run(20ms, 5us);
  EXPECT_EQ(a_->stats().port_down_events.load(), 1u);
  EXPECT_LE(a_->stats().sent.load(), sent + 1) << "nothing sent from a down port";
  EXPECT_GE(a_->stats().skipped_port_down.load(), 15u);
  fabric.SetPortState("mlx5_0", 1, PortState::kActive);
  const size_t answered = sink_a.answered().size();
  Run(20ms, 5us);
  EXPECT_EQ(a_->stats().port_up_events.load(), 1u);
  EXPECT_GT(sink_a.answered().size(), answered + 10);
}

TEST_F(MeshTest, DeviceRemovalIsSurvivedAndReopenIsRetriedWithBackoff) {
  Start(Ib("mlx5_0", 1), Ib("mlx5_1", 2));
  Target(1, 1000);
  Run(5ms, 5us);
  fabric.RemoveDevice("mlx5_0");
  int64_t max_wait = 0;
  for (int i = 0; i < 200; ++i) {
    const int64_t wait = a_->Step();
    max_wait = std::max(max_wait, wait);
    b_->Step();
    clock.Advance(100ms);
  }
  EXPECT_EQ(a_->stats().device_fatal_events.load(), 1u);
  EXPECT_LT(a_->stats().device_reopens.load(), 12u) << "20 s of retries, backed off to 60 s";
  EXPECT_GE(a_->stats().device_reopens.load(), 3u);
  EXPECT_GT(max_wait, 0) << "no busy loop while the device is gone";
}

TEST_F(MeshTest, TargetsThatCannotBeProbedAreSkipped) {
  Start(Ib("mlx5_0", 1), Ib("mlx5_1", 2));
  UdTarget good;
  good.peer = "b";
  good.remote = b_->Endpoints().front();
  UdTarget roce = good;
  roce.remote.link_layer = LinkLayer::kEthernet;
  roce.remote.gid = V4Gid(9);  // no local RoCE port to reach it from
  UdTarget no_lid = good;
  no_lid.remote.lid = 0;
  UdTarget bad_rate = good;
  bad_rate.rate_hz = 0;
  EXPECT_EQ(a_->SetTargets({good, roce, no_lid, bad_rate}), 3);
  Run(1ms);
  EXPECT_EQ(sink_a.answered().size(), 1u);
}

TEST(MeshNoDevice, NoRdmaStackIsUnavailable) {
  FakeClock clock;
  auto verbs = FakeFabric::MakeNoRdmaStack();
  auto m = UdMesh::Create(*verbs, clock, {}, nullptr);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), StatusCode::kUnavailable);
}

TEST(MeshNoDevice, NoUsablePortIsNotFound) {
  FakeClock clock;
  FakeFabric fabric(clock);
  FakeDeviceConfig roce_without_v4;
  roce_without_v4.name = "mlx5_9";
  FakePortConfig p;
  p.link_layer = LinkLayer::kEthernet;
  Gid ll;
  ll.raw[0] = 0xfe;
  ll.raw[1] = 0x80;
  p.gids = {{0, ll, GidType::kRoceV1, "eth0"}};
  roce_without_v4.ports = {p};
  fabric.AddDevice(roce_without_v4);
  auto verbs = fabric.MakeVerbs({"mlx5_9"});
  auto m = UdMesh::Create(*verbs, clock, {}, nullptr);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), StatusCode::kNotFound);
  EXPECT_NE(m.status().message().find("RoCE v2"), std::string::npos) << m.status().message();
}

}  // namespace
}  // namespace fw::rdma
