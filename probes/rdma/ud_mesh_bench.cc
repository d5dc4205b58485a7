// CPU cost of the UD latency mesh against the fake fabric, per probe, and its parts: the whole
// exchange (probe, ack, report, on both meshes), the fake's own share (verbs calls alone), the
// message codec, and an idle Step over many flows.
#include <benchmark/benchmark.h>

#include "probes/rdma/fake_verbs.h"
#include "probes/rdma/ud_mesh.h"

namespace fw::rdma {
namespace {

struct Count : ResultSink {
  void OnResult(const RdmaProbeResult& r) override {
    ++n;
    benchmark::DoNotOptimize(r.network_rtt_ns);
  }
  uint64_t n = 0;
};

FakeDeviceConfig Dev(const std::string& name, uint16_t lid) {
  FakeDeviceConfig d;
  d.name = name;
  FakePortConfig p;
  p.lid = lid;
  p.latency_ns = 0;
  p.rate_gbps = 400;
  d.ports = {p};
  return d;
}

struct Rig {
  explicit Rig(int targets, CqTimestamps ts = CqTimestamps::kWallclock) {
    FakeDeviceConfig a = Dev("a", 1), b = Dev("b", 2);
    a.timestamps = b.timestamps = ts;
    fabric.AddDevice(a);
    fabric.AddDevice(b);
    va = fabric.MakeVerbs({"a"});
    vb = fabric.MakeVerbs({"b"});
    UdMeshOptions o;
    o.max_rate_hz = 1e6;
    o.port.send_slots = 512;
    o.port.recv_depth = 512;
    ma = std::move(UdMesh::Create(*va, clock, o, &sink).value());
    mb = std::move(UdMesh::Create(*vb, clock, o, nullptr).value());
    std::vector<UdTarget> ts_;
    for (int i = 0; i < targets; ++i) {
      UdTarget t;
      t.peer = "peer" + std::to_string(i);
      t.remote = mb->Endpoints().front();
      t.rate_hz = 1000;
      ts_.push_back(t);
    }
    ma->SetTargets(ts_);
  }
  // One period: every flow sends one probe, and the exchanges complete.
  void Period() {
    clock.Advance(std::chrono::microseconds(1000 - 4));
    for (int i = 0; i < 4; ++i) {
      ma->Step();
      mb->Step();
      clock.Advance(std::chrono::microseconds(1));
    }
  }
  FakeClock clock;
  FakeFabric fabric{clock};
  std::unique_ptr<Verbs> va, vb;
  Count sink;
  std::unique_ptr<UdMesh> ma, mb;
};

// The whole exchange per probe: probe, ack and report through the fake, both meshes' Step().
void BM_UdProbeExchange(benchmark::State& state) {
  Rig rig(static_cast<int>(state.range(0)),
          state.range(1) == 0 ? CqTimestamps::kWallclock : CqTimestamps::kNone);
  rig.Period();
  const uint64_t start = rig.sink.n;
  for (auto _ : state) rig.Period();
  const uint64_t probes = rig.sink.n - start;
  state.counters["probes"] = static_cast<double>(probes);
  state.counters["ns_per_probe"] = benchmark::Counter(
      static_cast<double>(probes), benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
  state.counters["lost"] = static_cast<double>(rig.ma->stats().lost.load());
}
BENCHMARK(BM_UdProbeExchange)
    ->Args({1, 0})
    ->Args({64, 0})
    ->Args({64, 1})
    ->Unit(benchmark::kMicrosecond);

// The fake's share: the three messages of one exchange as bare verbs calls (post send, poll both
// CQs, repost the receive), no mesh logic.
void BM_FakeVerbsOnly(benchmark::State& state) {
  FakeClock clock;
  FakeFabric fabric(clock);
  fabric.AddDevice(Dev("a", 1));
  auto v = fabric.MakeVerbs({"a"});
  auto ctx = std::move(v->Open("a").value());
  auto pd = std::move(ctx->AllocPd().value());
  auto dev = ctx->QueryDevice().value();
  UdPortOptions po;
  auto port = std::move(UdPort::Create(*ctx, *pd, dev, 1, po).value());
  AhKey k;
  k.lid = 1;
  Status err;
  const Ah* ah = port->GetAh(k, &err);
  WorkCompletion wcs[8];
  for (auto _ : state) {
    for (int m = 0; m < 3; ++m) {
      const int slot = port->AcquireSendSlot();
      (void)port->PostSend(0, slot, *ah, port->endpoint().qpn, kProbeQkey,
                           MakeWrId(WrKind::kProbe, port->epoch(), 0, static_cast<uint16_t>(slot)));
      clock.Advance(std::chrono::nanoseconds(100));
      int got = 0;
      for (int round = 0; got < 2; ++round) {
        auto n = (round % 2 == 0 ? port->send_cq() : port->cq()).Poll(wcs, 8);
        for (int i = 0; i < *n; ++i) {
          if (WrIdKind(wcs[i].wr_id) == WrKind::kRecv) {
            (void)port->Repost(WrIdSlot(wcs[i].wr_id));
          } else {
            port->ReleaseSendSlot(WrIdSlot(wcs[i].wr_id));
          }
        }
        got += *n;
      }
    }
  }
  state.counters["ns_per_probe"] =
      benchmark::Counter(static_cast<double>(state.iterations()),
                         benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}
BENCHMARK(BM_FakeVerbsOnly);

void BM_UdMessageCodec(benchmark::State& state) {
  UdMessage m;
  m.type = UdType::kReport;
  m.turnaround_ns = 1234;
  uint8_t buf[kUdMessageBytes];
  UdMessage out;
  UdDrop why;
  for (auto _ : state) {
    m.seq++;
    WriteUdMessage(m, buf);
    benchmark::DoNotOptimize(ParseUdMessage(buf, sizeof(buf), out, why));
  }
}
BENCHMARK(BM_UdMessageCodec);

// A Step with nothing due: the scan over every flow and the empty polls.
void BM_UdMeshIdleStep(benchmark::State& state) {
  Rig rig(static_cast<int>(state.range(0)));
  rig.Period();
  for (auto _ : state) benchmark::DoNotOptimize(rig.ma->Step());
}
BENCHMARK(BM_UdMeshIdleStep)->Arg(1)->Arg(64)->Arg(1024);

}  // namespace
}  // namespace fw::rdma

BENCHMARK_MAIN();
