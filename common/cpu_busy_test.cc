#include "common/cpu_busy.h"

#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "common/testing/temp_dir.h"

namespace fw {
namespace {

// A real /proc/stat of a 2-CPU host (Linux 6.x), first lines and the tail shortened.
constexpr char kReal[] =
    "cpu  190874 0 51258 602498 999 0 306 0 0 0\n"
    "cpu0 94306 0 25057 303186 275 0 79 0 0 0\n"
    "cpu1 96568 0 26201 299312 723 0 226 0 0 0\n"
    "intr 998501 0 0 0 0 0 0 0 0\n"
    "ctxt 867969\n"
    "btime 1764920000\n"
    "processes 12345\n"
    "procs_running 3\n"
    "procs_blocked 0\n"
    "softirq 1 2 3 4 5 6 7 8 9 10 11\n";

TEST(ProcStat, ParsesARealFile) {
  CpuSnapshot s;
  ASSERT_TRUE(ParseProcStat(kReal, s).ok());
  // busy = user + nice + system + irq + softirq + steal; total adds idle and iowait.
  EXPECT_EQ(s.all.busy, 190874u + 51258u + 306u);
  EXPECT_EQ(s.all.total, 190874u + 51258u + 306u + 602498u + 999u);
  ASSERT_EQ(s.cpus.size(), 2u);
  EXPECT_EQ(s.cpus[1].busy, 96568u + 26201u + 226u);
  EXPECT_EQ(s.cpus[1].total, 96568u + 26201u + 226u + 299312u + 723u);
}

TEST(ProcStat, GuestTimeIsNotCountedTwice) {
  CpuSnapshot s;
  ASSERT_TRUE(ParseProcStat("cpu 10 0 0 80 0 0 0 5 7 3\ncpu0 10 0 0 80 0 0 0 5 7 3\n", s).ok());
  EXPECT_EQ(s.all.busy, 15u);  // user + steal; guest (7) and guest_nice (3) are inside user/nice
  EXPECT_EQ(s.all.total, 95u);
}

TEST(ProcStat, OldKernelsWithFourFieldsParse) {
  CpuSnapshot s;
  ASSERT_TRUE(ParseProcStat("cpu 1 2 3 4\ncpu0 1 2 3 4\n", s).ok());
  EXPECT_EQ(s.all.busy, 6u);
  EXPECT_EQ(s.all.total, 10u);
}

TEST(ProcStat, MalformedTextIsAnErrorNotACrash) {
  const char* bad[] = {
      "",
      "intr 1 2 3\n",                                // no cpu line first
      "cpu 1 2 3\n",                                 // too few fields
      "cpu 1 2 x 4\n",                               // not a number
      "cpu 1 2 -3 4\n",                              // negative
      "cpu 99999999999999999999 0 0 0\n",            // over 64 bits
      "cpu 18446744073709551615 1 0 0\n",            // the busy sum overflows
      "cpu0 1 2 3 4\ncpu 1 2 3 4\n",                 // cpuN before cpu
      "cpu 1 2 3 4\ncpu 1 2 3 4\n",                  // two aggregates
      "cpuX 1 2 3 4\n",                              // a malformed label
      "cpu 1 2 3 4\ncpu0 1 2 3\n",                   // a short cpuN line
      "cpu 1 2 3 4\ncpu0 1 2 3 4\ncpu1 1 2 3 4x\n",  // trailing junk
  };
  for (const char* text : bad) {
    CpuSnapshot s;
    EXPECT_FALSE(ParseProcStat(text, s).ok()) << "'" << text << "'";
  }
  CpuSnapshot s;
  EXPECT_FALSE(ParseProcStat("cpu 1 2 3 4\ncpu0 1 2 3 4\ncpu1 1 2 3 4\n", s, 1).ok());
}

TEST(ProcStat, ReparsingIntoASnapshotKeepsItsStorage) {
  CpuSnapshot s;
  ASSERT_TRUE(ParseProcStat(kReal, s).ok());
  const CpuTimes* storage = s.cpus.data();
  ASSERT_TRUE(ParseProcStat(kReal, s).ok());
  EXPECT_EQ(s.cpus.data(), storage);
}

TEST(CpuBusy, SharesBetweenTwoSnapshots) {
  CpuSnapshot a, b;
  ASSERT_TRUE(ParseProcStat("cpu 100 0 0 100 0 0 0 0\ncpu0 50 0 0 50\ncpu1 50 0 0 50\n", a).ok());
  // cpu0 busy for all 100 jiffies, cpu1 for 20 of them.
  ASSERT_TRUE(ParseProcStat("cpu 220 0 0 180 0 0 0 0\ncpu0 150 0 0 50\ncpu1 70 0 0 130\n", b).ok());
  const CpuBusy busy = BusyBetween(a, b);
  EXPECT_DOUBLE_EQ(busy.all, 0.6);
  EXPECT_DOUBLE_EQ(busy.busiest, 1.0);
  // Nothing elapsed, counters backwards, or a CPU came online: unknown.
  EXPECT_LT(BusyBetween(a, a).all, 0);
  EXPECT_LT(BusyBetween(b, a).all, 0);
  CpuSnapshot c;
  ASSERT_TRUE(ParseProcStat("cpu 300 0 0 300 0 0 0 0\ncpu0 150 0 0 150\n", c).ok());
  EXPECT_LT(BusyBetween(b, c).busiest, 0);
  // Under the counters' resolution: 19 units over all CPUs, 9 on each.
  CpuSnapshot d;
  ASSERT_TRUE(ParseProcStat("cpu 229 0 0 190 0 0 0 0\ncpu0 159 0 0 50\ncpu1 70 0 0 139\n", d).ok());
  EXPECT_LT(BusyBetween(b, d).all, 0);
  EXPECT_LT(BusyBetween(b, d).busiest, 0);
  // cpu0 idle for 11 units, cpu1 busy for its 9 (under the resolution, skipped): the busiest is
  // never below the mean of all CPUs.
  CpuSnapshot e;
  ASSERT_TRUE(ParseProcStat("cpu 229 0 0 191 0 0 0 0\ncpu0 150 0 0 61\ncpu1 79 0 0 130\n", e).ok());
  EXPECT_DOUBLE_EQ(BusyBetween(b, e).all, 9.0 / 20.0);
  EXPECT_DOUBLE_EQ(BusyBetween(b, e).busiest, 9.0 / 20.0);
}

TEST(CpuBusy, PermilleKeepsZeroForNotMeasured) {
  EXPECT_EQ(BusyPermille(-1), 0u);
  EXPECT_EQ(BusyPermille(0.0), 1u);
  EXPECT_EQ(BusyPermille(0.9), 900u);
  EXPECT_EQ(BusyPermille(1.5), 1000u);
  EXPECT_EQ(BusyShare(0), -1);
  EXPECT_EQ(BusyShare(1001), -1);
  EXPECT_DOUBLE_EQ(BusyShare(950), 0.95);
}

TEST(CpuBusyMeter, MeasuresAFileAndCountsFailures) {
  testing::TempDir dir("fw-cpu");
  const std::string path = dir.path() + "/stat";
  auto write = [&](const char* text) { std::ofstream(path) << text; };
  CpuBusyMeter meter(path);
  write("cpu 0 0 0 100\ncpu0 0 0 0 100\n");
  ASSERT_TRUE(meter.Start().ok());
  write("cpu 95 0 0 105\ncpu0 95 0 0 105\n");
  const CpuBusy b = meter.Stop();
  EXPECT_DOUBLE_EQ(b.all, 0.95);
  EXPECT_DOUBLE_EQ(b.busiest, 0.95);
  EXPECT_EQ(meter.failures(), 0u);
  write("garbage\n");
  EXPECT_FALSE(meter.Start().ok());
  EXPECT_LT(meter.Stop().all, 0);  // no start: unknown
  EXPECT_EQ(meter.failures(), 1u);
  CpuBusyMeter missing(dir.path() + "/none");
  EXPECT_FALSE(missing.Start().ok());
}

TEST(CpuBusyMeter, ReadsThisHostsProcStat) {
  CpuBusyMeter meter;
  ASSERT_TRUE(meter.Start().ok());
  volatile uint64_t spin = 0;
  for (int i = 0; i < 20'000'000; ++i) spin = spin + i;
  const CpuBusy b = meter.Stop();
  // At least this thread was busy; a tick may not have passed on an idle host, so -1 is allowed.
  if (b.all >= 0) {
    EXPECT_LE(b.all, 1.0);
    EXPECT_GE(b.busiest, b.all);
  }
}

}  // namespace
}  // namespace fw
