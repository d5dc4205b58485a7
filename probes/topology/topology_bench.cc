// Benchmarks: hwloc XML discovery and affinity on real exports.
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <string>

#include "probes/topology/affinity.h"
#include "probes/topology/hwloc_discovery.h"

namespace {

std::string Testdata(const char* rel) {
  const char* dir = std::getenv("FW_TESTDATA");
  return std::string(dir ? dir : "tests/testdata") + "/" + rel;
}

void BM_DiscoverDgx2Xml(benchmark::State& state) {
  const std::string path = Testdata("hwloc/hwloc-nvidiaDGX2.v2.xml");
  for (auto _ : state) {
    auto t = fw::topology::DiscoverFromXmlFile(path);
    if (!t.ok()) state.SkipWithError(t.status().ToString().c_str());
    benchmark::DoNotOptimize(t);
  }
}
BENCHMARK(BM_DiscoverDgx2Xml)->Unit(benchmark::kMillisecond);

void BM_AffinityDgx2(benchmark::State& state) {
  auto t = fw::topology::DiscoverFromXmlFile(Testdata("hwloc/hwloc-nvidiaDGX2.v2.xml"));
  if (!t.ok()) {
    state.SkipWithError(t.status().ToString().c_str());
    return;
  }
  for (auto _ : state) benchmark::DoNotOptimize(fw::topology::ComputeAffinity(*t));
}
BENCHMARK(BM_AffinityDgx2)->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
