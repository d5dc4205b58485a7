// Benchmark: the counter batch the agent's report loop builds and serializes every pass, on the
// real H100 sysfs tree (9 ports, 423 counters), by what its maps of raw counters hold
// (PortSample.counters: none, full, or partial against a base).
#include <benchmark/benchmark.h>
#include <time.h>

#include <chrono>
#include <string>
#include <thread>

#include "daemon/agent/node_report.h"
#include "daemon/agent/node_test_util.h"

namespace fw::agent {
namespace {

namespace v1 = fabricwatch::v1;

double ThreadCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// What goes into the ports' maps of raw counters (PortSample.counters).
enum Map : int64_t {
  kNone = 0,        // no map (every port's readings stripped): the batch's cost without one
  kFull = 1,        // every readable counter: all 423 (every batch before counters_base_unix_ns)
  kUnchanged = 2,   // partial, nothing changed since the full map: the static testdata tree
  kBusy = 3,        // partial, 12 counters of each port changed: a node under traffic
};

// The tree after two passes (so with rates), as the batch of `map` sees it, and `base` set to
// the pass before it where the map is partial.
NodeSnapshot Snapshot(Map map, CounterMapBase& base) {
  NodeSnapshot snap = testing::H100Snapshot(2);
  base = CounterMapBase();
  if (map == kNone) {
    for (counters::PortSample& p : snap.ports) p.counters.clear();
  } else if (map != kFull) {
    SetCounterMapBase(snap, base);
    snap.wall_ns += 1'000'000'000;
    if (map == kBusy) {
      for (counters::PortSample& p : snap.ports) {
        for (size_t j = 0; j < p.counters.size() && j < 12; ++j) p.counters[j].value += 4096;
      }
    }
  }
  return snap;
}

// What one pass costs the agent's threads: build the batch into an AgentMessage (report loop),
// serialize it (what gRPC does on the uplink's thread) and free both. Thread CPU time of that
// alone, after a 250 ms sleep (the agent does it once a second, with cold caches).
void BM_CounterBatchAfterSleep(benchmark::State& state) {
  CounterMapBase base;
  const NodeSnapshot snap = Snapshot(static_cast<Map>(state.range(0)), base);
  size_t bytes = 0;
  size_t entries = 0;
  std::string wire;
  for (auto _ : state) {
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
    const double cpu0 = ThreadCpuSeconds();
    {
      v1::AgentMessage m;
      *m.mutable_counter_batch() = CounterBatchToProto(snap, &base);
      wire.clear();
      m.SerializeToString(&wire);
      bytes = wire.size();
      entries = 0;
      for (const v1::PortSample& p : m.counter_batch().ports()) entries += p.counters_size();
    }
    state.SetIterationTime(ThreadCpuSeconds() - cpu0);
  }
  state.counters["bytes"] = static_cast<double>(bytes);
  state.counters["map_entries"] = static_cast<double>(entries);
}
BENCHMARK(BM_CounterBatchAfterSleep)
    ->ArgName("map")
    ->DenseRange(kNone, kBusy)
    ->UseManualTime()
    ->Iterations(40)
    ->Unit(benchmark::kMicrosecond);

// The same back to back (warm caches): the lower bound.
void BM_CounterBatch(benchmark::State& state) {
  CounterMapBase base;
  const NodeSnapshot snap = Snapshot(static_cast<Map>(state.range(0)), base);
  std::string wire;
  for (auto _ : state) {
    v1::AgentMessage m;
    *m.mutable_counter_batch() = CounterBatchToProto(snap, &base);
    wire.clear();
    m.SerializeToString(&wire);
    benchmark::DoNotOptimize(wire.data());
  }
}
BENCHMARK(BM_CounterBatch)->ArgName("map")->DenseRange(kNone, kBusy)->Unit(benchmark::kMicrosecond);

// The reader's side: parsing the batch (the aggregator does it for every agent every pass, and
// then reads no map).
void BM_ParseCounterBatch(benchmark::State& state) {
  CounterMapBase base;
  const NodeSnapshot snap = Snapshot(static_cast<Map>(state.range(0)), base);
  v1::AgentMessage m;
  *m.mutable_counter_batch() = CounterBatchToProto(snap, &base);
  const std::string wire = m.SerializeAsString();
  for (auto _ : state) {
    v1::AgentMessage parsed;
    benchmark::DoNotOptimize(parsed.ParseFromString(wire));
  }
}
BENCHMARK(BM_ParseCounterBatch)->ArgName("map")->DenseRange(kNone, kBusy)->Unit(benchmark::kMicrosecond);

// A full map's other cost: recording it as the base (once a minute).
void BM_SetCounterMapBase(benchmark::State& state) {
  CounterMapBase base;
  const NodeSnapshot snap = Snapshot(kFull, base);
  for (auto _ : state) {
    CounterMapBase b;
    SetCounterMapBase(snap, b);
    benchmark::DoNotOptimize(b.ports.data());
  }
}
BENCHMARK(BM_SetCounterMapBase)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace fw::agent

BENCHMARK_MAIN();
