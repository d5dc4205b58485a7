// Render cost of /metrics with 100,000 series (target: <= 20 ms median, streamed), against a plain
// write() of the same bytes to a pipe in the same run, and hot-path updates.
//
// After the benchmarks it prints one summary line: the render median, the reference's median and
// their ratio (scripts/perf/bench_all reads it).
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "exporter/registry.h"

namespace fw::metrics {
namespace {

// A realistic mix: per-port gauges and counters with 3 labels each, 100,000 series, rendered once
// (which builds the render indexes, as the first scrape does).
std::unique_ptr<Registry> MakeRegistry100k(Family<Gauge>** gauges = nullptr) {
  auto reg = std::make_unique<Registry>();
  auto& g = reg->AddGauge("fabricwatch_nic_port_rate_gbps", "Rate.", {"node", "device", "port"});
  auto& c =
      reg->AddCounter("fabricwatch_nic_port_error_total", "Errors.", {"node", "device", "port"});
  for (int i = 0; i < 50000; ++i) {
    std::string node = "node" + std::to_string(i / 8);
    std::string dev = "mlx5_" + std::to_string(i % 8);
    g.WithLabels({node, dev, "1"}).Set(400);
    c.WithLabels({node, dev, "1"}).Inc(i * 7.5);
  }
  reg->Render([](std::string_view) {});
  if (gauges != nullptr) *gauges = &g;
  return reg;
}

Registry& Registry100k() {
  static std::unique_ptr<Registry> r = MakeRegistry100k();
  return *r;
}

// A pipe whose read end a thread drains, as a scraper's socket would be.
class DrainedPipe {
 public:
  DrainedPipe() {
    if (pipe(fds_) != 0) std::abort();
    reader_ = std::thread([fd = fds_[0]] {
      std::vector<char> buf(1 << 16);
      while (read(fd, buf.data(), buf.size()) > 0) {
      }
    });
  }
  ~DrainedPipe() {
    close(fds_[1]);
    reader_.join();
    close(fds_[0]);
  }
  void Write(std::string_view chunk) {
    while (!chunk.empty()) {
      ssize_t n = write(fds_[1], chunk.data(), chunk.size());
      if (n <= 0) std::abort();
      chunk.remove_prefix(static_cast<size_t>(n));
    }
  }

 private:
  int fds_[2];
  std::thread reader_;
};

void BM_Render100kSeries(benchmark::State& state) {
  Registry& r = Registry100k();
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
BENCHMARK(BM_Render100kSeries)->Unit(benchmark::kMillisecond)->UseRealTime()->Repetitions(5);

// The worst case for the render indexes: a series is created before every scrape, so each render
// first rebuilds its family's index.
void BM_RenderAfterANewSeries(benchmark::State& state) {
  Family<Gauge>* g = nullptr;
  std::unique_ptr<Registry> r = MakeRegistry100k(&g);
  int next = 50000;
  for (auto _ : state) {
    g->WithLabels({"node" + std::to_string(next / 8), "mlx5_" + std::to_string(next % 8), "1"});
    ++next;
    r->Render([](std::string_view chunk) { benchmark::DoNotOptimize(chunk.data()); });
  }
}
BENCHMARK(BM_RenderAfterANewSeries)->Unit(benchmark::kMillisecond)->UseRealTime();

// The reference: the same bytes, in the same chunks, written to a drained pipe.
void BM_WriteSameBytesToPipe(benchmark::State& state) {
  std::vector<std::string> chunks;
  Registry100k().Render([&](std::string_view c) { chunks.emplace_back(c); });
  DrainedPipe pipe;
  for (auto _ : state) {
    for (const auto& c : chunks) pipe.Write(c);
  }
}
BENCHMARK(BM_WriteSameBytesToPipe)->Unit(benchmark::kMillisecond)->UseRealTime()->Repetitions(5);

// What a scrape costs: render streamed into the drained pipe.
void BM_RenderIntoPipe(benchmark::State& state) {
  Registry& r = Registry100k();
  DrainedPipe pipe;
  for (auto _ : state) r.Render([&](std::string_view c) { pipe.Write(c); });
}
BENCHMARK(BM_RenderIntoPipe)->Unit(benchmark::kMillisecond)->UseRealTime()->Repetitions(5);

void BM_CachedCounterInc(benchmark::State& state) {
  Registry r;
  Counter& c = r.AddCounter("fabricwatch_x_total", "x", {"a"}).WithLabels({"b"});
  for (auto _ : state) c.Inc();
  benchmark::DoNotOptimize(c.Value());
}
BENCHMARK(BM_CachedCounterInc);

// Keeps each benchmark's median wall time (or its only run's) for the summary line.
class MedianKeeper : public benchmark::ConsoleReporter {
 public:
  // No colour codes when the output goes to a file or pipe (bench_all reads it).
  MedianKeeper() : ConsoleReporter(isatty(STDOUT_FILENO) ? OO_ColorTabular : OO_Tabular) {}
  void ReportRuns(const std::vector<Run>& runs) override {
    ConsoleReporter::ReportRuns(runs);
    for (const Run& run : runs) {
      if (run.error_occurred) continue;
      bool median = run.run_type == Run::RT_Aggregate && run.aggregate_name == "median";
      if (median || run.repetitions <= 1) {
        ms_[run.run_name.function_name] = run.GetAdjustedRealTime();
      }
    }
  }
  double Ms(const std::string& name) const {
    auto it = ms_.find(name);
    return it == ms_.end() ? 0 : it->second;
  }

 private:
  std::map<std::string, double> ms_;
};

}  // namespace
}  // namespace fw::metrics

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  fw::metrics::MedianKeeper reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  double render = reporter.Ms("BM_Render100kSeries");
  double write = reporter.Ms("BM_WriteSameBytesToPipe");
  double both = reporter.Ms("BM_RenderIntoPipe");
  double churn = reporter.Ms("BM_RenderAfterANewSeries");
  if (render > 0 && write > 0) {
    std::printf(
        "summary: /metrics render 100k series median %.2f ms; write() of the same bytes to a pipe "
        "%.2f ms; ratio %.2f; render into the pipe %.2f ms; render after a new series %.2f ms\n",
        render, write, render / write, both, churn);
  }
  benchmark::Shutdown();
  return 0;
}
