// Planning time and plan size for large fleets, with and without a fabric map.
#include <benchmark/benchmark.h>

#include <malloc.h>

#include <algorithm>
#include <string>

#include "daemon/aggregator/plan/planner.h"

namespace fw::aggregator {
namespace {

std::shared_ptr<const FabricMap> LeafSpine(int spines, int leaves, int hosts) {
  std::string y = "switches:\n";
  for (int s = 0; s < spines; ++s) y += "  - {name: s" + std::to_string(s) + ", tier: spine}\n";
  for (int l = 0; l < leaves; ++l) y += "  - {name: l" + std::to_string(l) + ", tier: leaf}\n";
  y += "links:\n";
  for (int l = 0; l < leaves; ++l) {
    for (int s = 0; s < spines; ++s) {
      y += "  - {a: l" + std::to_string(l) + ", b: s" + std::to_string(s) + "}\n";
    }
  }
  y += "hosts:\n";
  for (int l = 0; l < leaves; ++l) {
    for (int h = 0; h < hosts; ++h) {
      const int i = l * hosts + h;
      y += "  - {node: n" + std::to_string(i) + ", nic: mlx5_0, address: 10." +
           std::to_string(i / 65536) + "." + std::to_string(i / 256 % 256) + "." +
           std::to_string(i % 256) + ", switch: l" + std::to_string(l) + "}\n";
    }
  }
  return std::make_shared<const FabricMap>(FabricMap::Parse(y).value());
}

std::vector<AgentInfo> Agents(int n) {
  std::vector<AgentInfo> out;
  for (int i = 0; i < n; ++i) {
    out.push_back(AgentInfo{"n" + std::to_string(i),
                            {{"10." + std::to_string(i / 65536) + "." +
                                  std::to_string(i / 256 % 256) + "." + std::to_string(i % 256),
                              9753, ""}}});
  }
  return out;
}

void Report(benchmark::State& state, const PlanSet& set) {
  size_t peers = 0, flows = 0, max_peers = 0;
  for (const auto& [node, plan] : set.plans) {
    peers += plan.peers.size();
    max_peers = std::max(max_peers, plan.peers.size());
    for (const auto& p : plan.peers) flows += p.flows;
  }
  state.counters["nodes"] = static_cast<double>(set.plans.size());
  state.counters["pairs"] = static_cast<double>(peers);
  state.counters["flows"] = static_cast<double>(flows);
  state.counters["max_peers"] = static_cast<double>(max_peers);
}

// Arguments: spines, leaves, hosts per leaf.
void BM_PlanWithMap(benchmark::State& state) {
  const auto map = LeafSpine(static_cast<int>(state.range(0)), static_cast<int>(state.range(1)),
                             static_cast<int>(state.range(2)));
  const auto agents = Agents(static_cast<int>(state.range(1) * state.range(2)));
  Planner planner(PlannerConfig{}, map);
  PlanSet set;
  double grew = 0;
  for (auto _ : state) {
    set = {};
    const auto base = static_cast<double>(mallinfo2().uordblks);
    set = planner.PlanFor(agents);
    grew = static_cast<double>(mallinfo2().uordblks) - base;
  }
  Report(state, set);
  state.counters["heap_MiB"] = grew / (1 << 20);  // what the whole plan set holds
}
BENCHMARK(BM_PlanWithMap)
    ->Args({4, 16, 32})
    ->Args({8, 125, 32})
    ->Args({8, 500, 32})
    ->Args({16, 500, 32})
    ->Unit(benchmark::kMillisecond);

// The re-plan path of the aggregator: plans are handed over one by one and dropped, so the heap
// holds one leaf's plans at a time. heap_peak_MiB is the most the heap grew over its size before
// the call, sampled at every 64th plan handed over (glibc's in-use bytes).
void BM_PlanEachWithMap(benchmark::State& state) {
  const auto map = LeafSpine(static_cast<int>(state.range(0)), static_cast<int>(state.range(1)),
                             static_cast<int>(state.range(2)));
  const auto agents = Agents(static_cast<int>(state.range(1) * state.range(2)));
  Planner planner(PlannerConfig{}, map);
  size_t peers = 0, flows = 0, plans = 0;
  double peak = 0;
  for (auto _ : state) {
    const auto base = static_cast<double>(mallinfo2().uordblks);
    peers = flows = plans = 0;
    peak = 0;  // the last pass counts: the map's path cache is warm by then, as in the aggregator
    const PlanSummary summary = planner.PlanEach(agents, [&](const std::string&, Plan&& plan) {
      ++plans;
      peers += plan.peers.size();
      for (const auto& p : plan.peers) flows += p.flows;
      if (plans % 64 == 1) {
        peak = std::max(peak, static_cast<double>(mallinfo2().uordblks) - base);
      }
    });
    benchmark::DoNotOptimize(summary);
  }
  state.counters["nodes"] = static_cast<double>(plans);
  state.counters["pairs"] = static_cast<double>(peers);
  state.counters["flows"] = static_cast<double>(flows);
  state.counters["heap_peak_MiB"] = peak / (1 << 20);
}
BENCHMARK(BM_PlanEachWithMap)
    ->Args({4, 16, 32})
    ->Args({16, 500, 32})
    ->Unit(benchmark::kMillisecond);

void BM_PlanWithoutMap(benchmark::State& state) {
  const auto agents = Agents(static_cast<int>(state.range(0)));
  Planner planner(PlannerConfig{}, nullptr);
  PlanSet set;
  for (auto _ : state) set = planner.PlanFor(agents);
  Report(state, set);
}
BENCHMARK(BM_PlanWithoutMap)->Arg(1000)->Arg(16000)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace fw::aggregator

BENCHMARK_MAIN();
