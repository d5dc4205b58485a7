// Benchmark: one sampling pass over the real 9-port H100 tree (runs every second on every node).
#include <benchmark/benchmark.h>
#include <time.h>

#include <cstdlib>
#include <string>

#include "probes/counters/port_checks.h"
#include "probes/counters/sampler.h"

namespace {

std::string H100Root() {
  const char* dir = std::getenv("FW_TESTDATA");
  return std::string(dir ? dir : "tests/testdata") + "/sysfs/gpud-h100";
}

// Real time and process CPU time are both reported (UseRealTime off: the default CPU timer).
void BM_SamplePassH100(benchmark::State& state) {
  fw::FakeClock clock;
  fw::counters::Sampler sampler({.sysfs_root = H100Root(), .rescan_every = 0}, clock);
  sampler.SampleOnce();  // the scan (directory listing) is not part of the per-second pass
  size_t ports = 0;
  for (auto _ : state) {
    clock.Advance(std::chrono::seconds(1));
    ports = sampler.SampleOnce().size();
    benchmark::DoNotOptimize(ports);
  }
  state.counters["ports"] = static_cast<double>(ports);
}
BENCHMARK(BM_SamplePassH100)->Unit(benchmark::kMicrosecond);

void BM_SamplePassAndCheckH100(benchmark::State& state) {
  fw::FakeClock clock;
  fw::counters::Sampler sampler({.sysfs_root = H100Root(), .rescan_every = 0}, clock);
  sampler.SampleOnce();
  for (auto _ : state) {
    clock.Advance(std::chrono::seconds(1));
    auto findings = fw::counters::CheckPorts(sampler.SampleOnce(), "bench");
    benchmark::DoNotOptimize(findings);
  }
}
BENCHMARK(BM_SamplePassAndCheckH100)->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
