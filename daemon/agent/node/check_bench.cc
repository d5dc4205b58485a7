// Benchmark: wall time of a full `check` (hwloc XML discovery, PCIe, profile, one counter pass).
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <sstream>
#include <string>

#include "daemon/agent/node/check_command.h"

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

}  // namespace

BENCHMARK_MAIN();
