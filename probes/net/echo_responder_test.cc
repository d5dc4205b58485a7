// Echo responder on loopback: UDP and TCP echo, bulk ack, auth, rate limits, drops by cause.
#include "probes/net/echo_responder.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <thread>
#include <vector>

#include "probes/net/net_test_util.h"

namespace fw::net {
namespace {

using namespace std::chrono_literals;
using testing::ClosedWithin;
using testing::Eventually;
using testing::RecvExactly;
using testing::RecvWithin;
using testing::SendAll;
using testing::SendTo;
using testing::StartResponder;
using testing::ThreadsNamed;

std::vector<uint8_t> Request(uint32_t payload, const HmacSha256* key, uint64_t seq = 7,
                             PacketType type = PacketType::kEchoRequest) {
  ProbeHeader h;
  h.type = type;
  h.seq = seq;
  h.flow_id = 3;
  h.payload_len = payload;
  h.send_ts_ns = 42;
  std::vector<uint8_t> buf(kHeaderSize + kMacSize + payload, 0x5a);
  size_t n = WriteHeader(h, key, buf);
  buf.resize(n + (type == PacketType::kBulkRequest ? 0 : payload));
  return buf;
}

// Sends a 1 MiB bulk request with sequence number `seq` on a connected socket; returns what came
// back within 5 s, up to one header (the ack).
std::vector<uint8_t> SendBulk(int fd, uint64_t seq) {
  const uint32_t bulk = 1u << 20;
  std::vector<uint8_t> header = Request(bulk, nullptr, seq, PacketType::kBulkRequest);
  std::vector<uint8_t> body(bulk, 0);
  if (!SendAll(fd, header.data(), header.size()) || !SendAll(fd, body.data(), body.size())) {
    return {};
  }
  return RecvExactly(fd, kHeaderSize, 5000ms);
}

uint64_t Dropped(const EchoResponder& r, ResponderDrop d) {
  return r.Stats().dropped[static_cast<size_t>(d)];
}

TEST(EchoResponderTest, UdpEchoesSeqTimestampAndSize) {
  auto r = StartResponder();
  ASSERT_TRUE(r);
  Fd c = testing::UdpSocket();
  std::vector<uint8_t> req = Request(200, nullptr, 99);
  ASSERT_TRUE(SendTo(c.get(), r->port(), req));
  auto reply = RecvWithin(c.get(), 2000ms);
  ASSERT_TRUE(reply);
  EXPECT_EQ(reply->size(), req.size());
  ProbeHeader h;
  ASSERT_TRUE(ParseProbe(*reply, nullptr, &h).ok());
  EXPECT_EQ(h.type, PacketType::kEchoReply);
  EXPECT_EQ(h.seq, 99u);
  EXPECT_EQ(h.send_ts_ns, 42);
  EXPECT_EQ(h.flow_id, 3u);
  // The responder counts a reply just after sending it.
  EXPECT_TRUE(Eventually([&] { return r->Stats().udp_replies == 1; }, 2s));
  EXPECT_EQ(r->Stats().udp_requests, 1u);
}

TEST(EchoResponderTest, NeverSendsMoreBytesThanItReceived) {
  HmacSha256 key("k");
  for (bool keyed_responder : {false, true}) {
    ResponderOptions o;
    if (keyed_responder) o.key = "k";
    auto r = StartResponder(o);
    ASSERT_TRUE(r);
    Fd c = testing::UdpSocket();
    for (uint32_t payload : {0u, 1u, 64u, 1400u, kMaxEchoPayload}) {
      for (const HmacSha256* k :
           {static_cast<const HmacSha256*>(nullptr), static_cast<const HmacSha256*>(&key)}) {
        std::vector<uint8_t> req = Request(payload, k);
        ASSERT_TRUE(SendTo(c.get(), r->port(), req));
        auto reply = RecvWithin(c.get(), keyed_responder && !k ? 50ms : 2000ms);
        if (reply) {
          EXPECT_LE(reply->size(), req.size()) << "payload " << payload;
        }
        // A keyless responder strips the MAC: its reply to a signed request is 16 bytes shorter.
        if (reply && !keyed_responder && k) {
          EXPECT_EQ(reply->size(), req.size() - kMacSize);
        }
      }
    }
    // Garbage of every length gets nothing back.
    for (size_t len : {1u, 31u, 32u, 100u, 9100u}) {
      ASSERT_TRUE(SendTo(c.get(), r->port(), std::vector<uint8_t>(len, 0xff)));
    }
    EXPECT_FALSE(RecvWithin(c.get(), 100ms));
    ResponderStats s = r->Stats();
    EXPECT_GT(s.bytes_out, 0u);
    EXPECT_LE(s.bytes_out, s.bytes_in);
  }
}

TEST(EchoResponderTest, MalformedDatagramsAreCountedByCause) {
  auto r = StartResponder();
  ASSERT_TRUE(r);
  Fd c = testing::UdpSocket();
  std::vector<uint8_t> good = Request(10, nullptr);
  ASSERT_TRUE(SendTo(c.get(), r->port(), std::vector<uint8_t>(good.begin(), good.begin() + 20)));
  auto bad_magic = good;
  bad_magic[1] = 0;
  ASSERT_TRUE(SendTo(c.get(), r->port(), bad_magic));
  auto bad_version = good;
  bad_version[4] = 9;
  ASSERT_TRUE(SendTo(c.get(), r->port(), bad_version));
  auto short_payload = good;
  short_payload.pop_back();
  ASSERT_TRUE(SendTo(c.get(), r->port(), short_payload));
  ASSERT_TRUE(SendTo(c.get(), r->port(), Request(0, nullptr, 1, PacketType::kEchoReply)));
  ASSERT_TRUE(SendTo(c.get(), r->port(), std::vector<uint8_t>(kMaxEchoPayload + 200, 0)));

  EXPECT_TRUE(Eventually([&] { return Dropped(*r, ResponderDrop::kUnexpectedType) == 1; }, 2s));
  EXPECT_TRUE(Eventually([&] { return Dropped(*r, ResponderDrop::kBadLength) == 2; }, 2s));
  EXPECT_EQ(Dropped(*r, ResponderDrop::kTruncated), 1u);
  EXPECT_EQ(Dropped(*r, ResponderDrop::kBadMagic), 1u);
  EXPECT_EQ(Dropped(*r, ResponderDrop::kBadVersion), 1u);
  EXPECT_EQ(r->Stats().udp_replies, 0u);
  EXPECT_FALSE(RecvWithin(c.get(), 50ms));
  EXPECT_EQ(ResponderDropName(ResponderDrop::kBadVersion), "bad_version");
  EXPECT_EQ(ResponderDropName(ResponderDrop::kRateLimitedSource), "rate_limited_source");
  // It fell through to the prober's names, so the agent exported it under another reason.
  EXPECT_EQ(ResponderDropName(ResponderDrop::kNotInPlan), "not_in_plan");
}

TEST(EchoResponderTest, WithAKeyAnswersOnlyAuthenticatedProbes) {
  ResponderOptions o;
  o.key = "fleet-key";
  auto r = StartResponder(o);
  ASSERT_TRUE(r);
  HmacSha256 right("fleet-key"), wrong("guess");
  Fd c = testing::UdpSocket();

  ASSERT_TRUE(SendTo(c.get(), r->port(), Request(16, nullptr)));
  EXPECT_FALSE(RecvWithin(c.get(), 100ms));
  ASSERT_TRUE(SendTo(c.get(), r->port(), Request(16, &wrong)));
  EXPECT_FALSE(RecvWithin(c.get(), 100ms));
  ASSERT_TRUE(SendTo(c.get(), r->port(), Request(16, &right, 5)));
  auto reply = RecvWithin(c.get(), 2000ms);
  ASSERT_TRUE(reply);
  ProbeHeader h;
  ASSERT_TRUE(ParseProbe(*reply, &right, &h).ok()) << "the reply is signed with the same key";
  EXPECT_EQ(h.seq, 5u);
  EXPECT_EQ(Dropped(*r, ResponderDrop::kMissingAuth), 1u);
  EXPECT_EQ(Dropped(*r, ResponderDrop::kBadAuth), 1u);
}

TEST(EchoResponderTest, PerSourceRateLimit) {
  ResponderOptions o;
  o.per_source_rate = 0;  // no refill: exactly `burst` answers
  o.per_source_burst = 5;
  auto r = StartResponder(o);
  ASSERT_TRUE(r);
  Fd c = testing::UdpSocket();
  for (int i = 0; i < 20; ++i) ASSERT_TRUE(SendTo(c.get(), r->port(), Request(0, nullptr, i)));
  int replies = 0;
  while (RecvWithin(c.get(), 200ms)) ++replies;
  EXPECT_EQ(replies, 5);
  EXPECT_EQ(Dropped(*r, ResponderDrop::kRateLimitedSource), 15u);
}

TEST(EchoResponderTest, GlobalRateLimit) {
  ResponderOptions o;
  o.global_rate = 0;
  o.global_burst = 3;
  auto r = StartResponder(o);
  ASSERT_TRUE(r);
  Fd a = testing::UdpSocket(), b = testing::UdpSocket();
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(SendTo(a.get(), r->port(), Request(0, nullptr, i)));
    ASSERT_TRUE(SendTo(b.get(), r->port(), Request(0, nullptr, i)));
  }
  int replies = 0;
  while (RecvWithin(a.get(), 100ms)) ++replies;
  while (RecvWithin(b.get(), 100ms)) ++replies;
  EXPECT_EQ(replies, 3);
  EXPECT_EQ(Dropped(*r, ResponderDrop::kRateLimitedGlobal), 5u);
}

TEST(EchoResponderTest, AnswersOnlyAllowedPeersWhenAListIsSet) {
  auto r = StartResponder();
  ASSERT_TRUE(r);
  Fd c = testing::UdpSocket();
  ASSERT_TRUE(r->SetAllowedPeers({"198.18.0.9"}).ok());
  // The list takes effect within one loop turn (at most the 200 ms epoll timeout).
  std::this_thread::sleep_for(300ms);
  ASSERT_TRUE(SendTo(c.get(), r->port(), Request(0, nullptr)));
  EXPECT_FALSE(RecvWithin(c.get(), 200ms));
  EXPECT_EQ(Dropped(*r, ResponderDrop::kNotInPlan), 1u);
  ASSERT_TRUE(r->SetAllowedPeers({"127.0.0.1"}).ok());
  std::this_thread::sleep_for(300ms);
  ASSERT_TRUE(SendTo(c.get(), r->port(), Request(0, nullptr)));
  EXPECT_TRUE(RecvWithin(c.get(), 2000ms));
  EXPECT_EQ(r->SetAllowedPeers({"peer-7"}).code(), StatusCode::kInvalidArgument);
}

TEST(EchoResponderTest, TcpEchoAndBulkAckOnTheSamePort) {
  auto r = StartResponder();
  ASSERT_TRUE(r);
  Fd c = testing::TcpConnect(r->port());
  ASSERT_TRUE(c.valid());
  std::vector<uint8_t> echo = Request(300, nullptr, 11);
  ASSERT_TRUE(SendAll(c.get(), echo.data(), echo.size()));
  std::vector<uint8_t> reply = RecvExactly(c.get(), echo.size(), 2000ms);
  ASSERT_EQ(reply.size(), echo.size());
  ProbeHeader h;
  ASSERT_EQ(ParseHeader(reply, nullptr, &h), DropReason::kNone);
  EXPECT_EQ(h.type, PacketType::kEchoReply);
  EXPECT_EQ(h.seq, 11u);

  // Bulk on the same connection: 1 MiB in, one 32-byte ack out.
  std::vector<uint8_t> ack = SendBulk(c.get(), 12);
  ASSERT_EQ(ack.size(), kHeaderSize);
  ASSERT_EQ(ParseHeader(ack, nullptr, &h), DropReason::kNone);
  EXPECT_EQ(h.type, PacketType::kBulkAck);
  EXPECT_EQ(h.seq, 12u);
  EXPECT_EQ(h.payload_len, 0u);
  EXPECT_FALSE(RecvWithin(c.get(), 50ms)) << "nothing after the ack";
  Eventually([&] { return r->Stats().bytes_out == echo.size() + kHeaderSize; }, 2s);
  ResponderStats s = r->Stats();
  EXPECT_EQ(s.bulk_acks, 1u);
  EXPECT_EQ(s.tcp_echo_replies, 1u);
  EXPECT_EQ(s.bytes_out, echo.size() + kHeaderSize);
}

TEST(EchoResponderTest, TcpGarbageClosesTheConnectionAndIsCounted) {
  auto r = StartResponder();
  ASSERT_TRUE(r);
  Fd c = testing::TcpConnect(r->port());
  ASSERT_TRUE(c.valid());
  std::vector<uint8_t> junk(64, 'x');
  ASSERT_TRUE(SendAll(c.get(), junk.data(), junk.size()));
  EXPECT_TRUE(ClosedWithin(c.get(), 2000ms));
  EXPECT_EQ(Dropped(*r, ResponderDrop::kBadMagic), 1u);
}

TEST(EchoResponderTest, TcpConnectionLimitAndIdleTimeout) {
  ResponderOptions o;
  o.max_tcp_connections = 2;
  o.tcp_idle_timeout_ns = 300'000'000;
  auto r = StartResponder(o);
  ASSERT_TRUE(r);
  Fd a = testing::TcpConnect(r->port()), b = testing::TcpConnect(r->port());
  ASSERT_TRUE(Eventually([&] { return r->Stats().tcp_accepted == 2; }, 2s));
  Fd c = testing::TcpConnect(r->port());
  EXPECT_TRUE(ClosedWithin(c.get(), 2000ms));
  EXPECT_EQ(Dropped(*r, ResponderDrop::kTcpConnectionLimit), 1u);
  // Half a header, then silence: the idle sweep closes it.
  std::vector<uint8_t> half = Request(0, nullptr);
  half.resize(10);
  ASSERT_TRUE(SendAll(a.get(), half.data(), half.size()));
  EXPECT_TRUE(ClosedWithin(a.get(), 3000ms));
  EXPECT_GE(Dropped(*r, ResponderDrop::kTcpIdleTimeout), 1u);
}

TEST(EchoResponderTest, StopIsIdempotentAndReleasesThePort) {
  auto r = StartResponder();
  ASSERT_TRUE(r);
  uint16_t port = r->port();
  r->Stop();
  r->Stop();
  Fd c = testing::TcpConnect(port);
  EXPECT_FALSE(c.valid()) << "nothing listens after Stop";
}

TEST(EchoResponderTest, RejectsBadOptions) {
  ResponderOptions o;
  o.listen_address = "not-an-ip";
  EXPECT_EQ(EchoResponder::Start(o, RealClock::Get()).status().code(),
            StatusCode::kInvalidArgument);
  o = {};
  o.port = 0;
  o.per_source_rate = -1;
  EXPECT_EQ(EchoResponder::Start(o, RealClock::Get()).status().code(),
            StatusCode::kInvalidArgument);
}

// Path tracing learns which flows to follow back from the responder: each answered IPv4 flow once
// per take, nothing while tracking is off, and new flows past the limit counted, not kept.
TEST(EchoResponderTest, RemembersTheUdpFlowsItAnsweredWhenAsked) {
  auto r = StartResponder();
  ASSERT_TRUE(r);
  Fd a = testing::UdpSocket(), b = testing::UdpSocket();
  auto port_of = [](const Fd& fd) {
    sockaddr_in sa{};
    socklen_t len = sizeof sa;
    EXPECT_EQ(getsockname(fd.get(), reinterpret_cast<sockaddr*>(&sa), &len), 0);
    return ntohs(sa.sin_port);
  };
  auto echo = [&](const Fd& fd) {
    ASSERT_TRUE(SendTo(fd.get(), r->port(), Request(16, nullptr)));
    ASSERT_TRUE(RecvWithin(fd.get(), 2000ms));
  };
  echo(a);
  EXPECT_TRUE(r->TakeAnsweredUdpFlows().empty());  // off by default
  r->TrackAnsweredUdpFlows(8);
  echo(a);
  echo(a);
  echo(b);
  std::vector<AnsweredUdpFlow> got = r->TakeAnsweredUdpFlows();
  ASSERT_EQ(got.size(), 2u);
  for (const AnsweredUdpFlow& f : got) EXPECT_EQ(f.address, 0x7f000001u);
  EXPECT_NE(std::find(got.begin(), got.end(), AnsweredUdpFlow{0x7f000001u, port_of(a)}), got.end());
  EXPECT_NE(std::find(got.begin(), got.end(), AnsweredUdpFlow{0x7f000001u, port_of(b)}), got.end());
  EXPECT_TRUE(r->TakeAnsweredUdpFlows().empty());  // taken
  r->TrackAnsweredUdpFlows(1);
  echo(a);
  echo(b);
  uint64_t not_kept = 0;
  EXPECT_EQ(r->TakeAnsweredUdpFlows(&not_kept).size(), 1u);
  EXPECT_EQ(not_kept, 1u);
}

// As a guest of a prober's loop the responder keeps no thread of its own and does what it does on
// one: it answers UDP (the host prober's own probes among them) and TCP echoes and bulk, keeps the
// connection limit, sweeps idle connections, and releases its port on Stop while the host runs on.
TEST(EchoResponderTest, OnAProbersThreadAnswersEverythingAndSweepsIdleConnections) {
  ResultQueue q(4096);
  auto prober = UdpProber::Start({}, RealClock::Get(), q);
  ASSERT_TRUE(prober.ok()) << prober.status().ToString();
  const int own_threads = ThreadsNamed("fw-responder");
  ResponderOptions o;
  o.listen_address = "127.0.0.1";
  o.port = 0;
  o.max_tcp_connections = 2;
  o.tcp_idle_timeout_ns = 300'000'000;
  auto started = EchoResponder::Start(o, RealClock::Get(), prober->get());
  ASSERT_TRUE(started.ok()) << started.status().ToString();
  EchoResponder& r = **started;
  EXPECT_EQ(ThreadsNamed("fw-responder"), own_threads);

  // The host probes its own guest: both ends on one thread.
  UdpProbePlan plan;
  plan.peers.push_back({"self", "127.0.0.1", r.port(), 2});
  plan.rate_hz = 50;
  ASSERT_TRUE((*prober)->SetPlan(plan).ok());
  std::vector<ProbeResult> results;
  ASSERT_TRUE(Eventually(
      [&] {
        q.PopBatch(results, 1 << 20);
        return results.size() >= 20;
      },
      5s));
  for (const ProbeResult& p : results) {
    EXPECT_FALSE(p.lost);
    EXPECT_GT(p.rtt_ns, 0);
  }

  Fd u = testing::UdpSocket();
  std::vector<uint8_t> req = Request(64, nullptr, 5);
  ASSERT_TRUE(SendTo(u.get(), r.port(), req));
  auto reply = RecvWithin(u.get(), 2000ms);
  ASSERT_TRUE(reply);
  EXPECT_EQ(reply->size(), req.size());

  Fd c = testing::TcpConnect(r.port());
  ASSERT_TRUE(c.valid());
  std::vector<uint8_t> echo = Request(300, nullptr, 11);
  ASSERT_TRUE(SendAll(c.get(), echo.data(), echo.size()));
  EXPECT_EQ(RecvExactly(c.get(), echo.size(), 2000ms).size(), echo.size());
  std::vector<uint8_t> ack = SendBulk(c.get(), 12);
  ProbeHeader h;
  ASSERT_EQ(ParseHeader(ack, nullptr, &h), DropReason::kNone);
  EXPECT_EQ(h.type, PacketType::kBulkAck);

  Fd b = testing::TcpConnect(r.port());
  ASSERT_TRUE(Eventually([&] { return r.Stats().tcp_accepted == 2; }, 2s));
  Fd over = testing::TcpConnect(r.port());
  EXPECT_TRUE(ClosedWithin(over.get(), 2000ms));
  EXPECT_EQ(Dropped(r, ResponderDrop::kTcpConnectionLimit), 1u);
  // Silence on both: the sweep, which only a deadline of the guest drives, closes them.
  EXPECT_TRUE(ClosedWithin(b.get(), 3000ms));
  EXPECT_TRUE(ClosedWithin(c.get(), 3000ms));
  EXPECT_GE(Dropped(r, ResponderDrop::kTcpIdleTimeout), 2u);

  const uint16_t port = r.port();
  r.Stop();
  r.Stop();
  EXPECT_FALSE(testing::TcpConnect(port).valid()) << "nothing listens after Stop";
  const uint64_t sent = (*prober)->Stats().sent;
  EXPECT_TRUE(Eventually([&] { return (*prober)->Stats().sent > sent + 4; }, 2s))
      << "the host probes on";
}

}  // namespace
}  // namespace fw::net
