// For tests and benchmarks: the node snapshot of the repository's H100 sysfs tree.
#pragma once

#include <chrono>
#include <cstdlib>
#include <string>

#include "daemon/agent/node/node_metrics.h"

namespace fw::agent::testing {

// FW_TESTDATA, or tests/testdata relative to the working directory.
inline std::string TestData() {
  const char* d = std::getenv("FW_TESTDATA");
  return d ? d : "tests/testdata";
}

// The H100 tree (tests/testdata/sysfs/gpud-h100, with its hwloc export) after `passes` counter
// passes a second apart: from the second on, the ports have rates. `ok` (optional) is false when
// a pass failed.
inline NodeSnapshot H100Snapshot(int passes = 1, bool* ok = nullptr) {
  FakeClock clock;
  metrics::Registry registry;
  NodeMetricsOptions o;
  o.check.sysfs_root = TestData() + "/sysfs/gpud-h100";
  o.check.hwloc_xml = TestData() + "/hwloc/psmgmt-topo.jrc0386.xml";
  o.check.node_name = "h100-test";
  NodeMetrics node(o, registry, clock);
  if (ok) *ok = true;
  for (int i = 0; i < passes; ++i) {
    if (i > 0) clock.Advance(std::chrono::seconds(1));
    const bool pass_ok = node.SampleNow().ok();
    if (ok) *ok = *ok && pass_ok;
  }
  return node.Latest();
}

}  // namespace fw::agent::testing
