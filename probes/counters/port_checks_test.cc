// Port findings on the real H100 tree and on synthetic counter movements.
#include "probes/counters/port_checks.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>

#include "probes/counters/fake_sysfs.h"

namespace fw::counters {
namespace {

using namespace std::chrono_literals;
using testing::FakeSysfs;
using ::testing::HasSubstr;

TEST(PortChecksH100, SaturatedCountersAreReportedOnTheFirstPass) {
  const char* dir = std::getenv("FW_TESTDATA");
  FakeClock clock;
  Sampler sampler({.sysfs_root = std::string(dir ? dir : "tests/testdata") + "/sysfs/gpud-h100"},
                  clock);
  auto findings = CheckPorts(sampler.SampleOnce(), "h100");
  SortFindings(findings);
  // mlx5_1 link_downed at 255 (8-bit), and excessive_buffer_overrun_errors at 15 on every port:
  // that counter is 4 bits wide (kernel PORT_PMA_ATTR), so 15 is its ceiling too.
  ASSERT_EQ(findings.size(), 10u);
  int link_downed = 0, overrun = 0;
  for (const Finding& f : findings) {
    EXPECT_EQ(f.kind, "port_errors");
    EXPECT_EQ(f.severity, Severity::kWarning);
    if (f.summary.find("link_downed") != std::string::npos) {
      ++link_downed;
      EXPECT_THAT(f.summary, HasSubstr("mlx5_1 port 1: link_downed saturated at 255, so the "
                                       "counter can no longer show new link drops"));
      EXPECT_EQ(f.location.device, "mlx5_1");
      EXPECT_EQ(f.location.port, 1);
      EXPECT_EQ(f.location.id, "h100/mlx5_1/1");
      EXPECT_EQ(f.evidence.at("link_downed"), 255);
    }
    if (f.summary.find("excessive_buffer_overrun_errors saturated at 15") != std::string::npos) {
      ++overrun;
    }
  }
  EXPECT_EQ(link_downed, 1);
  EXPECT_EQ(overrun, 9);
  clock.Advance(1s);
  EXPECT_EQ(CheckPorts(sampler.SampleOnce(), "h100").size(), 10u);  // no new rate findings
}

TEST(PortChecks, ClimbingErrorsLinkDropsCongestionAndVanishing) {
  FakeSysfs fs;
  fs.AddPort("mlx5_0", 1);
  fs.Counter("mlx5_0", 1, "symbol_error", "0");
  fs.Counter("mlx5_0", 1, "port_rcv_errors", "0");
  fs.Counter("mlx5_0", 1, "link_downed", "0");
  fs.Counter("mlx5_0", 1, "port_xmit_wait", "0");
  fs.HwCounter("mlx5_0", 1, "np_ecn_marked_roce_packets", "0");
  fs.HwCounter("mlx5_0", 1, "local_ack_timeout_err", "0");
  fs.AddPort("mlx5_1", 1);
  FakeClock clock;
  Sampler sampler({.sysfs_root = fs.root()}, clock);
  EXPECT_TRUE(CheckPorts(sampler.SampleOnce(), "n").empty());
  fs.Counter("mlx5_0", 1, "symbol_error", "3");
  fs.Counter("mlx5_0", 1, "port_rcv_errors", "40");
  fs.Counter("mlx5_0", 1, "link_downed", "1");
  fs.Counter("mlx5_0", 1, "port_xmit_wait", "2000000000");  // 16e9 of 50e9 B/s in 1 s → 0.32
  fs.HwCounter("mlx5_0", 1, "np_ecn_marked_roce_packets", "3000");
  fs.HwCounter("mlx5_0", 1, "local_ack_timeout_err", "2");
  fs.Remove("class/infiniband/mlx5_1");
  clock.Advance(1s);
  auto f = CheckPorts(sampler.SampleOnce(), "n");
  SortFindings(f);
  ASSERT_EQ(f.size(), 7u);
  auto find = [&](const std::string& text) -> const Finding* {
    for (const Finding& x : f) {
      if (x.summary.find(text) != std::string::npos) return &x;
    }
    return nullptr;
  };
  ASSERT_NE(find("mlx5_1 port 1 disappeared"), nullptr);
  EXPECT_EQ(find("mlx5_1 port 1 disappeared")->kind, "nic_down");
  ASSERT_NE(find("link_downed rose by 1"), nullptr);
  EXPECT_EQ(find("link_downed rose by 1")->severity, Severity::kCritical);
  ASSERT_NE(find("symbol_error rose by 3 in 1 s (3/s)"), nullptr);
  EXPECT_EQ(find("symbol_error rose by 3")->severity, Severity::kWarning);
  EXPECT_EQ(find("port_rcv_errors rose by 40")->severity, Severity::kCritical);
  ASSERT_NE(find("local_ack_timeout_err rose by 2"), nullptr);
  const Finding* wait = find("waited to transmit 32% of the time");
  ASSERT_NE(wait, nullptr);
  EXPECT_EQ(wait->kind, "port_congestion");
  EXPECT_EQ(wait->severity, Severity::kCritical);
  EXPECT_NEAR(wait->evidence.at("xmit_wait_ratio"), 0.32, 1e-9);
  const Finding* ecn = find("ECN-marked packets at 3000/s");
  ASSERT_NE(ecn, nullptr);
  EXPECT_EQ(ecn->severity, Severity::kWarning);
}

TEST(PortChecks, TickAssumptionIsConfigurable) {
  FakeSysfs fs;
  fs.AddPort("mlx5_0", 1, "100 Gb/sec (4X EDR)");
  fs.Counter("mlx5_0", 1, "port_xmit_wait", "0");
  FakeClock clock;
  Sampler sampler({.sysfs_root = fs.root(), .xmit_wait_tick_bytes = 32.0}, clock);
  sampler.SampleOnce();
  fs.Counter("mlx5_0", 1, "port_xmit_wait", "39062500");  // × 32 B = 1.25e9 of 12.5e9 B/s
  clock.Advance(1s);
  EXPECT_DOUBLE_EQ(*sampler.SampleOnce().front().xmit_wait_ratio, 0.1);
}

}  // namespace
}  // namespace fw::counters
