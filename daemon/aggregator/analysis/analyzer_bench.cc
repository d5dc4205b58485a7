// Analyzer cost at fleet scale: one tick over every flow of a fat-tree's probe plan, and the
// ingest path. Prints flows, pairs and memory with the timings.
#include <benchmark/benchmark.h>

#include <memory>

#include "daemon/aggregator/analysis/testing/synthetic_fleet.h"

namespace fw::analysis::testing {
namespace {

// Shapes: (leaves, hosts per leaf, spines, flows per inter-leaf pair). 500 × 32 = 16,000 nodes.
FleetShape ShapeOf(const benchmark::State& state) {
  FleetShape s;
  s.leaves = static_cast<int>(state.range(0));
  s.hosts_per_leaf = static_cast<int>(state.range(1));
  s.spines = static_cast<int>(state.range(2));
  s.inter_flows = static_cast<int>(state.range(3));
  s.bw_every_s = 0;
  return s;
}

// Feeds one second of results per source batch, as agents send them.
void IngestSecond(SyntheticFleet& fleet, const std::vector<ReportedProbe>& batch) {
  size_t begin = 0;
  for (size_t j = 1; j <= batch.size(); ++j) {
    if (j == batch.size() || batch[j].src_node != batch[begin].src_node) {
      fleet.pairs().RecordBatch(std::span<const ReportedProbe>(batch.data() + begin, j - begin));
      begin = j;
    }
  }
}

// `traced`: ECMP routing the analyzer cannot see, with every UDP flow's path traced, so that each
// flow's path is looked up in TracedPaths at every tick.
void AnalyzerTick(benchmark::State& state, bool traced) {
  FleetShape shape = ShapeOf(state);
  if (traced) {
    shape.deterministic = false;
    shape.switch_addresses = true;
  }
  SyntheticFleet fleet(shape);
  if (traced) fleet.TraceFlows();
  const std::vector<ReportedProbe> second = fleet.GenerateSecond();
  // Fill the 10 s window, with a fault so that localization has work to do.
  fleet.SetLinkFault("leaf1~spine1", LinkFault{0.05});
  for (int s = 0; s < 10; ++s) {
    IngestSecond(fleet, second);
    fleet.clock().Advance(std::chrono::seconds(1));
  }
  for (auto _ : state) {
    fleet.analyzer().Tick();
    state.PauseTiming();
    fleet.clock().Advance(std::chrono::seconds(1));
    IngestSecond(fleet, second);
    state.ResumeTiming();
  }
  const TickStats st = fleet.analyzer().stats();
  state.counters["flows"] = static_cast<double>(st.flows);
  state.counters["pairs"] = static_cast<double>(fleet.analyzer().flows().PairCount());
  state.counters["flow_table_MB"] =
      static_cast<double>(fleet.analyzer().flows().MemoryBytes()) / (1 << 20);
  state.counters["ns_per_flow"] = benchmark::Counter(
      static_cast<double>(st.flows),
      benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
}

void BM_AnalyzerTick(benchmark::State& state) { AnalyzerTick(state, false); }
void BM_AnalyzerTickTraced(benchmark::State& state) { AnalyzerTick(state, true); }
BENCHMARK(BM_AnalyzerTickTraced)
    ->Args({63, 32, 16, 4})
    ->Unit(benchmark::kMillisecond)
    ->Iterations(5);
BENCHMARK(BM_AnalyzerTick)
    ->Args({8, 6, 4, 32})
    ->Args({63, 32, 16, 4})
    ->Args({500, 32, 16, 4})
    ->Unit(benchmark::kMillisecond)
    ->Iterations(5);

// One pass between ticks (Analyzer::BetweenTicks) after a tick, with the lost probes of one
// second of a 5 % lossy link noted by ingest: the leads read (at most kMaxLeadSourcesPerPass
// sources) and the dense rechecks. Counters: the lost probes noted per pass.
void BM_AnalyzerBetweenTicks(benchmark::State& state) {
  SyntheticFleet fleet(ShapeOf(state));
  fleet.SetLinkFault("leaf1~spine1", LinkFault{0.05});
  const std::vector<ReportedProbe> second = fleet.GenerateSecond();
  for (int s = 0; s < 10; ++s) {
    IngestSecond(fleet, second);
    fleet.clock().Advance(std::chrono::seconds(1));
  }
  fleet.analyzer().Tick();
  size_t lost = 0;
  for (const ReportedProbe& r : second) lost += r.lost;
  for (auto _ : state) {
    state.PauseTiming();
    fleet.analyzer().NoteLost(second);
    state.ResumeTiming();
    fleet.analyzer().BetweenTicks();
    benchmark::DoNotOptimize(fleet.analyzer().TakeBetweenTickLeads());
  }
  state.counters["lost_noted"] = static_cast<double>(lost);
}
BENCHMARK(BM_AnalyzerBetweenTicks)
    ->Args({63, 32, 16, 4})
    ->Unit(benchmark::kMillisecond)
    ->Iterations(20);

void BM_AnalyzerIngest(benchmark::State& state) {
  SyntheticFleet fleet(ShapeOf(state));
  const std::vector<ReportedProbe> second = fleet.GenerateSecond();
  IngestSecond(fleet, second);  // creates the flows; steady state from here on
  for (auto _ : state) {
    fleet.clock().Advance(std::chrono::seconds(1));
    IngestSecond(fleet, second);
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * second.size()));
}
BENCHMARK(BM_AnalyzerIngest)->Args({63, 32, 16, 4})->Unit(benchmark::kMillisecond)->Iterations(5);

}  // namespace
}  // namespace fw::analysis::testing

BENCHMARK_MAIN();
