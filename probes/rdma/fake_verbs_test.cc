// The fake verbs fabric enforces what hardware enforces; these tests pin each rule.
#include "probes/rdma/fake_verbs.h"

#include <gtest/gtest.h>
#include <poll.h>
#include <unistd.h>

#include <cstring>

namespace fw::rdma {
namespace {

using namespace std::chrono_literals;

Gid MakeGid(uint8_t last, bool v4mapped = true) {
  Gid g;
  if (v4mapped) {
    g.raw[10] = g.raw[11] = 0xff;
    g.raw[12] = 198;
    g.raw[13] = 18;
    g.raw[14] = 0;
  } else {
    g.raw[0] = 0xfe;
    g.raw[1] = 0x80;
  }
  g.raw[15] = last;
  return g;
}

AhAttr LidAh(uint16_t lid) {
  AhAttr a;
  a.dlid = lid;
  return a;
}

FakeDeviceConfig IbDevice(const std::string& name, uint16_t lid) {
  FakeDeviceConfig d;
  d.name = name;
  FakePortConfig p;
  p.link_layer = LinkLayer::kInfiniBand;
  p.lid = lid;
  Gid g = MakeGid(static_cast<uint8_t>(lid), false);
  p.gids = {{0, g, GidType::kIb, ""}};
  d.ports = {p};
  return d;
}

FakeDeviceConfig RoceDevice(const std::string& name, uint8_t addr) {
  FakeDeviceConfig d;
  d.name = name;
  FakePortConfig p;
  p.link_layer = LinkLayer::kEthernet;
  p.gids = {{0, MakeGid(addr, false), GidType::kRoceV1, "eth0"},
            {1, MakeGid(addr, false), GidType::kRoceV2, "eth0"},
            {2, MakeGid(addr), GidType::kRoceV1, "eth0"},
            {3, MakeGid(addr), GidType::kRoceV2, "eth0"}};
  d.ports = {p};
  return d;
}

// One UD (or RC) endpoint on a fake device, with a registered buffer.
struct Endpoint {
  std::unique_ptr<Context> ctx;
  std::unique_ptr<Pd> pd;
  std::vector<uint8_t> mem = std::vector<uint8_t>(1 << 16);
  std::unique_ptr<Mr> mr;
  std::unique_ptr<Cq> scq, rcq;
  std::unique_ptr<Qp> qp;

  Endpoint(Verbs& v, const std::string& dev, QpType type,
           CqTimestamps ts = CqTimestamps::kWallclock) {
    ctx = std::move(v.Open(dev).value());
    pd = std::move(ctx->AllocPd().value());
    mr = std::move(
        ctx->RegMr(*pd, mem.data(), mem.size(), kAccessLocalWrite | kAccessRemoteWrite).value());
    scq = std::move(ctx->CreateCq(64, ts).value());
    rcq = std::move(ctx->CreateCq(64, ts).value());
    qp = std::move(ctx->CreateQp(*pd, *scq, *rcq, type, {}).value());
  }
  Status UdToRts() {
    QpAttr a;
    a.state = QpState::kInit;
    a.qkey = kProbeQkey;
    Status s = qp->Modify(a, kQpState | kQpPkeyIndex | kQpPort | kQpQkey);
    if (!s.ok()) return s;
    a.state = QpState::kRtr;
    s = qp->Modify(a, kQpState);
    if (!s.ok()) return s;
    a.state = QpState::kRts;
    return qp->Modify(a, kQpState | kQpSqPsn);
  }
  Sge At(size_t off, uint32_t len) {
    return {reinterpret_cast<uint64_t>(mem.data() + off), len, mr->lkey()};
  }
  Status Recv(uint64_t id, size_t off = 0, uint32_t len = 1024) {
    return qp->PostRecv({id, At(off, len)});
  }
  std::vector<WorkCompletion> Drain(Cq& cq) {
    std::vector<WorkCompletion> out(16);
    auto n = cq.Poll(out.data(), 16);
    out.resize(n.ok() ? *n : 0);
    return out;
  }
};

class FakeVerbsTest : public ::testing::Test {
 protected:
  FakeClock clock;
  FakeFabric fabric{clock};
};

TEST_F(FakeVerbsTest, UdQpFollowsTheStateOrderWithExactlyTheRequiredAttributes) {
  fabric.AddDevice(IbDevice("mlx5_0", 1));
  auto verbs = fabric.MakeVerbs({"mlx5_0"});
  Endpoint e(*verbs, "mlx5_0", QpType::kUd);
  QpAttr a;
  a.qkey = kProbeQkey;
  a.state = QpState::kRtr;
  EXPECT_FALSE(e.qp->Modify(a, kQpState).ok()) << "RESET -> RTR skips INIT";
  a.state = QpState::kInit;
  EXPECT_FALSE(e.qp->Modify(a, kQpState | kQpPkeyIndex | kQpPort).ok()) << "UD INIT needs QKey";
  EXPECT_FALSE(e.qp->Modify(a, kQpState | kQpPkeyIndex | kQpPort | kQpQkey | kQpAccessFlags).ok())
      << "access flags are not a UD attribute";
  EXPECT_FALSE(e.qp->Modify(a, kQpPkeyIndex | kQpPort | kQpQkey).ok()) << "no state";
  EXPECT_FALSE(e.qp->PostRecv({1, e.At(0, 1024)}).ok()) << "receives need INIT";
  ASSERT_TRUE(e.qp->Modify(a, kQpState | kQpPkeyIndex | kQpPort | kQpQkey).ok());
  EXPECT_TRUE(e.Recv(1).ok());
  a.state = QpState::kRts;
  EXPECT_FALSE(e.qp->Modify(a, kQpState | kQpSqPsn).ok()) << "INIT -> RTS skips RTR";
  a.state = QpState::kRtr;
  ASSERT_TRUE(e.qp->Modify(a, kQpState).ok());
  a.state = QpState::kRts;
  EXPECT_FALSE(e.qp->Modify(a, kQpState).ok()) << "RTS needs the SQ PSN";
  ASSERT_TRUE(e.qp->Modify(a, kQpState | kQpSqPsn).ok());
  // Back through RESET, which drops what was posted.
  a.state = QpState::kReset;
  ASSERT_TRUE(e.qp->Modify(a, kQpState).ok());
  EXPECT_TRUE(e.UdToRts().ok());
}

TEST_F(FakeVerbsTest, SendsNeedRts) {
  fabric.AddDevice(IbDevice("mlx5_0", 1));
  auto verbs = fabric.MakeVerbs({"mlx5_0"});
  Endpoint e(*verbs, "mlx5_0", QpType::kUd);
  auto ah = e.ctx->CreateAh(*e.pd, LidAh(1));
  ASSERT_TRUE(ah.ok());
  SendWr w;
  w.sge = e.At(0, 64);
  w.ah = ah->get();
  w.remote_qpn = e.qp->qp_num();
  w.remote_qkey = kProbeQkey;
  EXPECT_EQ(e.qp->PostSend(w).code(), StatusCode::kFailedPrecondition);
  ASSERT_TRUE(e.UdToRts().ok());
  EXPECT_TRUE(e.qp->PostSend(w).ok());
}

TEST_F(FakeVerbsTest, RcQpNeedsItsPathAttributesAndAGrhOnRoce) {
  fabric.AddDevice(RoceDevice("mlx5_0", 1));
  auto verbs = fabric.MakeVerbs({"mlx5_0"});
  Endpoint e(*verbs, "mlx5_0", QpType::kRc);
  QpAttr a;
  a.state = QpState::kInit;
  EXPECT_FALSE(e.qp->Modify(a, kQpState | kQpPkeyIndex | kQpPort | kQpQkey).ok())
      << "RC INIT takes access flags, not a QKey";
  a.access_flags = kAccessRemoteWrite | kAccessLocalWrite;
  ASSERT_TRUE(e.qp->Modify(a, kQpState | kQpPkeyIndex | kQpPort | kQpAccessFlags).ok());
  a.state = QpState::kRtr;
  a.dest_qpn = e.qp->qp_num();
  a.path_mtu_bytes = 1024;
  const uint32_t rtr =
      kQpState | kQpAv | kQpPathMtu | kQpDestQpn | kQpRqPsn | kQpMaxDestRdAtomic | kQpMinRnrTimer;
  EXPECT_FALSE(e.qp->Modify(a, rtr & ~kQpDestQpn).ok()) << "RTR needs the remote QPN";
  EXPECT_FALSE(e.qp->Modify(a, rtr).ok()) << "RoCE needs a GRH";
  a.av.is_global = true;
  a.av.dgid = MakeGid(1);
  a.av.sgid_index = 7;
  EXPECT_FALSE(e.qp->Modify(a, rtr).ok()) << "source GID index 7 does not exist";
  a.av.sgid_index = 3;
  a.path_mtu_bytes = 8192;
  EXPECT_FALSE(e.qp->Modify(a, rtr).ok()) << "path MTU above the port's";
  a.path_mtu_bytes = 1024;
  ASSERT_TRUE(e.qp->Modify(a, rtr).ok());
  a.state = QpState::kRts;
  const uint32_t rts =
      kQpState | kQpSqPsn | kQpTimeout | kQpRetryCnt | kQpRnrRetry | kQpMaxQpRdAtomic;
  EXPECT_FALSE(e.qp->Modify(a, rts & ~kQpTimeout).ok()) << "RTS needs the ack timeout";
  EXPECT_TRUE(e.qp->Modify(a, rts).ok());
}

TEST_F(FakeVerbsTest, AddressHandlesUseALidOnIbAndAGidOnRoce) {
  fabric.AddDevice(IbDevice("ib0", 7));
  fabric.AddDevice(RoceDevice("roce0", 9));
  auto verbs = fabric.MakeVerbs({"ib0", "roce0"});
  Endpoint ib(*verbs, "ib0", QpType::kUd);
  Endpoint roce(*verbs, "roce0", QpType::kUd);
  EXPECT_FALSE(ib.ctx->CreateAh(*ib.pd, LidAh(0)).ok());
  EXPECT_TRUE(ib.ctx->CreateAh(*ib.pd, LidAh(7)).ok());
  EXPECT_FALSE(roce.ctx->CreateAh(*roce.pd, LidAh(7)).ok());
  EXPECT_TRUE(
      roce.ctx
          ->CreateAh(*roce.pd, {.port = 1, .is_global = true, .dgid = MakeGid(9), .sgid_index = 3})
          .ok());
  EXPECT_FALSE(
      roce.ctx->CreateAh(*roce.pd, {.port = 2, .is_global = true, .dgid = MakeGid(9)}).ok());
}

// Two UD endpoints that send one datagram; returns the receiver's completions after delivery.
class UdPair : public FakeVerbsTest {
 protected:
  void SetUp() override {
    fabric.AddDevice(RoceDevice("a", 1));
    fabric.AddDevice(RoceDevice("b", 2));
    verbs = fabric.MakeVerbs({"a", "b"});
    a = std::make_unique<Endpoint>(*verbs, "a", QpType::kUd);
    b = std::make_unique<Endpoint>(*verbs, "b", QpType::kUd);
    ASSERT_TRUE(a->UdToRts().ok());
    ASSERT_TRUE(b->UdToRts().ok());
    ah = std::move(a->ctx
                       ->CreateAh(*a->pd, {.port = 1,
                                           .is_global = true,
                                           .dgid = MakeGid(2),
                                           .sgid_index = 3,
                                           .flow_label = 0x12345,
                                           .traffic_class = 106})
                       .value());
  }
  Status Send(const char* text, uint32_t qkey = kProbeQkey) {
    std::memcpy(a->mem.data() + 4096, text, std::strlen(text));
    SendWr w;
    w.wr_id = 77;
    w.sge = a->At(4096, static_cast<uint32_t>(std::strlen(text)));
    w.ah = ah.get();
    w.remote_qpn = b->qp->qp_num();
    w.remote_qkey = qkey;
    return a->qp->PostSend(w);
  }
  std::unique_ptr<Verbs> verbs;
  std::unique_ptr<Endpoint> a, b;
  std::unique_ptr<Ah> ah;
};

TEST_F(UdPair, AReceiveBufferGetsTheGrhThenThePayload) {
  ASSERT_TRUE(b->Recv(5, 0, 256).ok());
  ASSERT_TRUE(Send("hello").ok());
  EXPECT_TRUE(b->Drain(*b->rcq).empty()) << "nothing arrives before the latency";
  clock.Advance(10us);
  auto wcs = b->Drain(*b->rcq);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, WcStatus::kSuccess);
  EXPECT_EQ(wcs[0].wr_id, 5u);
  EXPECT_EQ(wcs[0].byte_len, kGrhBytes + 5);
  EXPECT_EQ(wcs[0].src_qp, a->qp->qp_num());
  EXPECT_EQ(std::memcmp(b->mem.data() + kGrhBytes, "hello", 5), 0);
  // The GRH: IPv6-shaped, with the traffic class, flow label and both GIDs.
  EXPECT_EQ(b->mem[0] >> 4, 6);
  EXPECT_EQ(((b->mem[0] & 0xf) << 4) | (b->mem[1] >> 4), 106);
  EXPECT_EQ(((b->mem[1] & 0xf) << 16) | (b->mem[2] << 8) | b->mem[3], 0x12345);
  EXPECT_EQ(std::memcmp(b->mem.data() + 8, MakeGid(1).raw.data(), 16), 0);
  EXPECT_EQ(std::memcmp(b->mem.data() + 24, MakeGid(2).raw.data(), 16), 0);
  auto sent = a->Drain(*a->scq);
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].opcode, WcOpcode::kSend);
  EXPECT_EQ(sent[0].wr_id, 77u);
}

TEST_F(UdPair, ADatagramWithNoReceivePostedIsDropped) {
  ASSERT_TRUE(Send("early").ok());
  clock.Advance(10us);
  EXPECT_TRUE(b->Drain(*b->rcq).empty());
  EXPECT_EQ(fabric.stats().dropped_no_recv, 1u);
  ASSERT_TRUE(b->Recv(1).ok());
  ASSERT_TRUE(Send("later").ok());
  clock.Advance(10us);
  EXPECT_EQ(b->Drain(*b->rcq).size(), 1u);
}

TEST_F(UdPair, AWrongQkeyIsDropped) {
  ASSERT_TRUE(b->Recv(1).ok());
  ASSERT_TRUE(Send("x", 0x1234).ok());
  clock.Advance(10us);
  EXPECT_TRUE(b->Drain(*b->rcq).empty());
  EXPECT_EQ(fabric.stats().dropped_qkey, 1u);
}

TEST_F(UdPair, AReceiveBufferWithoutRoomForTheGrhFailsWithLocLenErr) {
  ASSERT_TRUE(b->Recv(1, 0, 30).ok());  // 5 payload bytes fit, the 40-byte GRH does not
  ASSERT_TRUE(b->Recv(2, 1024, 256).ok());
  ASSERT_TRUE(Send("hello").ok());
  clock.Advance(10us);
  auto wcs = b->Drain(*b->rcq);
  ASSERT_EQ(wcs.size(), 2u);
  EXPECT_EQ(wcs[0].status, WcStatus::kLocLenErr);
  EXPECT_EQ(wcs[1].status, WcStatus::kWrFlushErr) << "the QP went to ERR and flushed";
}

TEST_F(UdPair, AnSgeOutsideRegisteredMemoryFailsWithLocProtErr) {
  ASSERT_TRUE(b->Recv(1).ok());
  std::vector<uint8_t> unregistered(64);
  SendWr w;
  w.wr_id = 9;
  w.sge = {reinterpret_cast<uint64_t>(unregistered.data()), 64, a->mr->lkey()};
  w.ah = ah.get();
  w.remote_qpn = b->qp->qp_num();
  w.remote_qkey = kProbeQkey;
  ASSERT_TRUE(a->qp->PostSend(w).ok());
  auto wcs = a->Drain(*a->scq);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, WcStatus::kLocProtErr);
  // A wrong lkey over registered memory fails the same way; the QP is in ERR now, so it flushes.
  w.sge = a->At(0, 64);
  w.sge.lkey ^= 1;
  ASSERT_TRUE(a->qp->PostSend(w).ok());
  wcs = a->Drain(*a->scq);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, WcStatus::kWrFlushErr);
}

TEST_F(UdPair, LossDropsDatagramsAtTheConfiguredRate) {
  fabric.SetLoss("b", 1, 0.25);
  int got = 0;
  for (int i = 0; i < 2000; ++i) {
    ASSERT_TRUE(b->Recv(static_cast<uint64_t>(i)).ok());
    ASSERT_TRUE(Send("p").ok());
    clock.Advance(10us);
    got += static_cast<int>(b->Drain(*b->rcq).size());
    a->Drain(*a->scq);
    // Receives left posted by lost datagrams pile up; reset the queue now and then.
    if (i % 32 == 31) {
      QpAttr r;
      r.state = QpState::kReset;
      ASSERT_TRUE(b->qp->Modify(r, kQpState).ok());
      ASSERT_TRUE(b->UdToRts().ok());
    }
  }
  EXPECT_NEAR(got / 2000.0, 0.75, 0.04);
  EXPECT_EQ(fabric.stats().dropped_loss, static_cast<uint64_t>(2000 - got));
}

TEST_F(UdPair, InjectedSendErrorsPutTheQpInErrorUntilItIsReset) {
  fabric.FailNextSends("a", 1, WcStatus::kGeneralErr);
  ASSERT_TRUE(Send("x").ok());
  auto wcs = a->Drain(*a->scq);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, WcStatus::kGeneralErr);
  ASSERT_TRUE(Send("y").ok());
  wcs = a->Drain(*a->scq);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, WcStatus::kWrFlushErr);
  QpAttr r;
  r.state = QpState::kRts;
  EXPECT_FALSE(a->qp->Modify(r, kQpState | kQpSqPsn).ok()) << "ERR leads only to RESET";
  r.state = QpState::kReset;
  ASSERT_TRUE(a->qp->Modify(r, kQpState).ok());
  ASSERT_TRUE(a->UdToRts().ok());
  ASSERT_TRUE(b->Recv(1).ok());
  ASSERT_TRUE(Send("z").ok());
  clock.Advance(10us);
  EXPECT_EQ(b->Drain(*b->rcq).size(), 1u);
}

TEST_F(FakeVerbsTest, CompletionTimestampsRunOnEachNicsOwnClock) {
  FakeDeviceConfig da = IbDevice("a", 1), db = IbDevice("b", 2);
  da.hca_core_clock_khz = 156'250;  // 156.25 MHz, a ConnectX-class core clock
  da.clock_offset_ns = 123'456'789;
  db.clock_offset_ns = -5'000'000;
  db.timestamps = CqTimestamps::kRaw;
  fabric.AddDevice(da);
  fabric.AddDevice(db);
  auto verbs = fabric.MakeVerbs({"a", "b"});
  Endpoint a(*verbs, "a", QpType::kUd, CqTimestamps::kRaw);
  EXPECT_FALSE(verbs->Open("b").value()->CreateCq(8, CqTimestamps::kWallclock).ok())
      << "device b has raw stamps only";
  Endpoint b(*verbs, "b", QpType::kUd, CqTimestamps::kRaw);
  auto dev = a.ctx->QueryDevice();
  ASSERT_TRUE(dev.ok());
  EXPECT_EQ(dev->hca_core_clock_khz, 156'250u);
  ASSERT_TRUE(a.UdToRts().ok());
  ASSERT_TRUE(b.UdToRts().ok());
  ASSERT_TRUE(b.Recv(1).ok());
  auto ah = a.ctx->CreateAh(*a.pd, LidAh(2));
  const auto before = a.ctx->QueryRawClock();
  ASSERT_TRUE(before.ok());
  SendWr w;
  w.sge = a.At(0, 64);
  w.ah = ah->get();
  w.remote_qpn = b.qp->qp_num();
  w.remote_qkey = kProbeQkey;
  ASSERT_TRUE(a.qp->PostSend(w).ok());
  clock.Advance(1ms);
  auto sent = a.Drain(*a.scq);
  ASSERT_EQ(sent.size(), 1u);
  // 64 bytes at 100 Gb/s take 5 ns; at 156.25 MHz that is 0 ticks after the post.
  EXPECT_LE(sent[0].ts_raw - *before, 1u);
  const uint64_t now_ticks = *a.ctx->QueryRawClock();
  EXPECT_EQ(now_ticks - *before, 156'250u) << "1 ms at 156.25 MHz";
  auto got = b.Drain(*b.rcq);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].ts_wallclock, 0u);
  EXPECT_NE(got[0].ts_raw, 0u);
}

TEST_F(FakeVerbsTest, PollDelayHidesCompletionsThatTheNicHasStamped) {
  fabric.AddDevice(IbDevice("a", 1));
  fabric.SetPollDelay("a", 50'000);
  auto verbs = fabric.MakeVerbs({"a"});
  Endpoint a(*verbs, "a", QpType::kUd);
  ASSERT_TRUE(a.UdToRts().ok());
  auto ah = a.ctx->CreateAh(*a.pd, LidAh(1));
  SendWr w;
  w.sge = a.At(0, 8);
  w.ah = ah->get();
  w.remote_qpn = a.qp->qp_num();
  w.remote_qkey = kProbeQkey;
  const int64_t t0 = clock.WallNanos();
  ASSERT_TRUE(a.qp->PostSend(w).ok());
  clock.Advance(20us);
  EXPECT_TRUE(a.Drain(*a.scq).empty());
  clock.Advance(40us);
  auto wcs = a.Drain(*a.scq);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_LT(static_cast<int64_t>(wcs[0].ts_wallclock) - t0, 1000) << "stamped at the send";
}

TEST_F(FakeVerbsTest, PortEventsReachTheAsyncFd) {
  fabric.AddDevice(IbDevice("a", 1));
  auto verbs = fabric.MakeVerbs({"a"});
  auto ctx = std::move(verbs->Open("a").value());
  EXPECT_EQ(ctx->GetAsyncEvent().status().code(), StatusCode::kNotFound);
  fabric.SetPortState("a", 1, PortState::kDown);
  pollfd p{ctx->async_fd(), POLLIN, 0};
  ASSERT_EQ(::poll(&p, 1, 0), 1);
  auto ev = ctx->GetAsyncEvent();
  ASSERT_TRUE(ev.ok());
  EXPECT_EQ(ev->type, AsyncEventType::kPortError);
  EXPECT_EQ(ev->port, 1);
  EXPECT_EQ(ctx->QueryPort(1)->state, PortState::kDown);
  EXPECT_EQ(::poll(&p, 1, 0), 0) << "drained";
  fabric.SetPortState("a", 1, PortState::kActive);
  EXPECT_EQ(ctx->GetAsyncEvent()->type, AsyncEventType::kPortActive);
  fabric.RemoveDevice("a");
  EXPECT_EQ(ctx->GetAsyncEvent()->type, AsyncEventType::kDeviceFatal);
  EXPECT_EQ(ctx->QueryPort(1).status().code(), StatusCode::kUnavailable);
  EXPECT_TRUE(verbs->ListDevices()->empty());
}

TEST_F(FakeVerbsTest, RegisteringPastTheLockedMemoryLimitFails) {
  FakeDeviceConfig d = IbDevice("a", 1);
  d.memlock_limit_bytes = 1 << 20;
  fabric.AddDevice(d);
  auto verbs = fabric.MakeVerbs({"a"});
  auto ctx = std::move(verbs->Open("a").value());
  auto pd = std::move(ctx->AllocPd().value());
  std::vector<uint8_t> big(2 << 20);
  auto mr = ctx->RegMr(*pd, big.data(), big.size(), kAccessLocalWrite);
  ASSERT_FALSE(mr.ok());
  EXPECT_EQ(mr.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(mr.status().message().find("locked-memory"), std::string::npos);
  EXPECT_TRUE(ctx->RegMr(*pd, big.data(), 1 << 19, kAccessLocalWrite).ok());
}

TEST_F(FakeVerbsTest, RdmaWriteNeedsTheRightRkey) {
  fabric.AddDevice(IbDevice("a", 1));
  fabric.AddDevice(IbDevice("b", 2));
  auto verbs = fabric.MakeVerbs({"a", "b"});
  Endpoint a(*verbs, "a", QpType::kRc), b(*verbs, "b", QpType::kRc);
  auto connect = [](Endpoint& e, uint16_t dlid, uint32_t qpn) {
    QpAttr q;
    q.state = QpState::kInit;
    q.access_flags = kAccessRemoteWrite | kAccessLocalWrite;
    ASSERT_TRUE(e.qp->Modify(q, kQpState | kQpPkeyIndex | kQpPort | kQpAccessFlags).ok());
    q.state = QpState::kRtr;
    q.av.dlid = dlid;
    q.dest_qpn = qpn;
    ASSERT_TRUE(e.qp->Modify(q, kQpState | kQpAv | kQpPathMtu | kQpDestQpn | kQpRqPsn |
                                    kQpMaxDestRdAtomic | kQpMinRnrTimer)
                    .ok());
    q.state = QpState::kRts;
    ASSERT_TRUE(e.qp->Modify(q, kQpState | kQpSqPsn | kQpTimeout | kQpRetryCnt | kQpRnrRetry |
                                    kQpMaxQpRdAtomic)
                    .ok());
  };
  connect(a, 2, b.qp->qp_num());
  connect(b, 1, a.qp->qp_num());
  std::memcpy(a.mem.data(), "payload!", 8);
  SendWr w;
  w.wr_id = 3;
  w.opcode = SendOpcode::kRdmaWrite;
  w.sge = a.At(0, 8);
  w.remote_addr = reinterpret_cast<uint64_t>(b.mem.data() + 100);
  w.rkey = b.mr->rkey();
  ASSERT_TRUE(a.qp->PostSend(w).ok());
  clock.Advance(10us);
  auto wcs = a.Drain(*a.scq);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, WcStatus::kSuccess);
  EXPECT_EQ(std::memcmp(b.mem.data() + 100, "payload!", 8), 0);
  w.rkey ^= 0x10;
  ASSERT_TRUE(a.qp->PostSend(w).ok());
  clock.Advance(10us);
  wcs = a.Drain(*a.scq);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, WcStatus::kRemAccessErr);
}

// With completion channels, a packet makes readable only the channels of the CQs it completes
// on, as a NIC raises events: the receiver's receive CQ and the sender's send CQ, never the
// sender's receive CQ. Arm reads a fired channel (as ibv_get_cq_event) and leaves it quiet.
TEST(FakeChannels, APacketWakesOnlyTheCqsItCompletesOn) {
  FakeFabric fabric(RealClock::Get());
  fabric.EnableCompletionChannels();
  fabric.AddDevice(IbDevice("a", 1));
  fabric.AddDevice(IbDevice("b", 2));
  auto verbs = fabric.MakeVerbs({"a", "b"});
  Endpoint a(*verbs, "a", QpType::kUd), b(*verbs, "b", QpType::kUd);
  ASSERT_TRUE(a.UdToRts().ok());
  ASSERT_TRUE(b.UdToRts().ok());
  ASSERT_TRUE(a.Recv(6, 0, 256).ok());
  ASSERT_TRUE(b.Recv(5, 0, 256).ok());
  for (Cq* cq : {a.scq.get(), a.rcq.get(), b.scq.get(), b.rcq.get()}) {
    ASSERT_GE(cq->event_fd(), 0);
    ASSERT_TRUE(cq->Arm().ok());
  }
  const int tid = static_cast<int>(::gettid());
  const FakeHwCost before = fabric.HwCostOfThread(tid);
  auto ah = std::move(a.ctx->CreateAh(*a.pd, {.port = 1, .dlid = 2}).value());
  SendWr w;
  w.wr_id = 77;
  w.sge = a.At(4096, 64);
  w.ah = ah.get();
  w.remote_qpn = b.qp->qp_num();
  w.remote_qkey = kProbeQkey;
  ASSERT_TRUE(a.qp->PostSend(w).ok());
  auto readable = [](Cq& cq, int ms) {
    pollfd p{cq.event_fd(), POLLIN, 0};
    return ::poll(&p, 1, ms) == 1;
  };
  EXPECT_TRUE(readable(*b.rcq, 2000)) << "the receiver's receive CQ";
  EXPECT_TRUE(readable(*a.scq, 2000)) << "the sender's send CQ";
  EXPECT_FALSE(readable(*a.rcq, 50)) << "nothing completes on the sender's receive CQ";
  EXPECT_FALSE(readable(*b.scq, 0));
  EXPECT_GE(fabric.HwCostOfThread(tid).timer_sets - before.timer_sets, 2u) << "counted";
  EXPECT_EQ(b.Drain(*b.rcq).size(), 1u);
  EXPECT_EQ(a.Drain(*a.scq).size(), 1u);
  ASSERT_TRUE(b.rcq->Arm().ok());
  EXPECT_FALSE(readable(*b.rcq, 0)) << "the event was read";
}

TEST(FakeNoRdma, ListDevicesFailsLikeEnosys) {
  auto v = FakeFabric::MakeNoRdmaStack();
  auto l = v->ListDevices();
  ASSERT_FALSE(l.ok());
  EXPECT_EQ(l.status().code(), StatusCode::kUnavailable);
}

}  // namespace
}  // namespace fw::rdma
