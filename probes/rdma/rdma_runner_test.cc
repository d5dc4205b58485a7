// The agent's RDMA runner: unavailable without RDMA, results in batches with a fake device.
#include "probes/rdma/rdma_runner.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <map>
#include <mutex>
#include <thread>

#include "probes/rdma/fake_link.h"
#include "probes/rdma/fake_verbs.h"

namespace fw::rdma {
namespace {

TEST(RdmaRunner, NoRdmaStackLeavesItUnavailableAndStartsNothing) {
  int batches = 0;
  RdmaRunner r(FakeFabric::MakeNoRdmaStack(), RealClock::Get(), {},
               [&](std::vector<RdmaProbeResult>&&) { ++batches; });
  Status st = r.Start();
  EXPECT_EQ(st.code(), StatusCode::kUnavailable);
  RdmaState s = r.state();
  EXPECT_FALSE(s.available);
  EXPECT_NE(s.detail.find("errno 38"), std::string::npos) << s.detail;
  EXPECT_EQ(r.stats(), nullptr);
  r.SetTargets({});  // harmless
  r.Stop();
  EXPECT_EQ(batches, 0);
}

TEST(RdmaRunner, ProbesOnItsThreadAndHandsOverBatches) {
  FakeFabric fabric(RealClock::Get());
  for (uint16_t lid : {1, 2}) {
    FakeDeviceConfig d;
    d.name = "mlx5_" + std::to_string(lid);
    FakePortConfig p;
    p.lid = lid;
    d.ports = {p};
    fabric.AddDevice(d);
  }
  std::mutex mu;
  std::condition_variable cv;
  std::vector<RdmaProbeResult> got;
  auto sink = [&](std::vector<RdmaProbeResult>&& b) {
    std::lock_guard<std::mutex> l(mu);
    got.insert(got.end(), b.begin(), b.end());
    cv.notify_all();
  };
  RdmaRunnerOptions o;
  o.batch_interval_s = 0.05;
  RdmaRunner a(fabric.MakeVerbs({"mlx5_1"}), RealClock::Get(), o, sink);
  RdmaRunner b(fabric.MakeVerbs({"mlx5_2"}), RealClock::Get(), o, [](auto&&) {});
  ASSERT_TRUE(a.Start().ok());
  ASSERT_TRUE(b.Start().ok());
  ASSERT_TRUE(a.state().available);
  ASSERT_EQ(b.state().endpoints.size(), 1u);
  UdTarget t;
  t.peer = "node-b";
  t.remote = b.state().endpoints.front();
  t.flows = 2;
  t.rate_hz = 200;
  a.SetTargets({t});
  {
    std::unique_lock<std::mutex> l(mu);
    cv.wait_for(l, std::chrono::seconds(5), [&] { return got.size() >= 20; });
  }
  a.Stop();
  b.Stop();
  std::lock_guard<std::mutex> l(mu);
  ASSERT_GE(got.size(), 20u);
  size_t answered = 0;
  for (const auto& r : got) {
    EXPECT_EQ(r.base.PeerName(), "node-b");
    if (!r.base.lost) {
      ++answered;
      EXPECT_GT(r.network_rtt_ns, 0);
    }
  }
  EXPECT_GE(answered, got.size() - 1);
}

TEST(RdmaRunner, WithNoTargetsItSleeps) {
  FakeFabric fabric(RealClock::Get());
  FakeDeviceConfig d;
  d.name = "mlx5_0";
  FakePortConfig p;
  p.lid = 1;
  d.ports = {p};
  fabric.AddDevice(d);
  fabric.EnableCompletionChannels();
  RdmaRunnerOptions o;
  o.batch_interval_s = 0.02;  // long past after the sleep below, with no result to hand over
  RdmaRunner r(fabric.MakeVerbs({"mlx5_0"}), RealClock::Get(), o, [](auto&&) {});
  ASSERT_TRUE(r.Start().ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const uint64_t w = r.wakeups();
  r.Stop();
  EXPECT_LT(w, 20u) << "an idle runner wakes for its mesh's 1 s timer, not in a loop";
}

TEST(FakeLink, DatagramRoundTripsAndBadOnesAreRefusedByCause) {
  LinkDatagram d;
  d.dlid = 7;
  d.slid = 3;
  d.dst_qpn = 0x123456;
  d.src_qpn = 0x100;
  d.qkey = 0x46570001;
  d.arrive_at_ns = 123456789;
  d.flow_label = 0xfffff;
  d.grh = true;
  d.payload.assign(64, 0xab);
  std::vector<uint8_t> w;
  EncodeLinkDatagram(d, w);
  ASSERT_EQ(w.size(), kLinkHeaderBytes + 64);
  LinkDatagram back;
  LinkDrop why;
  ASSERT_TRUE(ParseLinkDatagram(w.data(), w.size(), back, why));
  EXPECT_EQ(back.dst_qpn, d.dst_qpn);
  EXPECT_EQ(back.arrive_at_ns, d.arrive_at_ns);
  EXPECT_EQ(back.payload, d.payload);
  EXPECT_FALSE(ParseLinkDatagram(w.data(), kLinkHeaderBytes - 1, back, why));
  EXPECT_EQ(why, LinkDrop::kTruncated);
  EXPECT_FALSE(ParseLinkDatagram(w.data(), w.size() - 1, back, why));
  EXPECT_EQ(why, LinkDrop::kBadLength);
  std::vector<uint8_t> bad = w;
  bad[0] ^= 1;
  EXPECT_FALSE(ParseLinkDatagram(bad.data(), bad.size(), back, why));
  EXPECT_EQ(why, LinkDrop::kBadMagic);
  bad = w;
  bad[9] = 1;  // dst_qpn above 24 bits
  EXPECT_FALSE(ParseLinkDatagram(bad.data(), bad.size(), back, why));
  EXPECT_EQ(why, LinkDrop::kBadField);
  bad = w;
  bad[4] = 9;  // no such kind
  EXPECT_FALSE(ParseLinkDatagram(bad.data(), bad.size(), back, why));
  EXPECT_EQ(why, LinkDrop::kBadField);

  // RC writes carry no payload; a UD datagram carries no RC fields.
  LinkDatagram rc = d;
  rc.kind = LinkKind::kRcWrite;
  rc.payload.clear();
  rc.token = 42;
  rc.remote_addr = 0x7f0000001000;
  rc.rkey = 0x5a000011;
  rc.length = 65536;
  EncodeLinkDatagram(rc, w);
  ASSERT_TRUE(ParseLinkDatagram(w.data(), w.size(), back, why));
  EXPECT_EQ(back.kind, LinkKind::kRcWrite);
  EXPECT_EQ(back.token, 42u);
  EXPECT_EQ(back.remote_addr, rc.remote_addr);
  EXPECT_EQ(back.length, 65536u);
  rc.payload.assign(8, 1);
  EncodeLinkDatagram(rc, w);
  EXPECT_FALSE(ParseLinkDatagram(w.data(), w.size(), back, why));
  EXPECT_EQ(why, LinkDrop::kBadField);
  LinkDatagram ud = d;
  ud.rkey = 1;
  EncodeLinkDatagram(ud, w);
  EXPECT_FALSE(ParseLinkDatagram(w.data(), w.size(), back, why));
  LinkDatagram ack = rc;
  ack.kind = LinkKind::kRcAck;
  ack.payload.clear();
  ack.status = kWcStatusCount;  // no such status
  EncodeLinkDatagram(ack, w);
  EXPECT_FALSE(ParseLinkDatagram(w.data(), w.size(), back, why));
}

// Two fabrics with `rails` fake devices each ("mlx5_<r>"; LIDs 1 + 2r and 2 + 2r), joined by the
// loopback link at `base`; empty when a socket could not be bound.
std::vector<std::unique_ptr<FakeFabric>> LinkedFabrics(uint16_t base, double gbps, int rails = 1) {
  std::vector<std::unique_ptr<FakeFabric>> fabrics;
  for (uint16_t lid : {1, 2}) {
    fabrics.push_back(std::make_unique<FakeFabric>(RealClock::Get()));
    for (int r = 0; r < rails; ++r) {
      FakeDeviceConfig d;
      d.name = "mlx5_" + std::to_string(r);
      FakePortConfig p;
      p.lid = static_cast<uint16_t>(lid + 2 * r);
      p.rate_gbps = gbps;
      d.ports = {p};
      fabrics.back()->AddDevice(d);
    }
    if (!fabrics.back()->EnableLoopbackLink(base).ok()) return {};
  }
  return fabrics;
}

std::vector<std::string> Rails(int rails) {
  std::vector<std::string> out;
  for (int r = 0; r < rails; ++r) out.push_back("mlx5_" + std::to_string(r));
  return out;
}

// Two fabrics, as in two agent processes, joined by the loopback link: each sees only its own
// device, and probes cross loopback UDP; loss on one port shows in the results.
TEST(RdmaRunner, LoopbackLinkJoinsTheFabricsOfSeparateProcesses) {
  const uint16_t base = static_cast<uint16_t>(30000 + (::getpid() % 2000) * 10);
  std::vector<std::unique_ptr<FakeFabric>> fabrics = LinkedFabrics(base, 100);
  ASSERT_EQ(fabrics.size(), 2u);
  EXPECT_FALSE(fabrics[0]->EnableLoopbackLink(base).ok()) << "already on";
  fabrics[1]->SetLoss("mlx5_0", 1, 0.5);
  std::mutex mu;
  std::vector<RdmaProbeResult> got;
  RdmaRunnerOptions o;
  o.batch_interval_s = 0.05;
  RdmaRunner a(fabrics[0]->MakeVerbs({"mlx5_0"}), RealClock::Get(), o,
               [&](std::vector<RdmaProbeResult>&& b) {
                 std::lock_guard<std::mutex> l(mu);
                 got.insert(got.end(), b.begin(), b.end());
               });
  RdmaRunner b(fabrics[1]->MakeVerbs({"mlx5_0"}), RealClock::Get(), o, [](auto&&) {});
  ASSERT_TRUE(a.Start().ok());
  ASSERT_TRUE(b.Start().ok());
  UdTarget t;
  t.peer = "node-b";
  t.remote = b.state().endpoints.front();
  t.flows = 2;
  t.rate_hz = 100;
  a.SetTargets({t});
  std::this_thread::sleep_for(std::chrono::milliseconds(2500));
  a.Stop();
  b.Stop();
  std::lock_guard<std::mutex> l(mu);
  size_t answered = 0, lost = 0;
  for (const auto& r : got) {
    if (r.base.lost) {
      ++lost;
    } else {
      ++answered;
      EXPECT_GE(r.network_rtt_ns, 4'000);  // 2 x the fakes' 2 us, plus the UDP hop
    }
  }
  // 50% loss on b's port, both ways: a probe and its ack both cross it (about 3 in 4 lost; the
  // report may be lost on its own too).
  EXPECT_GT(answered, 10u);
  EXPECT_GT(lost, answered);
  EXPECT_GT(fabrics[0]->stats().link_sent, 100u);
  EXPECT_GT(fabrics[1]->stats().link_received, 100u);
  EXPECT_EQ(fabrics[0]->stats().link_refused + fabrics[1]->stats().link_refused, 0u);
}

// Two runners on linked fabrics ("node-a" probes, "node-b" answers) whose RC connection messages
// are passed between them as the aggregator passes them; node-a's results collect in `got`,
// node-b's in `got_b`.
struct RcPair {
  std::vector<std::unique_ptr<FakeFabric>> fabrics;
  std::mutex mu;
  std::vector<RdmaProbeResult> got, got_b;
  std::unique_ptr<RdmaRunner> a, b;

  RcPair(uint16_t base, const RdmaRunnerOptions& o, int rails = 1)
      : fabrics(LinkedFabrics(base, 10, rails)) {
    if (fabrics.size() != 2) return;
    auto to = [](std::unique_ptr<RdmaRunner>& r, const char* from) {
      return [&r, from](const RcConnectMsg& m) {
        RcConnectMsg in = m;
        in.peer = from;
        r->OnRcMessage(std::move(in));
      };
    };
    a = std::make_unique<RdmaRunner>(
        fabrics[0]->MakeVerbs(Rails(rails)), RealClock::Get(), o,
        [this](std::vector<RdmaProbeResult>&& batch) {
          std::lock_guard<std::mutex> l(mu);
          got.insert(got.end(), batch.begin(), batch.end());
        },
        nullptr, to(b, "node-a"));
    b = std::make_unique<RdmaRunner>(
        fabrics[1]->MakeVerbs(Rails(rails)), RealClock::Get(), o,
        [this](std::vector<RdmaProbeResult>&& batch) {
          std::lock_guard<std::mutex> l(mu);
          got_b.insert(got_b.end(), batch.begin(), batch.end());
        },
        nullptr, to(a, "node-b"));
  }
  bool Start() { return fabrics.size() == 2 && a->Start().ok() && b->Start().ok(); }
  // node-a's results of one transport.
  size_t count(net::Transport t = net::Transport::kRdmaRc) {
    std::lock_guard<std::mutex> l(mu);
    return static_cast<size_t>(
        std::count_if(got.begin(), got.end(), [t](auto& r) { return r.base.transport == t; }));
  }
};

// Quick batches and reconnects; the loopback link's ports at a per-test offset.
RdmaRunnerOptions RcOptions() {
  RdmaRunnerOptions o;
  o.batch_interval_s = 0.05;
  o.rc.write.buffer_bytes = 1u << 20;
  o.rc.backoff_base_s = 0.1;
  return o;
}
uint16_t RcBase(int offset) {
  return static_cast<uint16_t>(30000 + (::getpid() % 2000) * 10 + offset);
}

// The time a thread of this process has spent runnable but waiting for a CPU, in ns
// (/proc/self/task/<tid>/schedstat, second field); -1 when the kernel does not say.
int64_t RunQueueWaitNs(int tid) {
  std::ifstream f("/proc/self/task/" + std::to_string(tid) + "/schedstat");
  int64_t on_cpu = -1, waiting = -1;
  if (!(f >> on_cpu >> waiting)) return -1;
  return waiting;
}

// Samples, every 2 ms on its own thread, the summed run-queue wait of some threads against the
// wall clock; WaitedIn() is the wait accrued inside a wall-clock window (widened to the samples
// around it, so it may count a little more than the window's own). The constructor takes the
// first sample before it returns, and Stop() takes a last one, so that every window which began
// after the constructor and ended before Stop() is covered; the sampling thread's own start is
// not ordered against the sampled threads' work (under load it starts milliseconds late). A
// thread that has exited keeps its last reading.
class RunQueueSampler {
 public:
  explicit RunQueueSampler(std::vector<int> tids) : tids_(std::move(tids)), last_(tids_.size(), 0) {
    Sample();
    thread_ = std::thread([this] {
      while (!stop_.load()) {
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
        Sample();
      }
    });
  }
  ~RunQueueSampler() { Stop(); }
  void Stop() {
    stop_.store(true);
    if (!thread_.joinable()) return;
    thread_.join();
    Sample();
  }
  std::string Span() {
    std::lock_guard<std::mutex> l(mu_);
    if (samples_.empty()) return "no samples";
    return std::to_string(samples_.front().wall) + ".." + std::to_string(samples_.back().wall) +
           " (" + std::to_string(samples_.size()) + " samples)";
  }
  // -1 when the samples do not cover the window.
  int64_t WaitedIn(int64_t from_wall_ns, int64_t to_wall_ns) {
    std::lock_guard<std::mutex> l(mu_);
    const Point* before = nullptr;
    const Point* after = nullptr;
    for (const Point& x : samples_) {
      if (x.wall <= from_wall_ns) before = &x;
      if (x.wall >= to_wall_ns && after == nullptr) after = &x;
    }
    if (before == nullptr || after == nullptr) return -1;
    return after->waited - before->waited;
  }

 private:
  void Sample() {
    int64_t sum = 0;
    for (size_t i = 0; i < tids_.size(); ++i) {
      const int64_t w = RunQueueWaitNs(tids_[i]);
      if (w >= 0) last_[i] = w;
      sum += last_[i];
    }
    std::lock_guard<std::mutex> l(mu_);
    samples_.push_back({RealClock::Get().WallNanos(), sum});
  }
  struct Point {
    int64_t wall, waited;
  };
  std::vector<int> tids_;
  std::vector<int64_t> last_;  // per thread, its last reading (written by the constructor, then
                               // by the sampling thread alone, then by Stop() after the join)
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::vector<Point> samples_;
  std::thread thread_;
};

// RC write bursts between two processes' fabrics, the connection messages passed between the
// runners as the aggregator passes them; a completion error tears the QP down and reconnects.
//
// The rate is checked against the fake port's configured 10 Gb/s both ways: no burst above it,
// and the bursts together at least 1 Gb/s (a tenth of it) over the time inside them that the two
// runner threads (the burst's poster and the peer that acknowledges each write across the link)
// were not waiting for a CPU: the bursts' wall time minus both threads' run-queue wait inside
// the bursts (schedstat, sampled every 2 ms). A loaded host (load 8-20 on the 2-core build VM:
// tens of ms of run-queue wait per burst) does not fail it; a burst slow for a reason of its own
// (a lost wakeup, a poll timer in the write loop: time asleep, not waiting for a CPU) still does.
TEST(RdmaRunner, RcBurstsCrossTheLinkAndAQpErrorReconnects) {
  RcPair pair(RcBase(5), RcOptions());
  ASSERT_TRUE(pair.Start());
  std::unique_ptr<RdmaRunner>& a = pair.a;
  std::unique_ptr<RdmaRunner>& b = pair.b;
  std::vector<std::unique_ptr<FakeFabric>>& fabrics = pair.fabrics;
  for (int i = 0; i < 100 && (a->tid() == 0 || b->tid() == 0); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_GE(RunQueueWaitNs(a->tid()), 0) << "no schedstat";
  RunQueueSampler sampler({a->tid(), b->tid()});
  a->SetRcPlan({{"node-b", "mlx5_0", "mlx5_0"}}, 0.1, 4u << 20);
  auto ok_bursts = [&] { return pair.count(); };
  for (int i = 0; i < 100 && ok_bursts() < 3u; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_GE(ok_bursts(), 3u);
  fabrics[0]->FailNextRcWrites("mlx5_0", 1, WcStatus::kRemAccessErr);
  for (int i = 0; i < 100 && a->rc_stats()->bursts.load() < 6; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  a->Stop();
  b->Stop();
  sampler.Stop();
  const RcPeersStats& st = *a->rc_stats();
  EXPECT_EQ(st.qp_errors.load(), 1u);
  EXPECT_EQ(st.reconnects.load(), 1u);
  EXPECT_GE(st.bursts.load(), 6u) << "bursts go on after the reconnect";
  EXPECT_GE(st.connects_sent.load(), 2u);
  EXPECT_GE(b->rc_stats()->answers_sent.load(), 2u);
  std::lock_guard<std::mutex> l(pair.mu);
  double bits = 0, burst_ns = 0, waited_ns = 0;
  for (const auto& r : pair.got) {
    EXPECT_EQ(r.base.transport, net::Transport::kRdmaRc);
    EXPECT_EQ(r.base.PeerName(), "node-b");
    EXPECT_FALSE(r.base.lost) << "a failed burst is counted, not reported";
    EXPECT_EQ(r.base.bytes, 4u << 20);
    // The fake port's 10 Gb/s bounds it; the UDP hop of each write's ack may only slow it.
    EXPECT_LE(r.base.goodput_bps, 10.3e9);
    EXPECT_GT(r.base.rtt_ns, 0) << "the burst's elapsed time";
    const int64_t w = sampler.WaitedIn(r.base.timestamp_ns, r.base.timestamp_ns + r.base.rtt_ns);
    EXPECT_GE(w, 0) << "the samples cover every burst: " << sampler.Span() << " vs burst "
                    << r.base.timestamp_ns << " + " << r.base.rtt_ns;
    bits += static_cast<double>(r.base.bytes) * 8;
    burst_ns += static_cast<double>(r.base.rtt_ns);
    // The samples around a burst can be tens of ms apart at load 15-20: no more than the burst.
    waited_ns += static_cast<double>(std::clamp<int64_t>(w, 0, r.base.rtt_ns));
  }
  // At least a tenth of the burst time is kept, so a rate is always judged: on a quiet host the
  // floor is the plain 1 Gb/s of wall time, under load it falls with the measured wait, to
  // 0.1 Gb/s of wall time at most.
  const double running_ns = std::max(burst_ns - waited_ns, 0.1 * burst_ns);
  const double rate = bits / running_ns * 1e9;
  std::printf(
      "RC bursts: %zu, %.1f ms of burst wall time, %.1f ms of it the two runner threads "
      "waited for a CPU, %.2f Gb/s over the rest (wall-time rate %.2f Gb/s)\n",
      pair.got.size(), burst_ns * 1e-6, waited_ns * 1e-6, rate * 1e-9, bits / burst_ns);
  EXPECT_GE(rate, 1e9) << "a tenth of the fake port's 10 Gb/s over the time the threads ran";
  EXPECT_EQ(st.burst_failures.load(), 1u);
  EXPECT_GE(fabrics[1]->stats().rdma_writes, 6u * 64);
  EXPECT_EQ(fabrics[0]->stats().link_refused + fabrics[1]->stats().link_refused, 0u);
}

// The agent's RC bursts run on the UD mesh's thread (one burst per step, the mesh waiting
// meanwhile): a UD ack or probe that arrives during a burst waits on the agent, not on its host,
// and carries no host delay (UdMesh::NoteBusy; docs/rdma.md "Waits on the agent's own work").
// node-a bursts 16 MiB toward node-b every 0.1 s (13 ms at the fake port's 10 Gb/s) while the two
// probe each other 200 times a second. Without that, node-a's turnarounds that met a burst read
// as long as the burst (the session-10 rdma_fleet_fake flake: a restarted agent named a slow
// host); node-b, which does not burst, is the reference for what this host's scheduling alone
// gives both (load 2-10 on the 2-core build VM).
TEST(RdmaRunner, UdProbesThatWaitForAnRcBurstCarryNoHostDelay) {
  RcPair pair(RcBase(1), RcOptions());
  ASSERT_TRUE(pair.Start());
  std::unique_ptr<RdmaRunner>& a = pair.a;
  std::unique_ptr<RdmaRunner>& b = pair.b;
  auto target = [](const RdmaRunner& to, const char* name) {
    UdTarget t;
    t.peer = name;
    t.remote = to.state().endpoints.front();
    t.rate_hz = 200;
    return t;
  };
  a->SetTargets({target(*b, "node-b")});
  b->SetTargets({target(*a, "node-a")});
  a->SetRcPlan({{"node-b", "mlx5_0", "mlx5_0"}}, 0.1, 16u << 20);
  for (int i = 0; i < 100 && pair.count() < 12u; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  a->Stop();
  b->Stop();
  std::lock_guard<std::mutex> l(pair.mu);
  int64_t shortest = INT64_MAX;
  size_t bursts = 0;
  for (const auto& r : pair.got) {
    if (r.base.transport != net::Transport::kRdmaRc) continue;
    ++bursts;
    shortest = std::min(shortest, r.base.rtt_ns);
  }
  ASSERT_GE(bursts, 10u);
  // Host delays of at least half the shortest burst, by role and node: node-a's roles in the
  // results of the probes it sent (prober) and of those node-b sent it (responder).
  auto long_ones = [&](const std::vector<RdmaProbeResult>& v, bool prober) {
    size_t n = 0, all = 0;
    for (const auto& r : v) {
      if (r.base.transport != net::Transport::kRdmaUd || r.base.lost) continue;
      ++all;
      n += (prober ? r.prober_host_ns : r.responder_host_ns) >= shortest / 2;
    }
    EXPECT_GE(all, 100u);
    return n;
  };
  const size_t a_prober = long_ones(pair.got, true), a_responder = long_ones(pair.got_b, false);
  const size_t b_prober = long_ones(pair.got_b, true), b_responder = long_ones(pair.got, false);
  std::printf(
      "%zu bursts, shortest %.1f ms; UD host delays >= %.1f ms: node-a %zu as prober, %zu "
      "as responder; node-b %zu, %zu; node-a left out %llu prober delays, reported %llu "
      "turnarounds busy\n",
      bursts, shortest * 1e-6, shortest * 0.5e-6, a_prober, a_responder, b_prober, b_responder,
      static_cast<unsigned long long>(a->stats()->busy_prober_delays.load()),
      static_cast<unsigned long long>(a->stats()->busy_turnarounds.load()));
  EXPECT_GT(a->stats()->busy_turnarounds.load(), 0u) << "probes did meet the bursts";
  EXPECT_EQ(b->stats()->peer_busy_turnarounds.load(), a->stats()->busy_turnarounds.load())
      << "each reached node-b as such";
  EXPECT_LE(a_responder, b_responder + bursts / 4);
  EXPECT_LE(a_prober, b_prober + bursts / 4);
}

// Two rails: one RC QP per same-rail NIC pair, each result naming both NICs and its own flow; a
// QP error on one rail reconnects that rail alone while the other keeps bursting.
TEST(RdmaRunner, RcRunsOneQpPerRailAndReconnectsEachApart) {
  RcPair pair(RcBase(3), RcOptions(), 2);
  ASSERT_TRUE(pair.Start());
  pair.a->SetRcPlan({{"node-b", "mlx5_0", "mlx5_0"}, {"node-b", "mlx5_1", "mlx5_1"}}, 0.1,
                    2u << 20);
  auto per_rail = [&] {
    std::lock_guard<std::mutex> l(pair.mu);
    std::map<std::pair<std::string, std::string>, size_t> n;
    for (const auto& r : pair.got) {
      ++n[{std::string(r.LocalDevice()), std::string(r.PeerDevice())}];
    }
    return n;
  };
  auto both_at_least = [&](size_t k) {
    auto n = per_rail();
    return n[{"mlx5_0", "mlx5_0"}] >= k && n[{"mlx5_1", "mlx5_1"}] >= k;
  };
  for (int i = 0; i < 100 && !both_at_least(2); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_TRUE(both_at_least(2));
  EXPECT_EQ(pair.b->rc_stats()->answers_sent.load(), 2u) << "one answering QP per rail";
  const size_t rail0_before = per_rail()[{"mlx5_0", "mlx5_0"}];
  pair.fabrics[0]->FailNextRcWrites("mlx5_1", 1, WcStatus::kRemAccessErr);
  for (int i = 0;
       i < 100 && !(pair.a->rc_stats()->reconnects.load() == 1 && both_at_least(rail0_before + 3));
       ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  pair.a->Stop();
  pair.b->Stop();
  const RcPeersStats& st = *pair.a->rc_stats();
  EXPECT_EQ(st.qp_errors.load(), 1u);
  EXPECT_EQ(st.reconnects.load(), 1u);
  EXPECT_EQ(st.connects_sent.load(), 3u) << "both rails once, the failed rail again";
  EXPECT_GE(pair.b->rc_stats()->answers_sent.load(), 3u);
  auto n = per_rail();
  EXPECT_EQ(n.size(), 2u) << "only same-rail pairs, each naming both NICs";
  const std::pair<std::string, std::string> rail1{"mlx5_1", "mlx5_1"};
  EXPECT_GE(n[rail1], 3u) << "the failed rail bursts again after its reconnect; node-a: bursts "
                          << st.bursts.load() << " failures " << st.burst_failures.load()
                          << " refused " << st.refused.load() << " budget_refused "
                          << st.budget_refused.load() << " timeouts "
                          << st.connect_timeouts.load() << " setup_failures "
                          << st.setup_failures.load() << "; node-b refused "
                          << pair.b->rc_stats()->refused.load();
  std::lock_guard<std::mutex> l(pair.mu);
  for (const auto& r : pair.got) {
    EXPECT_EQ(r.base.flow_id, RailFlowId(r.LocalDevice(), r.PeerDevice()));
  }
  EXPECT_NE(RailFlowId("mlx5_0", "mlx5_0"), RailFlowId("mlx5_1", "mlx5_1"));
}

// A device removed (DEVICE_FATAL) under connected RC QPs: the QPs on it, made on the mesh's
// context and PD, are destroyed before the mesh frees those (verbs refuse to free a PD in use,
// and a closed context's objects dangle: FakeFabricStats::busy_destroys), at once rather than
// after a reopen that may never come; the other rail bursts on undisturbed.
TEST(RdmaRunner, ADeviceRemovedUnderRcQpsDropsThemBeforeItsContext) {
  RcPair pair(RcBase(9), RcOptions(), 2);
  ASSERT_TRUE(pair.Start());
  pair.a->SetRcPlan({{"node-b", "mlx5_0", "mlx5_0"}, {"node-b", "mlx5_1", "mlx5_1"}}, 0.1,
                    2u << 20);
  const std::pair<std::string, std::string> rail0{"mlx5_0", "mlx5_0"}, rail1{"mlx5_1", "mlx5_1"};
  auto bursts = [&](const std::pair<std::string, std::string>& rail) {
    std::lock_guard<std::mutex> l(pair.mu);
    return static_cast<size_t>(std::count_if(pair.got.begin(), pair.got.end(), [&](auto& r) {
      return r.base.transport == net::Transport::kRdmaRc &&
             std::pair<std::string, std::string>(r.LocalDevice(), r.PeerDevice()) == rail;
    }));
  };
  for (int i = 0; i < 100 && (bursts(rail0) < 2 || bursts(rail1) < 2); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_GE(bursts(rail1), 2u);
  const uint64_t reconnects = pair.a->rc_stats()->reconnects.load();
  pair.fabrics[0]->RemoveDevice("mlx5_1");
  const size_t rail0_before = bursts(rail0);
  for (int i = 0; i < 100 && bursts(rail0) < rail0_before + 3; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  const size_t rail1_after = bursts(rail1);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  pair.a->Stop();
  pair.b->Stop();
  const RcPeersStats& st = *pair.a->rc_stats();
  EXPECT_EQ(pair.a->stats()->device_fatal_events.load(), 1u);
  EXPECT_EQ(pair.fabrics[0]->stats().busy_destroys, 0u)
      << "the RC QP, CQ and MR on mlx5_1 outlived its PD or context";
  EXPECT_GE(bursts(rail0), rail0_before + 3) << "the other rail bursts on";
  EXPECT_EQ(bursts(rail1), rail1_after) << "nothing on the removed device";
  // Dropped before a burst met the dead device (without the drop, the next burst on mlx5_1
  // failed); one burst under way at the removal may still fail.
  EXPECT_LE(st.burst_failures.load(), 1u);
  EXPECT_LE(st.reconnects.load(), reconnects + st.burst_failures.load());
  // And the orderly teardown of both runners frees nothing in use either.
  pair.a.reset();
  pair.b.reset();
  EXPECT_EQ(pair.fabrics[0]->stats().busy_destroys, 0u);
  EXPECT_EQ(pair.fabrics[1]->stats().busy_destroys, 0u);
}

// A qualification round's burst runs at once, ahead of a long interval, once per round, and is
// reported with the round as its seq.
TEST(RdmaRunner, ARoundBurstRunsOnceAtOnceWithTheRoundAsSeq) {
  const uint16_t base = static_cast<uint16_t>(30000 + (::getpid() % 2000) * 10 + 7);
  RdmaRunnerOptions o;
  o.batch_interval_s = 0.05;
  o.rc.write.buffer_bytes = 1u << 20;
  RcPair pair(base, o);
  ASSERT_TRUE(pair.Start());
  std::unique_ptr<RdmaRunner>& a = pair.a;
  std::unique_ptr<RdmaRunner>& b = pair.b;
  auto seqs = [&] {
    std::lock_guard<std::mutex> l(pair.mu);
    std::vector<uint64_t> out;
    for (const auto& r : pair.got) out.push_back(r.base.seq);
    return out;
  };
  auto wait_for = [&](size_t n) {
    for (int i = 0; i < 100 && seqs().size() < n; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  };
  // The first burst follows the exchange; the interval (300 s) would hold the next back.
  a->SetRcPlan({{"node-b", "mlx5_0", "mlx5_0", 77}}, 300, 1u << 20);
  wait_for(1);
  a->SetRcPlan({{"node-b", "mlx5_0", "mlx5_0", 77}}, 300, 1u << 20);  // the same round again
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_EQ(seqs(), std::vector<uint64_t>({77}));
  a->SetRcPlan({{"node-b", "mlx5_0", "mlx5_0", 78}}, 300, 1u << 20);  // connected: at once
  wait_for(2);
  a->Stop();
  b->Stop();
  EXPECT_EQ(seqs(), std::vector<uint64_t>({77, 78}));
  EXPECT_EQ(a->rc_stats()->connects_sent.load(), 1u) << "a round reuses the connection";
}

}  // namespace
}  // namespace fw::rdma
