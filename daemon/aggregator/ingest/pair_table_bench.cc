// Ingest throughput and memory per pair of PairTable under a simulated 1 Hz probe mesh.
#include <benchmark/benchmark.h>
#include <malloc.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "daemon/aggregator/api/node_probe_metrics.h"
#include "daemon/aggregator/ingest/pair_table.h"
#include "exporter/registry.h"

namespace fw::aggregator {
namespace {

constexpr int kPeersPerNode = 50;
constexpr int kFlowsPerPeer = 4;  // results per pair per simulated second

// RTT draws: a lognormal body around 40 µs with 0.5% outliers of 1-5 ms, as a table so that
// drawing costs a table lookup inside the timed loop.
const std::vector<int64_t>& RttTable() {
  static const std::vector<int64_t> table = [] {
    std::mt19937_64 rng(11);
    std::lognormal_distribution<double> body(std::log(40'000.0), 0.25);
    std::uniform_real_distribution<double> u(0, 1);
    std::vector<int64_t> t(1 << 16);
    for (auto& v : t) {
      v = u(rng) < 0.005 ? static_cast<int64_t>(1e6 + 4e6 * u(rng))
                         : static_cast<int64_t>(body(rng));
    }
    return t;
  }();
  return table;
}

// One agent's batch for one second: every peer, every flow.
std::vector<ReportedProbe> MakeBatch(int node, int nodes) {
  std::vector<ReportedProbe> batch;
  for (int p = 1; p <= kPeersPerNode; ++p) {
    for (int f = 0; f < kFlowsPerPeer; ++f) {
      ReportedProbe r;
      r.src_node = "node" + std::to_string(node);
      r.dst_node = "node" + std::to_string((node + p * 7) % nodes);
      r.src_port = static_cast<uint16_t>(40000 + f);
      r.flow_id = static_cast<uint32_t>(f);
      batch.push_back(std::move(r));
    }
  }
  return batch;
}

struct Fleet {
  // `by_id`: results carry NodeIds of the table's interner, as the aggregator's ingest hands them
  // over; otherwise node names.
  explicit Fleet(int nodes, bool by_id = false) : table(clock, nullptr) {
    for (int n = 0; n < nodes; ++n) batches.push_back(MakeBatch(n, nodes));
    if (!by_id) return;
    for (auto& batch : batches) {
      for (ReportedProbe& r : batch) {
        r.src_id = table.names()->Intern(r.src_node);
        r.dst_id = table.names()->Intern(r.dst_node);
        r.src_node.clear();
        r.dst_node.clear();
      }
    }
  }
  // Sends every node's batch once (one simulated second). Returns the number of results.
  size_t SendSecond(uint64_t& rng_state) {
    const auto& rtts = RttTable();
    size_t n = 0;
    for (auto& batch : batches) {
      for (ReportedProbe& r : batch) {
        rng_state ^= rng_state << 13;
        rng_state ^= rng_state >> 7;
        rng_state ^= rng_state << 17;
        r.rtt_ns = rtts[rng_state & 0xffff];
        r.lost = (rng_state >> 32) % 1000 == 0;
      }
      table.RecordBatch(batch);
      n += batch.size();
    }
    clock.Advance(std::chrono::seconds(1));
    return n;
  }
  FakeClock clock;
  PairTable table;
  std::vector<std::vector<ReportedProbe>> batches;
};

// Batches of results with node names (args: nodes, 0) or with NodeIds as the gRPC ingest hands
// them over (nodes, 1).
void BM_RecordBatch(benchmark::State& state) {
  Fleet fleet(static_cast<int>(state.range(0)), state.range(1) != 0);
  uint64_t rng = 88172645463325252ull;
  for (int s = 0; s < 5; ++s) fleet.SendSecond(rng);  // create the pairs outside the timing
  size_t results = 0;
  for (auto _ : state) results += fleet.SendSecond(rng);
  state.SetItemsProcessed(static_cast<int64_t>(results));
  state.counters["pairs"] = static_cast<double>(fleet.table.PairCount());
}
BENCHMARK(BM_RecordBatch)
    ->Args({1000, 0})
    ->Args({4000, 0})
    ->Args({1000, 1})
    ->Args({4000, 1})
    ->Unit(benchmark::kMillisecond);

// Results on pre-resolved handles: the floor cost of the windows themselves.
void BM_RecordHandle(benchmark::State& state) {
  FakeClock clock;
  PairTable table(clock, nullptr);
  std::vector<PairHandle> handles;
  for (int i = 0; i < 10'000; ++i) {
    handles.push_back(*table.Resolve("n" + std::to_string(i / 50), "d" + std::to_string(i % 50),
                                     Transport::kUdp));
  }
  const auto& rtts = RttTable();
  size_t i = 0;
  int64_t now = clock.MonotonicNanos();
  for (auto _ : state) {
    const PairHandle& h = handles[i % handles.size()];
    table.Record(h, ProbeSample{false, rtts[i & 0xffff], 0.0}, 40000, 0, now);
    if (++i % 40'000 == 0) now += 1'000'000'000;  // 4 results per pair per second
  }
  state.SetItemsProcessed(static_cast<int64_t>(i));
}
BENCHMARK(BM_RecordHandle);

// Steady-state memory: 700 simulated seconds fill every slot of every tier.
void BM_SteadyStateBytesPerPair(benchmark::State& state) {
  for (auto _ : state) {
    Fleet fleet(200);
    uint64_t rng = 88172645463325252ull;
    for (int s = 0; s < 700; ++s) fleet.SendSecond(rng);
    const double pairs = static_cast<double>(fleet.table.PairCount());
    state.counters["pairs"] = pairs;
    state.counters["bytes_per_pair"] = static_cast<double>(fleet.table.PairBytes()) / pairs;
  }
}
BENCHMARK(BM_SteadyStateBytesPerPair)->Iterations(1)->Unit(benchmark::kSecond);

// Steady-state memory in the shape of the 16,000-agent ingest scenario: one result per pair per
// second (31 in-leaf peers and 8 inter-leaf flows per agent at 1 Hz), 700 s so that every slot of
// every tier is full. Arg 0: the fleet simulator's healthy model (base RTT + exponential jitter of
// mean 2 µs, tests/sim/link_model.cc); arg 1: the wide lognormal body above (40 µs, σ 0.25).
// `bytes_per_pair` is PairTable's own count; `malloc_per_pair` is what malloc handed out for the
// table (mallinfo2, chunk overhead and the pair index included), the figure RSS follows.
void BM_SteadyStateBytesPerPairOneHz(benchmark::State& state) {
  const bool wide = state.range(0) != 0;
  constexpr int kPairs = 40'000;
  for (auto _ : state) {
    const size_t before = mallinfo2().uordblks;
    {
      FakeClock clock;
      PairTable table(clock, nullptr);
      std::vector<ReportedProbe> batch(kPairs);
      std::vector<int64_t> base(kPairs);
      std::mt19937_64 rng(5);
      std::uniform_int_distribution<int64_t> base_ns(8'000, 30'000);
      for (int i = 0; i < kPairs; ++i) {
        batch[i].src_id = table.names()->Intern("node" + std::to_string(i / 39));
        batch[i].dst_id = table.names()->Intern("peer" + std::to_string(i % 39 + (i / 39) * 7));
        batch[i].src_port = 40000;
        base[i] = base_ns(rng);
      }
      std::exponential_distribution<double> jitter(1.0 / 2'000.0);
      const auto& rtts = RttTable();
      for (int t = 0; t < 700; ++t) {
        for (int i = 0; i < kPairs; ++i) {
          batch[i].rtt_ns =
              wide ? rtts[rng() & 0xffff] : base[i] + static_cast<int64_t>(jitter(rng));
        }
        table.RecordBatch(batch);
        clock.Advance(std::chrono::seconds(1));
      }
      const double pairs = static_cast<double>(table.PairCount());
      state.counters["pairs"] = pairs;
      state.counters["bytes_per_pair"] = static_cast<double>(table.PairBytes()) / pairs;
      state.counters["malloc_per_pair"] =
          static_cast<double>(mallinfo2().uordblks - before) / pairs;
    }
  }
}
BENCHMARK(BM_SteadyStateBytesPerPairOneHz)->Arg(0)->Arg(1)->Iterations(1)->Unit(benchmark::kSecond);

// Cost of a three-window snapshot of one full pair (what /api/v1/pairs pays per row).
void BM_SnapshotAllWindows(benchmark::State& state) {
  PairWindows w;
  const auto& rtts = RttTable();
  const int64_t sec = 1'000'000'000;
  for (int t = 0; t < 700; ++t) {
    for (int f = 0; f < kFlowsPerPeer; ++f) {
      w.Record(t * sec, ProbeSample{false, rtts[(t * 4 + f) & 0xffff], 0.0});
    }
  }
  for (auto _ : state) {
    for (Window win : kAllWindows) benchmark::DoNotOptimize(w.Snapshot(699 * sec, win));
  }
}
BENCHMARK(BM_SnapshotAllWindows);

// One refresh of the per-node and per-path-class probe series (the aggregator runs it every 5 s)
// over a fleet whose pairs hold 60 s of data: its cost per pair is what 1.5 M pairs at 16,000
// nodes pay.
void BM_NodeProbeMetricsUpdate(benchmark::State& state) {
  Fleet fleet(static_cast<int>(state.range(0)), /*by_id=*/true);
  uint64_t rng = 88172645463325252ull;
  for (int s = 0; s < 60; ++s) fleet.SendSecond(rng);
  metrics::Registry registry;
  NodeProbeMetrics node_metrics(registry);
  for (auto _ : state) node_metrics.Update(fleet.table, fleet.clock.MonotonicNanos());
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()) *
                          static_cast<int64_t>(fleet.table.PairCount()));
  state.counters["pairs"] = static_cast<double>(fleet.table.PairCount());
}
BENCHMARK(BM_NodeProbeMetricsUpdate)->Arg(2000)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace fw::aggregator

BENCHMARK_MAIN();
