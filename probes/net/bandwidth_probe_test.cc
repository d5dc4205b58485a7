// Bandwidth probe against the responder on loopback: goodput sanity, budget, auth, timeout.
#include "probes/net/bandwidth_probe.h"

#include <gtest/gtest.h>

#include "probes/net/echo_responder.h"
#include "probes/net/net_test_util.h"

namespace fw::net {
namespace {

using namespace std::chrono_literals;

std::unique_ptr<EchoResponder> StartResponder(std::optional<std::string> key = std::nullopt) {
  ResponderOptions o;
  o.key = std::move(key);
  return testing::StartResponder(std::move(o));
}

TEST(BandwidthProbeTest, BurstGoodputIsPlausibleAndTheReplyIsOnlyAnAck) {
  auto responder = StartResponder();
  ASSERT_TRUE(responder);
  BandwidthProbe probe(RealClock::Get(), nullptr, std::nullopt);
  BandwidthOptions o;
  o.bytes = 8u << 20;
  auto r = probe.Run({"peer", "127.0.0.1", responder->port()}, o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_FALSE(r->lost);
  EXPECT_EQ(r->transport, Transport::kTcpBw);
  EXPECT_EQ(r->bytes, 8u << 20);
  // Loopback moves at least 100 Mbit/s even on a loaded 2-core VM, and less than 1 Tbit/s.
  EXPECT_GT(r->goodput_bps, 100e6);
  EXPECT_LT(r->goodput_bps, 1e12);
  EXPECT_NEAR(r->goodput_bps, (8u << 20) * 8.0 / (r->rtt_ns * 1e-9), 1.0);
  // This host's CPU share over the 120 ms lead and the burst, from /proc/stat.
  EXPECT_GE(r->cpu_busy_permille, 1);
  EXPECT_LE(r->cpu_busy_permille, 1000);
  EXPECT_EQ(probe.cpu_read_failures(), 0u);
  // Its CPU pressure over the burst alone (PSI, where the kernel has it) and this thread's wait.
  if (!probe.pressure_meter().pressure_absent()) {
    EXPECT_GE(r->cpu_pressure_permille, 1);
    EXPECT_LE(r->cpu_pressure_permille, 1000);
    EXPECT_EQ(r->cpu_pressure_permille, BusyPermille(probe.last_pressure().some));
  }
  EXPECT_EQ(probe.pressure_meter().failures(), 0u);
  // The responder counts its send just after the ack leaves: give it a moment.
  testing::Eventually([&] { return responder->Stats().bytes_out > 0; }, 2s);
  ResponderStats s = responder->Stats();
  EXPECT_EQ(s.bulk_acks, 1u);
  EXPECT_EQ(s.bytes_out, kHeaderSize);
  EXPECT_GE(s.bytes_in, (8u << 20) + kHeaderSize);
}

// An unreadable CPU file leaves the burst's share "not measured" and counts the failure; the
// goodput is measured as ever.
TEST(BandwidthProbeTest, AnUnreadableCpuFileIsCountedAndTheBurstStillMeasures) {
  auto responder = StartResponder();
  ASSERT_TRUE(responder);
  BandwidthProbe probe(RealClock::Get(), nullptr, std::nullopt);
  probe.SetCpuStatPath("/nonexistent/stat");
  BandwidthOptions o;
  o.bytes = 1u << 20;
  auto r = probe.Run({"peer", "127.0.0.1", responder->port()}, o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_GT(r->goodput_bps, 0);
  EXPECT_EQ(r->cpu_busy_permille, 0);
  EXPECT_EQ(r->cpu_peak_permille, 0);
  EXPECT_EQ(probe.cpu_read_failures(), 1u);
}

// A kernel without PSI: the burst reports no CPU pressure, which is no failure; this thread's
// own wait is still measured.
TEST(BandwidthProbeTest, WithoutPressureStallInformationTheBurstSaysNotMeasured) {
  auto responder = StartResponder();
  ASSERT_TRUE(responder);
  BandwidthProbe probe(RealClock::Get(), nullptr, std::nullopt);
  probe.SetCpuPressurePaths("/nonexistent/pressure/cpu", "/proc/thread-self/schedstat");
  BandwidthOptions o;
  o.bytes = 1u << 20;
  o.cpu_lead = 0ms;
  for (int i = 0; i < 2; ++i) {
    auto r = probe.Run({"peer", "127.0.0.1", responder->port()}, o);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_GT(r->goodput_bps, 0);
    EXPECT_EQ(r->cpu_pressure_permille, 0);
  }
  EXPECT_TRUE(probe.pressure_meter().pressure_absent());
  EXPECT_EQ(probe.pressure_meter().failures(), 0u);
  EXPECT_FALSE(probe.pressure_meter().schedstat_absent());
  const double wait = probe.last_pressure().thread_wait;  // -1: a burst under 200 µs
  EXPECT_TRUE(wait == -1 || (wait >= 0 && wait <= 1)) << wait;
}

TEST(BandwidthProbeTest, BudgetRefusesABurstItCannotPayFor) {
  auto responder = StartResponder();
  ASSERT_TRUE(responder);
  FakeClock clock;
  ProbeBudget budget(clock, 1e6, /*bytes_per_s=*/1e6, /*burst_seconds=*/1);
  BandwidthProbe probe(RealClock::Get(), &budget, std::nullopt);
  BandwidthOptions o;
  o.bytes = 4u << 20;
  auto r = probe.Run({"peer", "127.0.0.1", responder->port()}, o);
  EXPECT_EQ(r.status().code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(responder->Stats().tcp_accepted, 0u) << "a refused burst sends nothing";
  o.bytes = 512 * 1024;
  EXPECT_TRUE(probe.Run({"peer", "127.0.0.1", responder->port()}, o).ok());
}

TEST(BandwidthProbeTest, KeysMustMatch) {
  auto responder = StartResponder("k1");
  ASSERT_TRUE(responder);
  BandwidthOptions o;
  o.bytes = 64 * 1024;
  BandwidthProbe good(RealClock::Get(), nullptr, "k1");
  auto r = good.Run({"peer", "127.0.0.1", responder->port()}, o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_FALSE(r->lost);
  BandwidthProbe bad(RealClock::Get(), nullptr, "k2");
  auto rejected = bad.Run({"peer", "127.0.0.1", responder->port()}, o);
  EXPECT_EQ(rejected.status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(responder->Stats().dropped[static_cast<size_t>(ResponderDrop::kBadAuth)], 1u);
}

TEST(BandwidthProbeTest, NoAckWithinTheTimeoutIsLost) {
  // A listener that completes handshakes but never reads: the burst stalls.
  Fd listener(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in a = testing::Loopback(0);
  ASSERT_EQ(bind(listener.get(), reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ASSERT_EQ(listen(listener.get(), 4), 0);
  BandwidthProbe probe(RealClock::Get(), nullptr, std::nullopt);
  BandwidthOptions o;
  o.bytes = 64u << 20;
  o.timeout = 300ms;
  auto r = probe.Run({"sink", "127.0.0.1", LocalAddress(listener.get())->port()}, o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->lost);
  EXPECT_EQ(r->goodput_bps, 0);
}

TEST(BandwidthProbeTest, RejectsBadSizesAndTargets) {
  BandwidthProbe probe(RealClock::Get(), nullptr, std::nullopt);
  BandwidthOptions o;
  o.bytes = 0;
  EXPECT_EQ(probe.Run({"p", "127.0.0.1", 1}, o).status().code(), StatusCode::kInvalidArgument);
  o.bytes = 1024;
  EXPECT_EQ(probe.Run({"p", "nope", 1}, o).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace fw::net
