// The busy-GPU check against the fake NVML seam, and the real loader on this machine (no driver,
// no libnvidia-ml): a clear "unavailable", no crash.
#include "probes/collective/nvml.h"

#include <gtest/gtest.h>

namespace fw::collective {
namespace {

TEST(GpuBusy, IdleGpusAreNotBusy) {
  FakeNvml nvml({{.utilization = 0}, {.utilization = 5}});
  const GpuBusyReport r = CheckGpusBusy(nvml);
  EXPECT_TRUE(r.checked);
  EXPECT_TRUE(r.busy.empty());
  EXPECT_EQ(r.Reason(), "");
}

TEST(GpuBusy, UtilizationOrAProcessMakesAGpuBusy) {
  FakeNvml nvml({{.utilization = 0}, {.utilization = 87, .processes = 2}, {.processes = 1}});
  const GpuBusyReport r = CheckGpusBusy(nvml);
  EXPECT_TRUE(r.checked);
  ASSERT_EQ(r.busy.size(), 2u);
  EXPECT_EQ(r.Reason(),
            "GPUs busy: gpu1 (utilization 87%, 2 processes), gpu2 (utilization 0%, 1 processes)");
  // Processes alone may be allowed: then only utilization counts.
  EXPECT_EQ(CheckGpusBusy(nvml, {.any_process_is_busy = false}).busy.size(), 1u);
}

TEST(GpuBusy, AGpuThatCannotBeReadCountsAsBusy) {
  FakeNvml nvml({{.utilization = 0}, {.fails = true}});
  const GpuBusyReport r = CheckGpusBusy(nvml);
  EXPECT_TRUE(r.checked);
  ASSERT_EQ(r.busy.size(), 1u);
  EXPECT_NE(r.busy[0].find("gpu1 (not readable: "), std::string::npos) << r.busy[0];
}

TEST(GpuBusy, RealLoaderWithoutTheLibraryIsUnavailable) {
  auto nvml = LoadNvml("/nonexistent/libnvidia-ml.so.1");
  ASSERT_FALSE(nvml.ok());
  EXPECT_EQ(nvml.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(nvml.status().message().find("libnvidia-ml.so.1"), std::string::npos)
      << nvml.status().message();
  // What this machine has (no NVIDIA driver): unavailable or, with a driver, loaded. Never a crash.
  auto here = LoadNvml();
  if (here.ok()) {
    (void)CheckGpusBusy(**here);
  } else {
    EXPECT_EQ(here.status().code(), StatusCode::kUnavailable) << here.status().message();
  }
}

}  // namespace
}  // namespace fw::collective
