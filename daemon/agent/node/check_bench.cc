// Benchmarks: wall time of a full `check` (hwloc discovery, PCIe, profile, one counter pass), and
// the per-second work of the agent: one NodeMetrics pass (sample, publish, findings, snapshot).
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <sstream>
#include <string>

#include "daemon/agent/node/check_command.h"
#include "daemon/agent/node/node_metrics.h"

namespace {

std::string Testdata(const char* rel) {
  const char* dir = std::getenv("FW_TESTDATA");
  return std::string(dir ? dir : "tests/testdata") + "/" + rel;
}

void RunCheckBench(benchmark::State& state, const std::string& xml) {
  fw::agent::CheckOptions o;
  o.sysfs_root = Testdata("sysfs/gpud-h100");
  o.hwloc_xml = xml;
  o.profile = "dgx-h100";
  o.format = "json";
  o.node_name = "bench";
  o.counter_interval = std::chrono::milliseconds(0);  // the default adds a 1 s wait between passes
  for (auto _ : state) {
    std::ostringstream out;
    benchmark::DoNotOptimize(fw::agent::RunCheck(o, out));
  }
}

void BM_CheckJsonFromXml(benchmark::State& state) {
  RunCheckBench(state, Testdata("hwloc/psmgmt-topo.jrc0386.xml"));
}
BENCHMARK(BM_CheckJsonFromXml)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_CheckJsonLiveHwloc(benchmark::State& state) { RunCheckBench(state, ""); }
BENCHMARK(BM_CheckJsonLiveHwloc)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_NodeMetricsPassH100(benchmark::State& state) {
  fw::agent::NodeMetricsOptions o;
  o.check.sysfs_root = Testdata("sysfs/gpud-h100");
  o.check.hwloc_xml = Testdata("hwloc/psmgmt-topo.jrc0386.xml");
  o.check.node_name = "bench";
  o.recheck_interval = std::chrono::hours(24);  // the periodic re-check is not per second
  fw::metrics::Registry registry;
  fw::FakeClock clock;
  fw::agent::NodeMetrics nm(o, registry, clock);
  if (!nm.SampleNow().ok()) state.SkipWithError("first check failed");
  for (auto _ : state) {
    clock.Advance(std::chrono::seconds(1));
    benchmark::DoNotOptimize(nm.SampleNow());
  }
}
BENCHMARK(BM_NodeMetricsPassH100)->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
