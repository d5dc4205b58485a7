// Overhead benchmark: one UDP prober probing N peer flows at R Hz for S seconds on loopback against
// a responder in a child process; prints the prober process's CPU % of one core, RSS, and a
// per-thread and per-wakeup breakdown of where the CPU goes.
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>

#include "probes/net/echo_responder.h"
#include "probes/net/udp_prober.h"

namespace {

double Seconds(const timeval& tv) { return static_cast<double>(tv.tv_sec) + tv.tv_usec * 1e-6; }

double ProcessCpu(int who) {
  rusage ru{};
  if (getrusage(who, &ru) != 0) return 0;
  return Seconds(ru.ru_utime) + Seconds(ru.ru_stime);
}

// "VmRSS" / "VmHWM" from /proc/self/status, in MiB.
double StatusMiB(const std::string& field) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(field + ":", 0) == 0) {
      std::istringstream ss(line.substr(field.size() + 1));
      double kb = 0;
      ss >> kb;
      return kb / 1024.0;
    }
  }
  return 0;
}

// CPU seconds per thread name, from /proc/self/task/*/stat (utime + stime, fields 14 and 15).
std::map<std::string, double> ThreadCpu() {
  std::map<std::string, double> out;
  const double tick = static_cast<double>(sysconf(_SC_CLK_TCK));
  for (const auto& task : std::filesystem::directory_iterator("/proc/self/task")) {
    std::ifstream comm_in(task.path() / "comm"), stat_in(task.path() / "stat");
    std::string comm, stat;
    std::getline(comm_in, comm);
    std::getline(stat_in, stat);
    size_t close = stat.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream ss(stat.substr(close + 2));
    std::string field;
    double utime = 0, stime = 0;
    for (int i = 3; i <= 15 && ss >> field; ++i) {
      if (i == 14) utime = std::stod(field);
      if (i == 15) stime = std::stod(field);
    }
    out[comm] += (utime + stime) / tick;
  }
  return out;
}

// Runs the responder in this (child) process until SIGTERM; reports its port through `fd`.
[[noreturn]] void RunResponderChild(int fd, const std::string& key) {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  fw::net::ResponderOptions o;
  o.listen_address = "127.0.0.1";
  o.port = 0;
  if (!key.empty()) o.key = key;
  auto r = fw::net::EchoResponder::Start(o, fw::RealClock::Get());
  uint16_t port = r.ok() ? (*r)->port() : 0;
  if (write(fd, &port, sizeof port) != sizeof port || !r.ok()) _exit(1);
  int sig = 0;
  sigwait(&set, &sig);
  (*r)->Stop();
  _exit(0);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"UDP prober overhead: CPU and RSS of one prober probing many flows"};
  double seconds = 60, rate = 1, hot_rate = 10;
  uint32_t peers = 16, flows = 4, slots = 10, hot_peers = 0, hot_flows = 0;
  std::string key;
  fw::net::BusyPollOptions busy;
  double busy_poll_us = static_cast<double>(busy.max_window_ns) / 1e3;  // the agent's default
  app.add_option("--seconds", seconds, "measured duration (after a 2 s warm-up)");
  app.add_option("--peers", peers, "peers in the plan (all the loopback responder)");
  app.add_option("--flows", flows, "flows (source ports) per peer");
  app.add_option("--rate", rate, "probes/s per flow");
  app.add_option("--hot-peers", hot_peers, "the first N peers probe at --hot-rate (escalated)");
  app.add_option("--hot-rate", hot_rate, "probes/s per flow of the --hot-peers");
  app.add_option("--hot-flows", hot_flows,
                 "of each hot peer, only the first N flows at --hot-rate, the others at --rate "
                 "(per-flow rates; 0: every flow)");
  app.add_option("--slots", slots, "send slots per period");
  app.add_option("--key", key, "shared key (adds HMAC work)");
  app.add_option("--busy-poll-us", busy_poll_us, "longest busy-poll window (0: off)");
  std::string reply_reads = "immediate";
  app.add_option("--reply-reads", reply_reads,
                 "immediate (each reply wakes the prober) or deferred (read in its other wakeups; "
                 "needs --busy-poll-us 0) (default immediate)")
      ->check(CLI::IsMember({"immediate", "deferred"}));
  bool tx_stamps = true;
  app.add_option("--tx-stamps", tx_stamps,
                 "kernel TX timestamps read back from the error queue (true|false; they feed only "
                 "kernel_rtt_ns) (default true)");
  CLI11_PARSE(app, argc, argv);

  int pipe_fd[2];
  if (pipe(pipe_fd) != 0) {
    std::perror("pipe");
    return 3;
  }
  pid_t child = fork();
  if (child < 0) {
    std::perror("fork");
    return 3;
  }
  if (child == 0) RunResponderChild(pipe_fd[1], key);
  uint16_t port = 0;
  if (read(pipe_fd[0], &port, sizeof port) != sizeof port || port == 0) {
    std::fprintf(stderr, "responder child failed to start\n");
    kill(child, SIGTERM);
    waitpid(child, nullptr, 0);
    return 3;
  }

  // Sized like an agent's: a few seconds of results (the uplink keeps the long buffer).
  fw::net::ResultQueue queue(4096);
  fw::net::UdpProberOptions o;
  o.send_slots = slots;
  o.busy_poll.max_window_ns = static_cast<int64_t>(busy_poll_us * 1e3);
  if (reply_reads == "deferred") o.reply_reads = fw::net::ReplyReads::kDeferred;
  o.kernel_tx_timestamps = tx_stamps;
  if (!key.empty()) o.key = key;
  auto prober = fw::net::UdpProber::Start(o, fw::RealClock::Get(), queue);
  if (!prober.ok()) {
    std::fprintf(stderr, "%s\n", prober.status().ToString().c_str());
    kill(child, SIGTERM);
    waitpid(child, nullptr, 0);
    return 3;
  }
  // Flows of each hot peer at --hot-rate: the first --hot-flows, or all of them.
  const uint32_t hot_each = hot_flows > 0 && hot_flows < std::min(flows, 64u) ? hot_flows : flows;
  fw::net::UdpProbePlan plan;
  plan.rate_hz = rate;
  for (uint32_t i = 0; i < peers; ++i) {
    char name[32];
    std::snprintf(name, sizeof name, "peer-%02u", i);
    plan.peers.push_back({name, "127.0.0.1", port, flows});
    if (i >= hot_peers) continue;
    plan.peers.back().rate_hz = hot_rate;
    if (hot_each < flows) {
      plan.peers.back().raised_flows = (uint64_t{1} << hot_each) - 1;
      plan.peers.back().unraised_rate_hz = rate;
    }
  }
  if (fw::Status s = (*prober)->SetPlan(plan); !s.ok()) {
    std::fprintf(stderr, "%s\n", s.ToString().c_str());
    kill(child, SIGTERM);
    waitpid(child, nullptr, 0);
    return 3;
  }

  // The main thread plays the uplink: it drains results once a second, and keeps the measured
  // window's round trips (reported and kernel-stamped) for their medians.
  std::vector<fw::net::ProbeResult> batch;
  batch.reserve(4096);
  std::vector<int64_t> rtts, kernel_rtts;
  bool keep = false;
  auto drain = [&](int secs) {
    for (int i = 0; i < secs; ++i) {
      std::this_thread::sleep_for(std::chrono::seconds(1));
      batch.clear();
      queue.PopBatch(batch, batch.capacity());
      for (const fw::net::ProbeResult& r : batch) {
        if (!keep || r.lost) continue;
        if (r.rtt_ns > 0) rtts.push_back(r.rtt_ns);
        if (r.kernel_rtt_ns > 0) kernel_rtts.push_back(r.kernel_rtt_ns);
      }
    }
  };
  drain(2);
  keep = true;
  const auto stats0 = (*prober)->Stats();
  const double cpu0 = ProcessCpu(RUSAGE_SELF);
  const auto threads0 = ThreadCpu();
  const auto wall0 = std::chrono::steady_clock::now();
  drain(static_cast<int>(seconds));
  const double wall =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count();
  const double cpu = ProcessCpu(RUSAGE_SELF) - cpu0;
  auto threads = ThreadCpu();
  const auto stats = (*prober)->Stats();
  const double rss = StatusMiB("VmRSS"), hwm = StatusMiB("VmHWM");
  (*prober)->Stop();
  kill(child, SIGTERM);
  waitpid(child, nullptr, 0);
  const double responder_cpu = ProcessCpu(RUSAGE_CHILDREN);

  const uint64_t sent = stats.sent - stats0.sent;
  const uint64_t wakeups = stats.wakeups - stats0.wakeups;
  std::printf(
      "probe_overhead_bench: %u peers x %u flows = %u flows at %.2f Hz (%u peers at %.2f Hz, %u "
      "flows each), %.1f s measured%s\n",
      peers, flows, peers * flows, rate, std::min(hot_peers, peers), hot_rate, hot_each, wall,
      key.empty() ? "" : ", HMAC on");
  std::printf("  prober process CPU: %.3f%% of one core (%.1f ms/s)\n", 100 * cpu / wall,
              1000 * cpu / wall);
  for (const auto& [name, secs] : threads) {
    double before = threads0.count(name) ? threads0.at(name) : 0;
    std::printf("    thread %-16s %.3f%%\n", name.c_str(), 100 * (secs - before) / wall);
  }
  std::printf("  RSS: %.1f MiB (peak %.1f MiB)\n", rss, hwm);
  std::printf(
      "  probes sent: %.1f/s, answered %lu, lost %lu, RTTs from kernel RX stamps %lu (of which "
      "kernel TX too %lu)\n",
      static_cast<double>(sent) / wall, stats.answered - stats0.answered, stats.lost - stats0.lost,
      stats.rx_kernel_ts - stats0.rx_kernel_ts, stats.tx_kernel_ts - stats0.tx_kernel_ts);
  std::printf("  prober wakeups: %.1f/s, %.1f us CPU per wakeup (process CPU / wakeups)\n",
              static_cast<double>(wakeups) / wall, wakeups ? 1e6 * cpu / wakeups : 0.0);
  const uint64_t polls = stats.busy_polls - stats0.busy_polls;
  const uint64_t answered = stats.answered - stats0.answered;
  std::printf(
      "  busy poll: %.1f windows/s, %.1f us spun per window, %.3f%% of one core; replies caught "
      "in a window %lu of %lu answered; windows timed out %lu, skipped for credit %lu\n",
      static_cast<double>(polls) / wall,
      polls ? static_cast<double>(stats.busy_poll_ns - stats0.busy_poll_ns) / 1e3 / polls : 0.0,
      100 * static_cast<double>(stats.busy_poll_ns - stats0.busy_poll_ns) * 1e-9 / wall,
      stats.busy_poll_hits - stats0.busy_poll_hits, answered,
      stats.busy_poll_timeouts - stats0.busy_poll_timeouts,
      stats.busy_poll_skipped - stats0.busy_poll_skipped);
  auto quantile_us = [](std::vector<int64_t>& v, double q) {
    if (v.empty()) return 0.0;
    const size_t k = std::min(v.size() - 1, static_cast<size_t>(q * static_cast<double>(v.size())));
    std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(k), v.end());
    return static_cast<double>(v[k]) / 1e3;
  };
  std::printf(
      "  reply reads %s%s: rtt p50 %.1f us p99 %.1f us (%zu), kernel-stamped rtt p50 %.1f us p99 "
      "%.1f us (%zu); unstamped deferred %lu, receive-queue drops %lu\n",
      reply_reads.c_str(),
      reply_reads == "deferred" && !stats.reply_reads_deferred ? " (in effect: immediate)" : "",
      quantile_us(rtts, 0.5), quantile_us(rtts, 0.99), rtts.size(), quantile_us(kernel_rtts, 0.5),
      quantile_us(kernel_rtts, 0.99), kernel_rtts.size(),
      stats.rx_unstamped_deferred - stats0.rx_unstamped_deferred,
      stats.rx_queue_drops - stats0.rx_queue_drops);
  std::printf("  responder (child process, whole run incl. warm-up): %.3f s CPU\n", responder_cpu);
  const bool ok = 100 * cpu / wall <= 0.5 && rss <= 30;
  std::printf("  target <= 0.5%% CPU and <= 30 MB RSS: %s\n", ok ? "met" : "NOT met");
  return ok ? 0 : 1;
}
