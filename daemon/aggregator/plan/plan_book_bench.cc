// The plan book's re-plans at fleet scale: a partial re-plan of the nodes an escalation's overlays
// name, in a 16,000-node leaf-spine fleet with a map, as the aggregator's tick runs it
// (SetOverlay, then MaybeReplan once the spacing allows).
#include <benchmark/benchmark.h>
#include <spdlog/spdlog.h>
#include <stdlib.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/testing/temp_dir.h"
#include "daemon/aggregator/plan/plan_book.h"
#include "exporter/registry.h"

namespace fw::aggregator {
namespace {

// `leaves` leaves of `hosts` hosts (node n<leaf>-<host>, NIC mlx5_0 at 10.<leaf/250>.<leaf%250>.
// <host>), every leaf linked to every spine, ECMP.
std::shared_ptr<const FabricMap> Fabric(int spines, int leaves, int hosts,
                                        std::vector<AgentInfo>& live) {
  std::string y = "routing: ecmp\nswitches:\n";
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
      const std::string node = "n" + std::to_string(l) + "-" + std::to_string(h);
      const std::string address = "10." + std::to_string(l / 250) + "." +
                                  std::to_string(l % 250) + "." + std::to_string(h + 1);
      y += "  - {node: " + node + ", nic: mlx5_0, address: " + address + ", switch: l" +
           std::to_string(l) + "}\n";
      AgentInfo a;
      a.node = node;
      a.endpoints.push_back({address, 9753, "mlx5_0"});
      live.push_back(std::move(a));
    }
  }
  auto m = FabricMap::Parse(y);
  if (!m.ok()) {
    std::fprintf(stderr, "bad map: %s\n", m.status().ToString().c_str());
    std::abort();
  }
  return std::make_shared<const FabricMap>(std::move(m).value());
}

// A plan book over a whole fleet, fully re-planned once.
struct Fleet {
  Fleet(int spines, int leaves, int hosts) {
    spdlog::set_level(spdlog::level::err);  // a line or two per re-plan otherwise
    map = Fabric(spines, leaves, hosts, live);
    book = std::make_unique<PlanBook>(PlannerConfig{}, map, clock, registry);
    if (!book->Start(dir.path()).ok()) std::abort();
    book->NoteMembershipChange();
    if (!Replan()) std::abort();
    Drain();
  }
  bool Replan() {
    clock.Advance(std::chrono::seconds(60));
    return book->MaybeReplan(clock.MonotonicNanos(), [&] { return live; });
  }
  // Takes what the re-plan left for the agents, as the tick's pushes do.
  void Drain() {
    for (int i = 0; i < 16; ++i) book->PushPending([](const auto&) {});
  }

  // Escalation overlays as EscalationBudget::Overlays() makes them: one per NIC pair of a node
  // and one of its inter-leaf peers, raising flow 0 one way, for `nodes` nodes in all.
  std::vector<PlanOverlay> Escalations(size_t nodes, uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::vector<PlanOverlay> out;
    std::vector<std::string> used;
    while (used.size() + 2 <= nodes) {
      const AgentInfo& a = live[rng() % live.size()];
      const auto plan = book->PlanFor(a.node);
      if (!plan) std::abort();
      std::vector<std::string> far;
      const std::string leaf = a.node.substr(0, a.node.find('-') + 1);
      for (const auto& p : plan->peers()) {
        if (p.node().rfind(leaf, 0) != 0) far.push_back(p.node());
      }
      if (far.empty()) continue;
      const std::string b = far[rng() % far.size()];
      if (std::find(used.begin(), used.end(), a.node) != used.end() ||
          std::find(used.begin(), used.end(), b) != used.end()) {
        continue;
      }
      used.push_back(a.node);
      used.push_back(b);
      PlanOverlay o;
      o.nodes = {std::min(a.node, b), std::max(a.node, b)};
      o.id = "escalation:" + o.nodes[0] + "~" + o.nodes[1] + "/mlx5_0~mlx5_0";
      o.nics = {"mlx5_0", "mlx5_0"};
      o.rate_pps = 10;
      o.flows = 1;
      o.probe_timeout_ms = 250;
      o.trace_id = 1000 + out.size();
      o.flow_sets = {FlowBit(0), 0};
      out.push_back(std::move(o));
    }
    return out;
  }

  fw::testing::TempDir dir{"fw-plan-book-bench"};  // declared before `book`: removed after it
  FakeClock clock;
  metrics::Registry registry;
  std::vector<AgentInfo> live;
  std::shared_ptr<const FabricMap> map;
  std::unique_ptr<PlanBook> book;
};

// Arguments: spines, leaves, hosts per leaf, nodes the escalations name. Each iteration is two
// partial re-plans of those nodes: the overlays set, then cleared; the time is per re-plan.
void BM_PartialReplan(benchmark::State& state) {
  Fleet fleet(static_cast<int>(state.range(0)), static_cast<int>(state.range(1)),
              static_cast<int>(state.range(2)));
  const auto overlays = fleet.Escalations(static_cast<size_t>(state.range(3)), 7);
  size_t planned = 0, replans = 0;
  std::chrono::steady_clock::duration spent{};
  // One partial re-plan: the overlays set (or cleared), then the tick's MaybeReplan.
  auto replan = [&](const auto& change) {
    const auto start = std::chrono::steady_clock::now();
    for (const PlanOverlay& o : overlays) change(o);
    const bool ok = fleet.Replan();
    spent += std::chrono::steady_clock::now() - start;
    planned += fleet.book->last_replan_nodes();
    ++replans;
    state.PauseTiming();
    fleet.Drain();
    state.ResumeTiming();
    return ok;
  };
  for (auto _ : state) {
    if (!replan([&](const PlanOverlay& o) { fleet.book->SetOverlay(o); }) ||
        !replan([&](const PlanOverlay& o) { fleet.book->ClearOverlay(o.id); })) {
      state.SkipWithError("no re-plan");
      break;
    }
  }
  const double n = std::max<double>(1, static_cast<double>(replans));
  state.counters["nodes_per_replan"] = static_cast<double>(planned) / n;
  state.counters["ms_per_replan"] =
      std::chrono::duration<double, std::milli>(spent).count() / n;
}
BENCHMARK(BM_PartialReplan)
    ->Args({4, 16, 32, 50})
    ->Args({16, 500, 32, 50})
    ->Args({16, 500, 32, 300})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// The first plans' pushes: what the tick pays per plan an agent is sent (PlanFor, as
// GrpcServer::PushPlans asks it for each session PushPending picks, and the message's encoding,
// which the stream's write does on the calling thread).
void BM_PlanFor(benchmark::State& state) {
  Fleet fleet(static_cast<int>(state.range(0)), static_cast<int>(state.range(1)),
              static_cast<int>(state.range(2)));
  size_t i = 0, bytes = 0;
  for (auto _ : state) {
    auto plan = fleet.book->PlanFor(fleet.live[i++ % fleet.live.size()].node);
    if (!plan) {
      state.SkipWithError("no plan");
      break;
    }
    fabricwatch::v1::AggregatorMessage m;
    *m.mutable_probe_plan() = std::move(*plan);
    const std::string wire = m.SerializeAsString();  // what the stream's write does with it
    bytes += wire.size();
    benchmark::DoNotOptimize(wire);
  }
  state.counters["bytes"] = static_cast<double>(bytes) / std::max<double>(1, state.iterations());
}
BENCHMARK(BM_PlanFor)->Args({16, 500, 32})->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace fw::aggregator

BENCHMARK_MAIN();
