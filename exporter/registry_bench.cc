// Render cost of /metrics with 100,000 series (target: <= 50 ms, streamed), and hot-path updates.
#include <benchmark/benchmark.h>

#include "exporter/registry.h"

namespace fw::metrics {
namespace {

void BM_Render100kSeries(benchmark::State& state) {
  Registry r;
  // A realistic mix: per-port gauges and counters with 3 labels each.
  auto& g = r.AddGauge("fabricwatch_nic_port_rate_gbps", "Rate.", {"node", "device", "port"});
  auto& c = r.AddCounter("fabricwatch_nic_port_error_total", "Errors.", {"node", "device", "port"});
  for (int i = 0; i < 50000; ++i) {
    std::string node = "node" + std::to_string(i / 8);
    std::string dev = "mlx5_" + std::to_string(i % 8);
    g.WithLabels({node, dev, "1"}).Set(400);
    c.WithLabels({node, dev, "1"}).Inc(i * 7.5);
  }
  size_t bytes = 0, max_chunk = 0;
  for (auto _ : state) {
    bytes = 0;
    r.Render([&](std::string_view chunk) {
      bytes += chunk.size();
      max_chunk = std::max(max_chunk, chunk.size());
      benchmark::DoNotOptimize(chunk.data());
    });
  }
  state.counters["series"] = 100000;
  state.counters["bytes"] = static_cast<double>(bytes);
  state.counters["max_chunk_bytes"] = static_cast<double>(max_chunk);
}
BENCHMARK(BM_Render100kSeries)->Unit(benchmark::kMillisecond);

void BM_CachedCounterInc(benchmark::State& state) {
  Registry r;
  Counter& c = r.AddCounter("fabricwatch_x_total", "x", {"a"}).WithLabels({"b"});
  for (auto _ : state) c.Inc();
  benchmark::DoNotOptimize(c.Value());
}
BENCHMARK(BM_CachedCounterInc);

}  // namespace
}  // namespace fw::metrics

BENCHMARK_MAIN();
