// TCP connect-latency probe on loopback: success, refusal, timeout, bad targets.
#include "probes/net/tcp_prober.h"

#include <gtest/gtest.h>

#include "probes/net/echo_responder.h"
#include "probes/net/net_test_util.h"

namespace fw::net {
namespace {

using namespace std::chrono_literals;

TEST(TcpConnectProberTest, ConnectsToTheResponder) {
  ResponderOptions o;
  o.listen_address = "127.0.0.1";
  o.port = 0;
  auto responder = EchoResponder::Start(o, RealClock::Get());
  ASSERT_TRUE(responder.ok());
  TcpConnectProber prober(RealClock::Get());
  std::vector<TcpTarget> targets = {{"a", "127.0.0.1", (*responder)->port()},
                                    {"b", "127.0.0.1", (*responder)->port()}};
  auto results = prober.ProbeAll(targets, 2s);
  ASSERT_EQ(results.size(), 2u);
  for (auto& r : results) {
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_FALSE(r->lost);
    EXPECT_GT(r->rtt_ns, 0);
    EXPECT_LT(r->rtt_ns, 1'000'000'000);
    EXPECT_NE(r->src_port, 0);
    EXPECT_EQ(r->transport, Transport::kTcpConnect);
  }
  EXPECT_EQ(results[0]->PeerName(), "a");
  EXPECT_NE(results[0]->seq, results[1]->seq);
}

TEST(TcpConnectProberTest, RefusedPortIsAnErrorNotALoss) {
  // Take a free port and release it: nothing listens there.
  uint16_t port;
  {
    Fd s = testing::UdpSocket();
    port = LocalAddress(s.get())->port();
  }
  TcpConnectProber prober(RealClock::Get());
  std::vector<TcpTarget> targets = {{"closed", "127.0.0.1", port}};
  auto results = prober.ProbeAll(targets, 2s);
  ASSERT_FALSE(results[0].ok());
  EXPECT_EQ(results[0].status().code(), StatusCode::kUnavailable);
  EXPECT_NE(results[0].status().message().find("refused"), std::string::npos)
      << results[0].status().message();
}

TEST(TcpConnectProberTest, HandshakeThatNeverCompletesIsLost) {
  // A listener with a full accept queue drops further SYNs, so the handshake stalls.
  Fd listener(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in a = testing::Loopback(0);
  ASSERT_EQ(bind(listener.get(), reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ASSERT_EQ(listen(listener.get(), 0), 0);
  uint16_t port = LocalAddress(listener.get())->port();
  std::vector<Fd> fill;
  TcpConnectProber filler(RealClock::Get());
  for (int i = 0; i < 4; ++i) {
    Fd f(socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    sockaddr_in d = testing::Loopback(port);
    connect(f.get(), reinterpret_cast<sockaddr*>(&d), sizeof d);
    fill.push_back(std::move(f));
  }
  TcpConnectProber prober(RealClock::Get());
  std::vector<TcpTarget> targets = {{"stuck", "127.0.0.1", port}};
  auto results = prober.ProbeAll(targets, 300ms);
  ASSERT_TRUE(results[0].ok()) << results[0].status().ToString();
  EXPECT_TRUE(results[0]->lost);
  EXPECT_EQ(results[0]->rtt_ns, 0);
}

TEST(TcpConnectProberTest, BadAddressAndSpentBudgetAreErrors) {
  FakeClock clock;
  ProbeBudget budget(clock, 1, 1000, 1);
  ASSERT_TRUE(budget.TryConsume(1, 0));
  TcpConnectProber prober(RealClock::Get(), &budget);
  std::vector<TcpTarget> targets = {{"bad", "999.1.1.1", 1}, {"poor", "127.0.0.1", 1}};
  auto results = prober.ProbeAll(targets, 100ms);
  EXPECT_EQ(results[0].status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(results[1].status().code(), StatusCode::kResourceExhausted);
}

}  // namespace
}  // namespace fw::net
