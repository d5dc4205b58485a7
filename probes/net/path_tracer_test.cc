// PathTracer on a real prober's loop: when new probe budget wakes the loop.
#include "probes/net/path_tracer.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/clock.h"
#include "probes/net/net_test_util.h"

namespace fw::net {
namespace {

using namespace std::chrono_literals;
using testing::Eventually;

bool CanOpenRawSockets() {
  const int fd = socket(AF_INET, SOCK_RAW | SOCK_CLOEXEC, IPPROTO_ICMP);
  if (fd < 0) return false;
  close(fd);
  return true;
}

TraceFlow Loopback(uint16_t dst_port) {
  TraceFlow f;
  f.peer = "self";
  f.peer_address = 0x7f000001;
  f.dst_port = dst_port;
  f.src_port = static_cast<uint16_t>(dst_port + 1);
  return f;
}

// The agent adds the probe packets of each second. New budget wakes the prober's loop only when
// it lets a queued trace start; an idle tracer, or one still short of a trace's budget, is left
// asleep and the budget taken at its next wakeup.
TEST(PathTracerTest, NewBudgetWakesTheLoopOnlyForAWaitingTrace) {
  if (!CanOpenRawSockets()) GTEST_SKIP() << "raw sockets need CAP_NET_RAW";
  ResultQueue results(64);
  auto prober = UdpProber::Start(UdpProberOptions{}, RealClock::Get(), results, nullptr);
  ASSERT_TRUE(prober.ok()) << prober.status().ToString();
  PathTracerOptions o;
  o.budget_fraction = 1;  // a trace's worth (max_ttl packets) per max_ttl probe packets
  o.max_ttl = 4;
  o.hop_timeout_ns = 50'000'000;
  auto tracer = PathTracer::Start(o, **prober);
  ASSERT_TRUE(tracer.ok()) << tracer.status().ToString();
  PathTracer& t = **tracer;

  // Nothing queued: budget wakes nothing (and is kept: it starts the second trace below).
  t.AddProbePackets(1);
  usleep(20'000);
  EXPECT_EQ(t.Stats().budget_wakes, 0u);

  // Two flows to closed loopback ports: the first trace spends the starting credit of 4 packets
  // (4 + 1 credit kept), the second waits for budget once the first has spent it.
  t.SetFlows({Loopback(9), Loopback(19)});
  ASSERT_TRUE(Eventually([&] { return t.Stats().traces_done >= 1; }, 3000ms));
  EXPECT_EQ(t.Stats().traces_started, 1u);
  EXPECT_GE(t.Stats().budget_deferred, 1u);
  EXPECT_EQ(t.Stats().budget_wakes, 0u);

  // The second needs 3 more packets: 2 wake nothing, the third wakes the loop once, and the
  // trace runs at once.
  t.AddProbePackets(1);
  t.AddProbePackets(1);
  EXPECT_EQ(t.Stats().budget_wakes, 0u);
  t.AddProbePackets(1);
  EXPECT_EQ(t.Stats().budget_wakes, 1u);
  ASSERT_TRUE(Eventually([&] { return t.Stats().traces_done >= 2; }, 3000ms));
  EXPECT_EQ(t.Stats().traces_started, 2u);

  // Idle again: more budget wakes nothing.
  usleep(20'000);
  t.AddProbePackets(100);
  t.AddProbePackets(100);
  EXPECT_EQ(t.Stats().budget_wakes, 1u);
  EXPECT_EQ(t.TakeTraces().size(), 2u);
  t.Stop();
  (*prober)->Stop();
}

}  // namespace
}  // namespace fw::net
