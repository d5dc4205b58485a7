// RC write bursts against the fake fabric's configured port rate.
#include "probes/rdma/rc_write_bw.h"

#include <gtest/gtest.h>

#include "probes/rdma/fake_verbs.h"

namespace fw::rdma {
namespace {

FakeDeviceConfig Ib(const std::string& name, uint16_t lid, double gbps) {
  FakeDeviceConfig d;
  d.name = name;
  FakePortConfig p;
  p.lid = lid;
  p.rate_gbps = gbps;
  p.latency_ns = 2'000;
  d.ports = {p};
  return d;
}

class RcTest : public ::testing::Test {
 protected:
  void Start(double gbps_a, double gbps_b, RcWriteOptions o = {}) {
    fabric.AddDevice(Ib("a", 1, gbps_a));
    fabric.AddDevice(Ib("b", 2, gbps_b));
    fabric.SetAutoAdvance(&clock);  // bursts run in virtual time
    verbs = fabric.MakeVerbs({"a", "b"});
    ctx_a = std::move(verbs->Open("a").value());
    ctx_b = std::move(verbs->Open("b").value());
    pd_a = std::move(ctx_a->AllocPd().value());
    pd_b = std::move(ctx_b->AllocPd().value());
    auto wa = RcWriteBw::Create(*ctx_a, *pd_a, 1, 0, o, 1);
    auto wb = RcWriteBw::Create(*ctx_b, *pd_b, 1, 0, o, 2);
    ASSERT_TRUE(wa.ok()) << wa.status().ToString();
    ASSERT_TRUE(wb.ok()) << wb.status().ToString();
    a = std::move(wa.value());
    b = std::move(wb.value());
    ASSERT_TRUE(a->Connect(b->local()).ok());
    ASSERT_TRUE(b->Connect(a->local()).ok());
  }
  FakeClock clock;
  FakeFabric fabric{clock};
  std::unique_ptr<Verbs> verbs;
  std::unique_ptr<Context> ctx_a, ctx_b;
  std::unique_ptr<Pd> pd_a, pd_b;
  std::unique_ptr<RcWriteBw> a, b;
};

TEST_F(RcTest, GoodputMatchesTheConfiguredPortRate) {
  Start(100, 100);
  auto r = a->RunBurst(clock);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->bytes, 64ull << 20);
  EXPECT_EQ(r->writes, 1024);
  // 64 MiB at 100 Gb/s is 5.37 ms; the 4 us round trip of the last write costs 0.07%.
  EXPECT_NEAR(r->gbps, 100.0, 0.5);
  EXPECT_EQ(fabric.stats().rdma_writes, 1024u);
}

TEST_F(RcTest, ASlowerLinkShowsItsRate) {
  Start(100, 100);
  fabric.SetRate("a", 1, 25);
  auto r = a->RunBurst(clock);
  ASSERT_TRUE(r.ok());
  EXPECT_NEAR(r->gbps, 25.0, 0.2);
}

TEST_F(RcTest, ShallowQueueDepthIsLatencyBound) {
  RcWriteOptions o;
  o.queue_depth = 1;
  o.burst_bytes = 4ull << 20;
  Start(100, 100, o);
  fabric.SetLatency("a", 1, 20'000);
  // One 64 KiB write per round trip: 5.2 us on the wire + 20 us out + 2 us back.
  auto r = a->RunBurst(clock);
  ASSERT_TRUE(r.ok());
  const double expect = 65536 * 8.0 / (65536 * 8.0 / 100 + 22'000);
  EXPECT_NEAR(r->gbps, expect, expect * 0.02);
}

TEST_F(RcTest, AWrongRkeyBreaksTheQpAndReconnectRestoresIt) {
  RcWriteOptions o;
  o.burst_bytes = 1 << 20;
  Start(100, 100, o);
  RcEndpoint bad = b->local();
  bad.rkey ^= 0x100;
  ASSERT_TRUE(a->Reconnect(&bad).ok());
  auto r = a->RunBurst(clock);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable);
  EXPECT_TRUE(a->broken());
  EXPECT_EQ(a->stats().completion_errors, 1u);
  EXPECT_EQ(a->RunBurst(clock).status().code(), StatusCode::kFailedPrecondition)
      << "a broken QP is not used until it is reconnected";
  // Reconnect with the right key; the peer learns our new PSN and reconnects as well.
  const RcEndpoint good = b->local();
  Status rs = a->Reconnect(&good);
  ASSERT_TRUE(rs.ok()) << rs.ToString();
  const RcEndpoint a_now = a->local();
  ASSERT_TRUE(b->Reconnect(&a_now).ok());
  EXPECT_EQ(a->stats().reconnects, 2u);
  // Writes of the failed burst still on the wire hold the port for ~84 us; let them drain.
  clock.Advance(std::chrono::milliseconds(1));
  auto ok = a->RunBurst(clock);
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  // 1 MiB takes 84 us at 100 Gb/s, plus the 4 us round trip of the last write: 95.5 Gb/s.
  EXPECT_NEAR(ok->gbps, 95.5, 0.5);
}

TEST_F(RcTest, TheBudgetPaysTheWholeBurstOrNothingIsSent) {
  Start(100, 100);
  net::ProbeBudget budget(clock, 1e6, 32 << 20, 1.0);  // 32 MB/s: a 64 MiB burst cannot pass
  auto r = a->RunBurst(clock, &budget);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(fabric.stats().rdma_writes, 0u);
  EXPECT_EQ(a->stats().budget_refused, 1u);
}

TEST(RcMemlock, ABufferOverTheLockedMemoryLimitIsRefusedWithAHint) {
  FakeClock clock;
  FakeFabric fabric(clock);
  FakeDeviceConfig d = Ib("a", 1, 100);
  d.memlock_limit_bytes = 512 << 10;
  fabric.AddDevice(d);
  auto verbs = fabric.MakeVerbs({"a"});
  auto ctx = std::move(verbs->Open("a").value());
  auto pd = std::move(ctx->AllocPd().value());
  auto w = RcWriteBw::Create(*ctx, *pd, 1, 0, {});
  ASSERT_FALSE(w.ok());
  EXPECT_EQ(w.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(w.status().message().find("LimitMEMLOCK"), std::string::npos);
}

// One registered buffer per NIC for all its RC QPs: node a bursts toward three peers and they
// toward it, each QP its own connection, under a locked-memory limit that holds 1.5 buffers of
// 1 MiB. Buffers of their own would need four on a (refused from the second on).
TEST(RcSharedBuffer, EveryQpOfAPdWritesFromAndIntoOneBuffer) {
  FakeClock clock;
  FakeFabric fabric(clock);
  for (auto [name, lid] : {std::pair<const char*, uint16_t>{"a", 1}, {"b", 2}, {"c", 3}, {"d", 4}}) {
    FakeDeviceConfig d = Ib(name, lid, 100);
    d.memlock_limit_bytes = 3 << 19;
    fabric.AddDevice(d);
  }
  fabric.SetAutoAdvance(&clock);
  auto verbs = fabric.MakeVerbs({"a", "b", "c", "d"});
  RcWriteOptions o;
  o.burst_bytes = 4 << 20;
  struct Node {
    std::unique_ptr<Context> ctx;
    std::unique_ptr<Pd> pd;
    std::shared_ptr<RcBuffer> buffer;
  };
  std::vector<Node> nodes;
  for (const char* name : {"a", "b", "c", "d"}) {
    Node n;
    n.ctx = std::move(verbs->Open(name).value());
    n.pd = std::move(n.ctx->AllocPd().value());
    auto b = RcBuffer::Create(*n.ctx, *n.pd, o.buffer_bytes);
    ASSERT_TRUE(b.ok()) << b.status().ToString();
    n.buffer = std::move(b.value());
    nodes.push_back(std::move(n));
  }
  // A buffer of its own no longer fits on a beside the shared one.
  EXPECT_EQ(RcWriteBw::Create(*nodes[0].ctx, *nodes[0].pd, 1, 0, o, 9).status().code(),
            StatusCode::kResourceExhausted);
  // Another PD's buffer is refused.
  EXPECT_EQ(
      RcWriteBw::Create(*nodes[0].ctx, *nodes[0].pd, 1, 0, o, 9, nodes[1].buffer).status().code(),
      StatusCode::kInvalidArgument);
  std::vector<std::unique_ptr<RcWriteBw>> from_a, to_a;
  for (size_t peer = 1; peer < nodes.size(); ++peer) {
    auto x = RcWriteBw::Create(*nodes[0].ctx, *nodes[0].pd, 1, 0, o, peer, nodes[0].buffer);
    auto y = RcWriteBw::Create(*nodes[peer].ctx, *nodes[peer].pd, 1, 0, o, 10 + peer,
                               nodes[peer].buffer);
    ASSERT_TRUE(x.ok()) << x.status().ToString();
    ASSERT_TRUE(y.ok()) << y.status().ToString();
    ASSERT_TRUE(x.value()->Connect(y.value()->local()).ok());
    ASSERT_TRUE(y.value()->Connect(x.value()->local()).ok());
    EXPECT_EQ(x.value()->local().addr, reinterpret_cast<uint64_t>(nodes[0].buffer->data()));
    from_a.push_back(std::move(x.value()));
    to_a.push_back(std::move(y.value()));
  }
  EXPECT_EQ(nodes[0].buffer.use_count(), 4) << "three QPs and the test";
  for (size_t i = 0; i < from_a.size(); ++i) {
    auto out = from_a[i]->RunBurst(clock);
    ASSERT_TRUE(out.ok()) << out.status().ToString();
    EXPECT_NEAR(out->gbps, 100.0, 2.0);
    auto in = to_a[i]->RunBurst(clock);
    ASSERT_TRUE(in.ok()) << in.status().ToString();
    EXPECT_NEAR(in->gbps, 100.0, 2.0);
  }
  EXPECT_EQ(fabric.stats().rdma_writes, 6u * 64);
  // The buffer goes with the last QP (before the PD).
  std::weak_ptr<RcBuffer> held = nodes[0].buffer;
  nodes[0].buffer.reset();
  EXPECT_FALSE(held.expired());
  from_a.clear();
  EXPECT_TRUE(held.expired());
}

}  // namespace
}  // namespace fw::rdma
