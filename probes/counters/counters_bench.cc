// Benchmark: one sampling pass over the real 9-port H100 tree (runs every second on every node).
#include <benchmark/benchmark.h>
#include <time.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>

#include "probes/counters/port_checks.h"
#include "probes/counters/sampler.h"

namespace {

double ThreadCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

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

// The pass as the agent pays for it: once per interval, after a sleep that leaves the caches
// cold. Back-to-back passes (above) read about half of this. The reported time is the thread CPU
// time of the pass alone (manual time), with 250 ms between passes. The argument is
// SamplerOptions::slow_every (1: every file every pass; 10: the agent's default tiering), and
// files_per_pass the files read per pass on average.
void BM_SamplePassH100AfterSleep(benchmark::State& state) {
  fw::counters::Sampler sampler({.sysfs_root = H100Root(),
                                 .rescan_every = 0,
                                 .slow_every = static_cast<int>(state.range(0))},
                                fw::RealClock::Get());
  sampler.SampleOnce();
  const uint64_t files0 = sampler.stats().files_read;
  for (auto _ : state) {
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
    const double cpu0 = ThreadCpuSeconds();
    benchmark::DoNotOptimize(sampler.SampleOnce().size());
    state.SetIterationTime(ThreadCpuSeconds() - cpu0);
  }
  state.counters["files_per_pass"] = static_cast<double>(sampler.stats().files_read - files0) /
                                     static_cast<double>(state.iterations());
}
BENCHMARK(BM_SamplePassH100AfterSleep)
    ->Arg(1)
    ->Arg(10)
    ->UseManualTime()
    ->Iterations(20)
    ->Unit(benchmark::kMicrosecond);

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
