// fw_rdmaprobe cpu: the agent RDMA thread's CPU at a UD probe rate, against the in-memory fake.
#include "probes/rdma/rdma_cpu_bench.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "probes/rdma/fake_link.h"
#include "probes/rdma/fake_verbs.h"
#include "probes/rdma/rdma_runner.h"

namespace fw::rdma {
namespace {

// utime and stime of a thread of this process, in ns (clock ticks from /proc).
std::pair<int64_t, int64_t> ThreadUserSys(int tid) {
  std::ifstream f("/proc/self/task/" + std::to_string(tid) + "/stat");
  std::string line;
  std::getline(f, line);
  const size_t close = line.rfind(')');
  if (close == std::string::npos) return {-1, -1};
  std::istringstream rest(line.substr(close + 2));
  std::string field;
  int64_t utime = -1, stime = -1;
  for (int i = 3; rest >> field; ++i) {  // field 3 is the state
    if (i == 14) utime = std::stoll(field);
    if (i == 15) {
      stime = std::stoll(field);
      break;
    }
  }
  const int64_t tick_ns = 1'000'000'000 / ::sysconf(_SC_CLK_TCK);
  return {utime * tick_ns, stime * tick_ns};
}

std::string Fmt(const char* f, double v) {
  char b[64];
  std::snprintf(b, sizeof(b), f, v);
  return b;
}

void Sleep(double s) { std::this_thread::sleep_for(std::chrono::duration<double>(s)); }

int64_t ThisThreadCpuNs() {
  timespec ts{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

// The thread CPU one timerfd_settime costs here, now (the fake's stand-in for a NIC interrupt),
// averaged over `n` calls that each move an armed timer.
double TimerSetNs(int n) {
  const int fd = ::timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
  if (fd < 0) return -1;
  itimerspec t{};
  const int64_t t0 = ThisThreadCpuNs();
  for (int i = 0; i < n; ++i) {
    t.it_value.tv_sec = 3600 + (i & 1);  // an hour ahead: never fires
    (void)::timerfd_settime(fd, 0, &t, nullptr);
  }
  const int64_t t1 = ThisThreadCpuNs();
  ::close(fd);
  return static_cast<double>(t1 - t0) / n;
}

// The thread CPU of taking a mutex that another thread holds (the futex wait, the switch away
// and back), averaged over `n` waits; the CPU-clock reads around each wait are taken out.
double LockWaitNs(int n) {
  std::mutex m;
  std::atomic<int> phase{0};
  std::thread holder([&] {
    for (int i = 0; i < n; ++i) {
      m.lock();
      phase.store(2 * i + 1);
      std::this_thread::sleep_for(std::chrono::microseconds(200));
      m.unlock();
      while (phase.load() != 2 * i + 2) std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  });
  int64_t waited = 0, clocks = 0;
  for (int i = 0; i < n; ++i) {
    while (phase.load() != 2 * i + 1) std::this_thread::sleep_for(std::chrono::microseconds(50));
    const int64_t c0 = ThisThreadCpuNs();
    const int64_t c1 = ThisThreadCpuNs();
    if (!m.try_lock()) m.lock();
    const int64_t c2 = ThisThreadCpuNs();
    m.unlock();
    phase.store(2 * i + 2);
    clocks += c1 - c0;
    waited += c2 - c1;
  }
  holder.join();
  return static_cast<double>(waited - clocks) / n;
}

// The CPU of a bare thread that only wakes `rate` times a second from a ppoll on an eventfd
// (what each RDMA thread wakeup costs before any work), over `seconds`, as % of a core.
double BareWakeupsPct(double rate, double seconds) {
  const int efd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (efd < 0 || rate <= 0) return -1;
  double pct = -1;
  std::thread t([&] {
    const int64_t c0 = ThisThreadCpuNs();
    const auto start = std::chrono::steady_clock::now();
    const long period_ns = static_cast<long>(1e9 / rate);
    for (int i = 0; i < static_cast<int>(rate * seconds); ++i) {
      pollfd p{efd, POLLIN, 0};
      const timespec ts{period_ns / 1'000'000'000, period_ns % 1'000'000'000};
      (void)::ppoll(&p, 1, &ts, nullptr);
    }
    const double wall =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    pct = 100.0 * static_cast<double>(ThisThreadCpuNs() - c0) * 1e-9 / std::max(wall, 1e-9);
  });
  t.join();
  ::close(efd);
  return pct;
}

}  // namespace

int RunLinkCostBench(std::ostream& out) {
  // Two loopback UDP sockets, as the link's: one sends to the other, which takes them.
  const int tx = ::socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  const int rx = ::socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(to);
  if (tx < 0 || rx < 0 || ::bind(rx, reinterpret_cast<const sockaddr*>(&to), sizeof(to)) != 0 ||
      ::getsockname(rx, reinterpret_cast<sockaddr*>(&to), &len) != 0) {
    out << "linkcost: cannot set up loopback sockets\n";
    if (tx >= 0) ::close(tx);
    if (rx >= 0) ::close(rx);
    return 3;
  }
  // A UD datagram of the link: its header, the 64-byte message (the GRH is not carried).
  std::vector<uint8_t> dgram(kLinkHeaderBytes + 64, 0x5a);
  uint8_t buf[kLinkHeaderBytes + kLinkMaxPayload + 1];
  constexpr int kBatch = 32, kRounds = 300;
  int64_t send_ns = 0, recv_ns = 0, empty_ns = 0;
  int sent = 0, got = 0;
  for (int r = 0; r < kRounds; ++r) {
    int64_t c0 = ThisThreadCpuNs();
    for (int i = 0; i < kBatch; ++i) {
      sent += ::sendto(tx, dgram.data(), dgram.size(), MSG_DONTWAIT,
                       reinterpret_cast<const sockaddr*>(&to), sizeof(to)) > 0;
    }
    int64_t c1 = ThisThreadCpuNs();
    for (int i = 0; i < kBatch; ++i) got += ::recv(rx, buf, sizeof(buf), MSG_DONTWAIT) > 0;
    int64_t c2 = ThisThreadCpuNs();
    for (int i = 0; i < kBatch; ++i) (void)::recv(rx, buf, sizeof(buf), MSG_DONTWAIT);
    int64_t c3 = ThisThreadCpuNs();
    send_ns += c1 - c0;
    recv_ns += c2 - c1;
    empty_ns += c3 - c2;
  }
  // The same sendto when the receiving socket's thread sleeps in ppoll on it (a peer agent's
  // RDMA thread between wakeups): loopback delivers on the sender's thread, which then also
  // wakes the reader. One send per 300 us, so the reader is asleep again each time.
  std::atomic<bool> stop{false};
  std::thread reader([&] {
    uint8_t b[kLinkHeaderBytes + kLinkMaxPayload + 1];
    while (!stop.load()) {
      pollfd p{rx, POLLIN, 0};
      const timespec ts{0, 50'000'000};
      if (::ppoll(&p, 1, &ts, nullptr) > 0) {
        while (::recv(rx, b, sizeof(b), MSG_DONTWAIT) > 0) {
        }
      }
    }
  });
  constexpr int kWaking = 2000;
  int64_t waking_ns = 0, clock_ns = 0;
  for (int i = 0; i < kWaking; ++i) {
    std::this_thread::sleep_for(std::chrono::microseconds(300));
    const int64_t c0 = ThisThreadCpuNs();
    const int64_t c1 = ThisThreadCpuNs();
    (void)::sendto(tx, dgram.data(), dgram.size(), MSG_DONTWAIT,
                   reinterpret_cast<const sockaddr*>(&to), sizeof(to));
    const int64_t c2 = ThisThreadCpuNs();
    clock_ns += c1 - c0;
    waking_ns += c2 - c1;
  }
  stop.store(true);
  reader.join();
  ::close(tx);
  ::close(rx);
  const double n = static_cast<double>(kBatch) * kRounds;
  out << "linkcost: sendto_waking_ns=" << Fmt("%.0f", static_cast<double>(waking_ns - clock_ns) / kWaking)
      << " ";
  out << "sendto_ns=" << Fmt("%.0f", static_cast<double>(send_ns) / n)
      << " recv_ns=" << Fmt("%.0f", static_cast<double>(recv_ns) / n)
      << " recv_empty_ns=" << Fmt("%.0f", static_cast<double>(empty_ns) / n)
      << " timer_set_ns=" << Fmt("%.0f", TimerSetNs(20'000)) << " sent=" << sent
      << " received=" << got << "\n";
  return sent == got ? 0 : 2;
}

int RunCpuBench(const CpuBenchOptions& o, std::ostream& out) {
  const Clock& clock = RealClock::Get();
  FakeFabric fabric(clock);
  fabric.EnableCompletionChannels();
  auto add = [&fabric](const std::string& name, uint16_t lid) {
    FakeDeviceConfig d;
    d.name = name;
    FakePortConfig p;
    p.lid = lid;
    d.ports = {p};
    fabric.AddDevice(d);
  };
  add("agent", 1);
  for (int i = 0; i < o.targets; ++i) add("peer" + std::to_string(i), static_cast<uint16_t>(2 + i));
  std::atomic<uint64_t> results{0};
  RdmaRunnerOptions ro;
  ro.mesh.send_window_ns = static_cast<int64_t>(o.send_window_ms * 1e6);
  auto agent = std::make_unique<RdmaRunner>(
      fabric.MakeVerbs({"agent"}), clock, ro,
      [&results](std::vector<RdmaProbeResult>&& b) { results += b.size(); });
  std::vector<std::unique_ptr<RdmaRunner>> peers;
  for (int i = 0; i < o.targets; ++i) {
    peers.push_back(std::make_unique<RdmaRunner>(fabric.MakeVerbs({"peer" + std::to_string(i)}),
                                                 clock, ro, [](auto&&) {}));
  }
  Status st = agent->Start();
  for (auto& p : peers) {
    if (st.ok()) st = p->Start();
  }
  if (!st.ok()) {
    out << "cpu: cannot start the fake runners: " << st.message() << "\n";
    return 3;
  }
  std::vector<UdTarget> targets;
  const UdEndpoint me = agent->state().endpoints.front();
  for (int i = 0; i < o.targets; ++i) {
    UdTarget t;
    t.peer = "peer" + std::to_string(i);
    t.remote = peers[i]->state().endpoints.front();
    t.flows = o.flows;
    t.rate_hz = o.rate_hz;
    targets.push_back(t);
    if (o.answer) {
      UdTarget back = t;
      back.peer = "agent";
      back.remote = me;
      peers[i]->SetTargets({back});
    }
  }
  agent->SetTargets(targets);
  for (int i = 0; i < 100 && agent->tid() == 0; ++i) Sleep(0.01);
  out << "cpu: agent thread tid " << agent->tid() << "\n" << std::flush;
  Sleep(o.warmup_s);

  const UdMeshStats& ms = *agent->stats();
  const auto us0 = ThreadUserSys(agent->tid());
  const int64_t cpu0 = agent->thread_cpu_ns();
  const uint64_t w0 = agent->wakeups(), s0 = ms.sent.load(), a0 = ms.responder_answers.load();
  const uint64_t sr0 = ms.send_rounds.load();
  const uint64_t rwa0 = ms.reports_with_ack.load(), rah0 = ms.reports_after_hold.load();
  const uint64_t lost0 = ms.lost.load(), miss0 = ms.reports_missing.load(),
                 late0 = ms.late.load(), inv0 = ms.invalid_split.load();
  const uint64_t r0 = results.load();
  int64_t peers0 = 0;
  for (auto& p : peers) peers0 += p->thread_cpu_ns();
  const FakeHwCost hw0 = fabric.HwCostOfThread(agent->tid());
  const int64_t t0 = clock.MonotonicNanos();
  out << "cpu: window start\n" << std::flush;
  Sleep(o.seconds);
  const int64_t t1 = clock.MonotonicNanos();
  const int64_t cpu1 = agent->thread_cpu_ns();
  const auto us1 = ThreadUserSys(agent->tid());
  const uint64_t w1 = agent->wakeups(), s1 = ms.sent.load(), a1 = ms.responder_answers.load();
  const uint64_t sr1 = ms.send_rounds.load();
  const uint64_t rwa1 = ms.reports_with_ack.load(), rah1 = ms.reports_after_hold.load();
  const uint64_t lost1 = ms.lost.load(), miss1 = ms.reports_missing.load(),
                 late1 = ms.late.load(), inv1 = ms.invalid_split.load();
  const uint64_t r1 = results.load();
  int64_t peers1 = 0;
  for (auto& p : peers) peers1 += p->thread_cpu_ns();
  const FakeHwCost hw1 = fabric.HwCostOfThread(agent->tid());
  out << "cpu: window end\n" << std::flush;
  if (o.linger_s > 0) Sleep(o.linger_s);
  agent->Stop();
  for (auto& p : peers) p->Stop();
  // Unit costs under the same load, after the runners stopped (their threads would compete).
  const double timer_set_ns = TimerSetNs(20'000);
  const double lock_wait_ns = LockWaitNs(300);

  const double span = static_cast<double>(t1 - t0) * 1e-9;
  const double cpu = static_cast<double>(cpu1 - cpu0) * 1e-9;
  const double sent = static_cast<double>(s1 - s0) / span;
  const double answered = static_cast<double>(a1 - a0) / span;
  const double ends = static_cast<double>((s1 - s0) + (a1 - a0));
  out << "cpu: " << Fmt("%.1f", span) << " s, agent thread probes " << Fmt("%.1f", sent)
      << "/s sent to " << o.targets << " targets (" << o.flows << " flows x "
      << Fmt("%.3g", o.rate_hz) << "/s), answers " << Fmt("%.1f", answered) << "/s, results "
      << Fmt("%.1f", static_cast<double>(r1 - r0) / span) << "/s, send windows "
      << Fmt("%.0f", o.send_window_ms) << " ms: "
      << Fmt("%.1f", static_cast<double>(sr1 - sr0) / span) << " send wakeups/s\n";
  out << "cpu: agent's probes: lost " << lost1 - lost0 << ", reports missing " << miss1 - miss0
      << ", late " << late1 - late0 << ", invalid splits " << inv1 - inv0 << "\n";
  out << "cpu: agent's reports to its probers: with an ack "
      << Fmt("%.1f", static_cast<double>(rwa1 - rwa0) / span) << "/s, alone after the hold "
      << Fmt("%.1f", static_cast<double>(rah1 - rah0) / span) << "/s\n";
  out << "cpu: agent RDMA thread " << Fmt("%.3f", 100 * cpu / span) << " % of a core (user "
      << Fmt("%.3f", 100 * static_cast<double>(us1.first - us0.first) * 1e-9 / span)
      << " % + system "
      << Fmt("%.3f", 100 * static_cast<double>(us1.second - us0.second) * 1e-9 / span)
      << " %, /proc ticks), wakeups " << Fmt("%.1f", static_cast<double>(w1 - w0) / span) << "/s, "
      << Fmt("%.0f", ends > 0 ? cpu * 1e9 / ends : 0) << " ns per exchange end\n";
  // The fake's work in place of a NIC on the agent thread, subtracted at the unit costs just
  // measured: what remains is our code plus the verbs calls a NIC's path also makes (the
  // ppoll, the channel read, post and poll), with the fake's in-memory post and poll inside.
  const double sets = static_cast<double>(hw1.timer_sets - hw0.timer_sets);
  const double waits = static_cast<double>(hw1.lock_waits - hw0.lock_waits);
  const double fake_ns = sets * timer_set_ns + waits * lock_wait_ns;
  const double ours_ns = std::max(0.0, cpu * 1e9 - fake_ns);
  out << "cpu: the fake's NIC stand-ins on the agent thread: " << Fmt("%.1f", sets / span)
      << " timer sets/s x " << Fmt("%.0f", timer_set_ns) << " ns + " << Fmt("%.1f", waits / span)
      << " lock waits/s x " << Fmt("%.0f", lock_wait_ns) << " ns = "
      << Fmt("%.3f", 100 * fake_ns * 1e-9 / span) << " % of a core\n";
  out << "cpu: agent RDMA thread without them " << Fmt("%.3f", 100 * ours_ns * 1e-9 / span)
      << " % of a core, " << Fmt("%.0f", ends > 0 ? ours_ns / ends : 0)
      << " ns per exchange end, " << Fmt("%.0f", ends > 0 ? ours_ns / (ends / 2) : 0)
      << " ns per probe (one sent + one answered)\n";
  const double wake_rate = static_cast<double>(w1 - w0) / span;
  out << "cpu: a bare thread waking as often (" << Fmt("%.1f", wake_rate)
      << "/s, ppoll on an eventfd, nothing else) " << Fmt("%.3f", BareWakeupsPct(wake_rate, 5))
      << " % of a core: the floor of the wakeups alone at this load\n";
  out << "cpu: the " << o.targets << " peer threads together "
      << Fmt("%.3f", 100 * static_cast<double>(peers1 - peers0) * 1e-9 / span) << " % of a core\n";
  return 0;
}

}  // namespace fw::rdma
