// rdma-selftest between two hosts, on fake devices joined by the fake fabric's loopback link:
// the control messages, a full run (server and client on two threads, as on two hosts), and the
// failures an operator meets (peer gone, not a selftest peer, silent peer, nobody connecting).
#include "probes/rdma/rdma_selftest.h"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <future>
#include <sstream>
#include <thread>

#include "probes/net/socket_util.h"
#include "probes/rdma/fake_verbs.h"
#include "probes/rdma/selftest_wire.h"

namespace fw::rdma {
namespace {

SelftestMsg Hello() {
  SelftestMsg m;
  m.type = SelftestMsgType::kHello;
  m.ud.device = "mlx5_0";
  m.ud.port = 1;
  m.ud.link_layer = LinkLayer::kInfiniBand;
  m.ud.lid = 7;
  m.ud.gid.raw[0] = 0xfe;
  m.ud.gid.raw[1] = 0x80;
  m.ud.gid.raw[15] = 7;
  m.ud.qpn = 0x123456;
  m.rc = {"mlx5_0",   1,       LinkLayer::kInfiniBand, 7, m.ud.gid, 0, 0x42, 0xabcdef, 99,
          1ull << 40, 1u << 20};
  m.ud_ms = 3000;
  m.rc_bursts = 5;
  return m;
}

std::string Line(const SelftestMsg& m) {
  std::string s = EncodeSelftestMsg(m);
  s.pop_back();
  return s;
}

TEST(SelftestWire, MessagesRoundTrip) {
  auto h = ParseSelftestMsg(Line(Hello()));
  ASSERT_TRUE(h.ok()) << h.status().message();
  EXPECT_EQ(h->type, SelftestMsgType::kHello);
  EXPECT_EQ(h->ud.qpn, 0x123456u);
  EXPECT_EQ(h->ud.qkey, kProbeQkey);
  EXPECT_EQ(h->ud.gid, Hello().ud.gid);
  EXPECT_EQ(h->rc.qpn, 0x42u);
  EXPECT_EQ(h->rc.psn, 0xabcdefu);
  EXPECT_EQ(h->rc.addr, 1ull << 40);
  EXPECT_EQ(h->rc.lid, 7);
  EXPECT_EQ(h->ud_ms, 3000);
  EXPECT_EQ(EncodeSelftestMsg(*h), EncodeSelftestMsg(Hello()));

  SelftestMsg d;
  d.type = SelftestMsgType::kDone;
  d.figures.sent = 100;
  d.figures.answered = 99;
  d.figures.lost = 1;
  d.figures.source = TsSource::kNicRaw;
  d.figures.net_p50_ns = 4000;
  d.figures.rc_bursts_asked = 3;
  d.figures.rc_bursts_ok = 2;
  d.figures.rc_failed = true;
  d.figures.rc_mbps_median = 97'500;
  auto back = ParseSelftestMsg(Line(d));
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(EncodeSelftestMsg(*back), EncodeSelftestMsg(d));
  EXPECT_EQ(back->figures.net_p99_ns, -1);
  EXPECT_TRUE(back->figures.rc_failed);

  SelftestMsg bye;
  EXPECT_TRUE(ParseSelftestMsg("fwst1 bye").ok());
  EXPECT_TRUE(ParseSelftestMsg("fwst1 bye\r").ok());
}

TEST(SelftestWire, RefusesWhatIsNotWellFormed) {
  const std::string good = Line(Hello());
  auto replace = [&](const std::string& from, const std::string& to) {
    std::string s = good;
    s.replace(s.find(from), from.size(), to);
    return s;
  };
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"", "no fwst1"},
      {"GET / HTTP/1.1", "no fwst1"},
      {"fwst1", "no fwst1"},
      {"fwst1 hi", "unknown message"},
      {"fwst1 bye x=1", "bye with fields"},
      {good + " lid=3", "twice"},
      {good + " color=red", "unknown field"},
      {good + " ", "trailing space"},
      {replace(" rkey=", "  rkey="), "empty field"},
      {replace(" rc_bursts=5", ""), "rc_bursts missing"},
      {replace("ud_qpn=1193046", "ud_qpn=16777216"), "ud_qpn out of range"},
      {replace("ud_qpn=1193046", "ud_qpn=0"), "ud_qpn out of range"},
      {replace("ud_qpn=1193046", "ud_qpn=-1"), "ud_qpn out of range"},
      {replace("ud_qpn=1193046", "ud_qpn=12x"), "ud_qpn out of range"},
      {replace("rkey=99", "rkey=0"), "rkey out of range"},
      {replace("rc_psn=11259375", "rc_psn=16777216"), "rc_psn out of range"},
      {replace("length=1048576", "length=0"), "length out of range"},
      {replace("link=ib", "link=eth"), "not ib or roce"},
      {replace("ud_device=mlx5_0", "ud_device=mlx5/0"), "not a device name"},
      {replace("gid=fe80", "gid=zz80"), "not a GID"},
      {good + std::string(1100, 'x'), "longer than 1024"},
      {"fwst1 done sent=1", "missing"},
  };
  for (const auto& [line, why] : bad) {
    auto m = ParseSelftestMsg(line);
    ASSERT_FALSE(m.ok()) << line;
    EXPECT_NE(m.status().message().find(why), std::string::npos)
        << line.substr(0, 80) << " -> " << m.status().message();
  }
  // InfiniBand needs a LID or a GID, RoCE a GID.
  SelftestMsg ib = Hello();
  ib.ud.lid = 0;
  ib.ud.gid = Gid();
  EXPECT_FALSE(ParseSelftestMsg(Line(ib)).ok());
  SelftestMsg roce = Hello();
  roce.ud.link_layer = LinkLayer::kEthernet;
  roce.ud.gid = Gid();
  EXPECT_FALSE(ParseSelftestMsg(Line(roce)).ok());
}

// A fake fabric with one IB device mlx5_0 (LID `lid`) on the loopback link at `base`.
std::unique_ptr<FakeFabric> LinkedFabric(uint16_t base, uint16_t lid) {
  auto f = std::make_unique<FakeFabric>(RealClock::Get(), lid);
  FakeDeviceConfig d;
  d.name = "mlx5_0";
  FakePortConfig p;
  p.lid = lid;
  p.rate_gbps = 2;  // the loopback UDP hop of each write's ack hides behind 262 us per 64 KiB
  d.ports = {p};
  f->AddDevice(d);
  if (!f->EnableLoopbackLink(base).ok()) return nullptr;
  return f;
}

uint16_t TestBase() { return static_cast<uint16_t>(52000 + (::getpid() % 1300) * 10); }

SelftestOptions Quick() {
  SelftestOptions o;
  o.seconds = 0.3;
  o.rate_hz = 200;
  o.flows = 2;
  o.rc_bursts = 2;
  o.rc_burst_bytes = 4 << 20;
  o.timeout_s = 5;
  return o;
}

// The server on its own thread; `port` is ready once it listens.
struct Server {
  std::promise<uint16_t> listening;
  std::ostringstream out;
  std::future<int> rc;

  Server(Verbs& verbs, SelftestOptions o) {
    o.server = true;
    o.tcp_port = 0;
    o.on_listening = [this](uint16_t p) { listening.set_value(p); };
    rc = std::async(std::launch::async,
                    [&verbs, o, this] { return RunSelftest(verbs, RealClock::Get(), o, out); });
  }
  uint16_t port() { return listening.get_future().get(); }
};

TEST(SelftestPeer, ClientAndServerMeasureLatencyAndBandwidth) {
  auto a = LinkedFabric(TestBase(), 1);
  auto b = LinkedFabric(TestBase(), 2);
  ASSERT_TRUE(a && b) << "loopback link ports busy";
  auto va = a->MakeVerbs({"mlx5_0"});
  auto vb = b->MakeVerbs({"mlx5_0"});
  Server server(*vb, Quick());
  SelftestOptions o = Quick();
  o.peer = "127.0.0.1";
  o.tcp_port = server.port();
  std::ostringstream out;
  const int rc = RunSelftest(*va, RealClock::Get(), o, out);
  const int server_rc = server.rc.get();
  const std::string text = out.str();
  EXPECT_EQ(rc, 0) << text;
  EXPECT_EQ(server_rc, 0) << server.out.str();
  EXPECT_NE(text.find("peer 127.0.0.1 device mlx5_0 port 1 lid 2"), std::string::npos) << text;
  EXPECT_NE(text.find(" lost 0 invalid 0 timestamps nic_wallclock"), std::string::npos) << text;
  // 2 x the fakes' 2 us one way: the split takes the UDP hop out (its arrival time is stamped).
  EXPECT_NE(text.find("network_rtt_us p50 4.00"), std::string::npos) << text;
  EXPECT_NE(text.find("2 bursts of 4194304 B: Gb/s median "), std::string::npos) << text;
  EXPECT_EQ(text.find("Gb/s median nan"), std::string::npos) << text;
  // The server prints the client's figures and what it answered.
  const std::string s = server.out.str();
  EXPECT_NE(s.find("server: answered "), std::string::npos) << s;
  EXPECT_NE(s.find("network_rtt_us p50 4.00"), std::string::npos) << s;
  EXPECT_GT(b->stats().link_received, 50u);
}

TEST(SelftestPeer, JsonReport) {
  auto a = LinkedFabric(TestBase(), 1);
  auto b = LinkedFabric(TestBase(), 2);
  ASSERT_TRUE(a && b) << "loopback link ports busy";
  auto va = a->MakeVerbs({"mlx5_0"});
  auto vb = b->MakeVerbs({"mlx5_0"});
  SelftestOptions so = Quick();
  so.rc_bursts = 0;
  Server server(*vb, so);
  SelftestOptions o = so;
  o.peer = "localhost";
  o.tcp_port = server.port();
  o.json = true;
  std::ostringstream out;
  EXPECT_EQ(RunSelftest(*va, RealClock::Get(), o, out), 0) << out.str();
  EXPECT_EQ(server.rc.get(), 0) << server.out.str();
  const std::string j = out.str();
  EXPECT_EQ(j.rfind("{\"mode\":\"client\"", 0), 0u) << j;
  EXPECT_NE(j.find("\"network_rtt_us_p50\":4.00"), std::string::npos) << j;
  EXPECT_NE(j.find("\"peer\":{\"host\":\"localhost\""), std::string::npos) << j;
  EXPECT_NE(j.find("\"gbps_median\":null"), std::string::npos) << j;
  EXPECT_NE(j.find("\"exit\":0}"), std::string::npos) << j;
}

// A stand-in peer on loopback TCP that does `act` with the accepted connection.
class FakePeer {
 public:
  explicit FakePeer(std::function<void(int)> act) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    auto a = net::ParseAddress("127.0.0.1", 0);
    ::bind(fd_, a->get(), a->len);
    ::listen(fd_, 1);
    port_ = net::LocalAddress(fd_)->port();
    thread_ = std::thread([this, act] {
      const int c = ::accept(fd_, nullptr, nullptr);
      if (c >= 0) {
        act(c);
        ::close(c);
      }
    });
  }
  ~FakePeer() {
    thread_.join();
    ::close(fd_);
  }
  uint16_t port() const { return port_; }

 private:
  int fd_ = -1;
  uint16_t port_ = 0;
  std::thread thread_;
};

// Reads one line (the client's hello).
std::string ReadLine(int fd) {
  std::string s;
  char c;
  while (::recv(fd, &c, 1, 0) == 1 && c != '\n') s += c;
  return s;
}

struct ClientRun {
  int rc = -1;
  std::string out;
};

ClientRun RunClient(uint16_t port, double timeout_s = 5) {
  auto f = LinkedFabric(TestBase(), 1);
  ClientRun r;
  if (!f) return r;
  auto v = f->MakeVerbs({"mlx5_0"});
  SelftestOptions o = Quick();
  o.peer = "127.0.0.1";
  o.tcp_port = port;
  o.timeout_s = timeout_s;
  std::ostringstream out;
  r.rc = RunSelftest(*v, RealClock::Get(), o, out);
  r.out = out.str();
  return r;
}

TEST(SelftestPeer, PeerGoneBeforeTheExchangeIsExit3) {
  FakePeer p([](int fd) { ReadLine(fd); });
  ClientRun r = RunClient(p.port());
  EXPECT_EQ(r.rc, 3);
  EXPECT_NE(r.out.find("waiting for the peer's connection data: the peer closed the connection"),
            std::string::npos)
      << r.out;
}

TEST(SelftestPeer, NotASelftestPeerIsExit3) {
  FakePeer p([](int fd) {
    ReadLine(fd);
    const char kBad[] = "SSH-2.0-OpenSSH_9.6\n";
    ::send(fd, kBad, sizeof(kBad) - 1, MSG_NOSIGNAL);
    ReadLine(fd);
  });
  ClientRun r = RunClient(p.port());
  EXPECT_EQ(r.rc, 3);
  EXPECT_NE(r.out.find("not an rdma-selftest peer"), std::string::npos) << r.out;
}

TEST(SelftestPeer, BadConnectionDataIsExit3) {
  FakePeer p([](int fd) {
    ReadLine(fd);
    SelftestMsg h = Hello();
    h.ud.link_layer = LinkLayer::kEthernet;  // our fake port is InfiniBand
    const std::string line = EncodeSelftestMsg(h);
    ::send(fd, line.data(), line.size(), MSG_NOSIGNAL);
    ReadLine(fd);
  });
  ClientRun r = RunClient(p.port());
  EXPECT_EQ(r.rc, 3);
  EXPECT_NE(r.out.find("the peer's port is Ethernet, ours is InfiniBand"), std::string::npos)
      << r.out;
}

TEST(SelftestPeer, SilentPeerTimesOutWithExit3) {
  FakePeer p([](int fd) {
    ReadLine(fd);
    ::usleep(800'000);
  });
  ClientRun r = RunClient(p.port(), 0.4);
  EXPECT_EQ(r.rc, 3);
  EXPECT_NE(r.out.find("no connection data from the peer within 0.4 s"), std::string::npos)
      << r.out;
}

TEST(SelftestPeer, PeerGoneDuringTheRunIsExit2) {
  FakePeer p([](int fd) {
    ReadLine(fd);
    const std::string line = EncodeSelftestMsg(Hello());  // LID 7: nobody answers
    ::send(fd, line.data(), line.size(), MSG_NOSIGNAL);
    ::usleep(100'000);
  });
  ClientRun r = RunClient(p.port());
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.out.find("during the latency run: the peer closed the connection"), std::string::npos)
      << r.out;
}

TEST(SelftestPeer, NobodyListeningIsExit3) {
  // A port that was just free: connection refused until the timeout.
  uint16_t port = 0;
  {
    FakePeer p([](int) {});
    port = p.port();
    const int c = ::socket(AF_INET, SOCK_STREAM, 0);
    auto a = net::ParseAddress("127.0.0.1", port);
    ::connect(c, a->get(), a->len);
    ::close(c);
  }
  ClientRun r = RunClient(port, 0.3);
  EXPECT_EQ(r.rc, 3);
  EXPECT_NE(r.out.find("Connection refused"), std::string::npos) << r.out;
}

TEST(SelftestPeer, ServerRefusesAClientThatIsNoSelftestAndOneThatNeverComes) {
  auto b = LinkedFabric(TestBase(), 2);
  ASSERT_TRUE(b);
  auto vb = b->MakeVerbs({"mlx5_0"});
  {
    Server server(*vb, Quick());
    const int c = ::socket(AF_INET, SOCK_STREAM, 0);
    auto a = net::ParseAddress("127.0.0.1", server.port());
    ASSERT_EQ(::connect(c, a->get(), a->len), 0);
    const char kGet[] = "GET / HTTP/1.0\n";
    ::send(c, kGet, sizeof(kGet) - 1, MSG_NOSIGNAL);
    EXPECT_EQ(server.rc.get(), 3);
    ::close(c);
    EXPECT_NE(server.out.str().find("server: waiting for the peer's connection data: "
                                    "rdma-selftest control message: not an rdma-selftest peer"),
              std::string::npos)
        << server.out.str();
  }
  SelftestOptions o = Quick();
  o.timeout_s = 0.3;
  Server idle(*vb, o);
  idle.port();
  EXPECT_EQ(idle.rc.get(), 3);
  EXPECT_NE(idle.out.str().find("no peer connected within 0.3 s"), std::string::npos)
      << idle.out.str();
}

TEST(SelftestPeer, NoRdmaSaysSoBeforeTheNetwork) {
  auto v = FakeFabric::MakeNoRdmaStack();
  SelftestOptions o = Quick();
  o.peer = "127.0.0.1";
  o.tcp_port = 1;
  std::ostringstream out;
  EXPECT_EQ(RunSelftest(*v, RealClock::Get(), o, out), 3);
  EXPECT_EQ(out.str().rfind("rdma: unavailable", 0), 0u) << out.str();
}

}  // namespace
}  // namespace fw::rdma
