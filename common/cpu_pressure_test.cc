#include "common/cpu_pressure.h"

#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <thread>

#include "common/testing/temp_dir.h"

namespace fw {
namespace {

// /proc/pressure/cpu of this 2-CPU VM (Linux 6.18) while the machine was building.
constexpr char kRealPressure[] =
    "some avg10=87.30 avg60=53.17 avg300=18.11 total=12306920946\n"
    "full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n";

TEST(CpuPressureParse, ReadsTheSomeTotal) {
  uint64_t us = 0;
  ASSERT_TRUE(ParsePressureSomeTotal(kRealPressure, us).ok());
  EXPECT_EQ(us, 12306920946u);
  // Kernels before 5.13 write no "full" line for the CPU; the fields may come in any order.
  ASSERT_TRUE(ParsePressureSomeTotal("some total=7 avg10=0.00", us).ok());
  EXPECT_EQ(us, 7u);
  // "full" is not "some".
  ASSERT_TRUE(ParsePressureSomeTotal("full avg10=0 total=5\nsome avg10=0 total=9\n", us).ok());
  EXPECT_EQ(us, 9u);
}

TEST(CpuPressureParse, RejectsMalformedText) {
  uint64_t us = 0;
  EXPECT_FALSE(ParsePressureSomeTotal("", us).ok());
  EXPECT_FALSE(ParsePressureSomeTotal("full avg10=0 total=5\n", us).ok());
  EXPECT_FALSE(ParsePressureSomeTotal("some avg10=0.00 avg60=0.00\n", us).ok());
  EXPECT_FALSE(ParsePressureSomeTotal("some total=\n", us).ok());
  EXPECT_FALSE(ParsePressureSomeTotal("some total=-4\n", us).ok());
  EXPECT_FALSE(ParsePressureSomeTotal("some total=12x\n", us).ok());
  EXPECT_FALSE(ParsePressureSomeTotal("some total=99999999999999999999999\n", us).ok());
  EXPECT_FALSE(ParsePressureSomeTotal("somewhat total=5\n", us).ok());
}

TEST(CpuPressureParse, ReadsTheRunDelayOfSchedstat) {
  uint64_t ns = 0;
  ASSERT_TRUE(ParseSchedstatRunDelay("3961758 590863 2\n", ns).ok());
  EXPECT_EQ(ns, 590863u);
  EXPECT_FALSE(ParseSchedstatRunDelay("3961758\n", ns).ok());
  EXPECT_FALSE(ParseSchedstatRunDelay("", ns).ok());
  EXPECT_FALSE(ParseSchedstatRunDelay("1 -2 3\n", ns).ok());
  EXPECT_FALSE(ParseSchedstatRunDelay("1 99999999999999999999999 3\n", ns).ok());
}

TEST(CpuPressureParse, StallShareIsAShareOfTheWallTimeOrUnknown) {
  EXPECT_DOUBLE_EQ(StallShare(1'000'000, 16'000'000, 20'000'000), 0.75);
  EXPECT_DOUBLE_EQ(StallShare(5, 5, 20'000'000), 0.0);
  // Read a few microseconds apart from the clock: over the wall time reads as all of it.
  EXPECT_DOUBLE_EQ(StallShare(0, 20'000'100, 20'000'000), 1.0);
  EXPECT_EQ(StallShare(10, 5, 20'000'000), -1);  // backwards
  EXPECT_EQ(StallShare(0, 5, kMinPressureWallNs - 1), -1);
  EXPECT_EQ(StallShare(0, 0, -5), -1);
}

TEST(CpuPressureMeter, MeasuresFilesAndCountsFailures) {
  testing::TempDir dir("fw-psi");
  const std::string psi = dir.path() + "/cpu", sched = dir.path() + "/schedstat";
  auto write = [](const std::string& path, const std::string& text) {
    std::ofstream(path) << text;
  };
  CpuPressureMeter meter(psi, sched);
  write(psi, "some avg10=0.00 avg60=0.00 avg300=0.00 total=1000\n");
  write(sched, "500 2000000 3\n");
  meter.Start(0);
  // 30 ms of wall: 24 ms of "some" stall (µs in the file), 6 ms of this thread's run delay.
  write(psi, "some avg10=80.00 avg60=0.00 avg300=0.00 total=25000\n");
  write(sched, "900 8000000 9\n");
  CpuPressure p = meter.Stop(30'000'000);
  EXPECT_DOUBLE_EQ(p.some, 0.8);
  EXPECT_DOUBLE_EQ(p.thread_wait, 0.2);
  EXPECT_EQ(meter.failures(), 0u);
  // A malformed reading: unknown and counted; the next interval measures again.
  meter.Start(0);
  write(psi, "some avg10=garbage\n");
  p = meter.Stop(30'000'000);
  EXPECT_EQ(p.some, -1);
  EXPECT_DOUBLE_EQ(p.thread_wait, 0.0);
  EXPECT_EQ(meter.failures(), 1u);
  EXPECT_FALSE(meter.pressure_absent());
  // Stop without Start: unknown, nothing read.
  EXPECT_EQ(meter.Stop(1'000'000'000).some, -1);
}

// A kernel without PSI (no file, or psi=0 on its command line): unmeasured, not a failure, and
// the file is not tried again.
TEST(CpuPressureMeter, AnAbsentPressureFileIsUnmeasuredNotAFailure) {
  testing::TempDir dir("fw-psi");
  const std::string sched = dir.path() + "/schedstat";
  std::ofstream(sched) << "500 1000 3\n";
  CpuPressureMeter meter(dir.path() + "/no-pressure", sched);
  for (int i = 0; i < 3; ++i) {
    meter.Start(0);
    const CpuPressure p = meter.Stop(10'000'000);
    EXPECT_EQ(p.some, -1);
    EXPECT_DOUBLE_EQ(p.thread_wait, 0.0);
  }
  EXPECT_TRUE(meter.pressure_absent());
  EXPECT_FALSE(meter.schedstat_absent());
  EXPECT_EQ(meter.failures(), 0u);
}

TEST(CpuPressureMeter, ReadsThisHostsFiles) {
  CpuPressureMeter meter;
  const auto now = [] {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
  };
  meter.Start(now());
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  const CpuPressure p = meter.Stop(now());
  EXPECT_EQ(meter.failures(), 0u);
  // The thread's own run delay exists on every kernel with schedstat (CONFIG_SCHED_INFO).
  if (!meter.schedstat_absent()) {
    EXPECT_GE(p.thread_wait, 0.0);
    EXPECT_LE(p.thread_wait, 1.0);
  }
  if (!meter.pressure_absent()) {
    EXPECT_GE(p.some, 0.0);
    EXPECT_LE(p.some, 1.0);
  }
}

}  // namespace
}  // namespace fw
