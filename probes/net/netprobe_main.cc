// fw_netprobe: run the echo responder or one kind of probe from the command line and print
// key=value summaries (used by tests/bench/probe_accuracy.sh and for poking at a peer by hand).
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "probes/net/bandwidth_probe.h"
#include "probes/net/echo_responder.h"
#include "probes/net/socket_util.h"
#include "probes/net/tcp_prober.h"
#include "probes/net/udp_prober.h"

namespace {

volatile std::sig_atomic_t g_stop = 0;
void OnSignal(int) { g_stop = 1; }

double Percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t i = static_cast<size_t>(q * static_cast<double>(v.size() - 1) + 0.5);
  return v[std::min(i, v.size() - 1)];
}

int Fail(const fw::Status& s) {
  std::fprintf(stderr, "fw_netprobe: %s\n", s.ToString().c_str());
  return 3;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"fabricwatch network probes: responder, UDP latency/loss, TCP connect, bandwidth"};
  app.require_subcommand(1);
  std::string key, target, listen = "0.0.0.0";
  uint16_t port = 9753;
  double seconds = 10, rate = 1, src_rate = 1000;
  uint32_t flows = 1, payload = 0, slots = 10, repeat = 1;
  int timeout_ms = 1000, cpu_lead_ms = 120;
  double send_phase_ms = 0;
  uint64_t bytes = 4u << 20;
  bool user_ts = false, no_tx_ts = false, kernel_rtt = false, respond_own_thread = false,
       per_burst = false;
  uint16_t respond_port = 0;
  const fw::net::BusyPollOptions busy_defaults;
  double busy_poll_us = static_cast<double>(busy_defaults.max_window_ns) / 1e3;  // 0: off
  double busy_poll_cpu_pct = busy_defaults.cpu_share * 100;

  CLI::App* respond = app.add_subcommand("respond", "run the echo responder (UDP and TCP)");
  respond->add_option("--listen", listen, "address to bind");
  respond->add_option("--port", port, "UDP and TCP port");
  respond->add_option("--seconds", seconds, "exit after this long (0: until SIGINT/SIGTERM)");
  respond->add_option("--per-source-rate", src_rate, "requests/s answered per source host");

  CLI::App* udp = app.add_subcommand("udp", "UDP latency/loss probes to one responder");
  udp->add_option("--target", target, "IP:PORT of the responder")->required();
  udp->add_option("--flows", flows, "source ports (flows)");
  udp->add_option("--rate", rate, "probes/s per flow");
  udp->add_option("--seconds", seconds, "how long to probe");
  udp->add_option("--timeout-ms", timeout_ms, "loss timeout");
  udp->add_option("--payload", payload, "padding bytes per probe");
  udp->add_option("--slots", slots, "send slots per period (batching)");
  udp->add_option("--send-phase-ms", send_phase_ms,
                  "send slots start this many ms after each point of the wall clock's grid of "
                  "slot lengths (-1: no grid, phased from the start)");
  udp->add_flag("--user-timestamps", user_ts, "do not use kernel timestamps at all");
  udp->add_flag("--no-tx-timestamps", no_tx_ts,
                "kernel RX stamps only: no TX stamps from the error queue (the agent's "
                "--probe-tx-timestamps off)");
  udp->add_flag("--kernel-rtt", kernel_rtt,
                "report the kernel-stamped round trip (default: the user-space one)");
  udp->add_option("--busy-poll-us", busy_poll_us,
                  "longest busy-poll window after a send slot (0, the default: sleep right away; "
                  "300 is a good value)");
  udp->add_option("--busy-poll-cpu-pct", busy_poll_cpu_pct,
                  "share of one core the busy polling may use on average");
  udp->add_option("--respond-port", respond_port,
                  "also answer probes on this port (on --listen), like an agent: the responder "
                  "runs on the prober's thread (0, the default: no responder)");
  udp->add_flag("--respond-own-thread", respond_own_thread,
                "with --respond-port: the responder on a thread of its own instead");
  udp->add_option("--listen", listen, "with --respond-port: the address to answer on");

  CLI::App* bw = app.add_subcommand("tcp-bw", "TCP bandwidth bursts to one responder");
  bw->add_option("--target", target, "IP:PORT of the responder")->required();
  bw->add_option("--bytes", bytes, "burst size");
  bw->add_option("--repeat", repeat, "bursts, one after another");
  bw->add_option("--timeout-ms", timeout_ms, "per-burst timeout");
  bw->add_option("--cpu-lead-ms", cpu_lead_ms,
                 "the wait before each burst over which its host CPU is read as well (the "
                 "agent's 120; 0: the burst alone)");
  bw->add_flag("--per-burst", per_burst,
               "a line per burst: its time, goodput and host CPU (busy share, PSI, own wait)");

  CLI::App* conn = app.add_subcommand("tcp-connect", "TCP connect-latency probes");
  conn->add_option("--target", target, "IP:PORT of the responder")->required();
  conn->add_option("--repeat", repeat, "probes, one after another");
  conn->add_option("--timeout-ms", timeout_ms, "per-probe timeout");

  for (CLI::App* sub : {respond, udp, bw, conn}) {
    sub->add_option("--key", key, "shared probe key (empty: no authentication)");
  }
  CLI11_PARSE(app, argc, argv);
  std::optional<std::string> opt_key;
  if (!key.empty()) opt_key = key;
  const fw::Clock& clock = fw::RealClock::Get();

  if (*respond) {
    fw::net::ResponderOptions o;
    o.listen_address = listen;
    o.port = port;
    o.key = opt_key;
    o.per_source_rate = src_rate;
    o.per_source_burst = std::max(10.0, src_rate / 10);
    auto r = fw::net::EchoResponder::Start(o, clock);
    if (!r.ok()) return Fail(r.status());
    std::signal(SIGINT, OnSignal);
    std::signal(SIGTERM, OnSignal);
    std::printf("listening port=%u\n", (*r)->port());
    std::fflush(stdout);
    auto start = std::chrono::steady_clock::now();
    while (!g_stop && (seconds <= 0 || std::chrono::steady_clock::now() - start <
                                           std::chrono::duration<double>(seconds))) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    (*r)->Stop();
    fw::net::ResponderStats s = (*r)->Stats();
    std::printf("udp_requests=%lu udp_replies=%lu bulk_acks=%lu bytes_in=%lu bytes_out=%lu",
                s.udp_requests, s.udp_replies, s.bulk_acks, s.bytes_in, s.bytes_out);
    for (size_t i = 0; i < fw::net::kResponderDropCount; ++i) {
      if (s.dropped[i]) {
        std::printf(
            " dropped_%s=%lu",
            std::string(fw::net::ResponderDropName(static_cast<fw::net::ResponderDrop>(i))).c_str(),
            s.dropped[i]);
      }
    }
    std::printf("\n");
    return 0;
  }

  auto addr = fw::net::ParseHostPort(target);
  if (!addr.ok()) return Fail(addr.status());
  std::string ip = addr->ToString();
  ip = ip.substr(0, ip.rfind(':'));
  if (!ip.empty() && ip.front() == '[') ip = ip.substr(1, ip.size() - 2);

  if (*udp) {
    fw::net::ResultQueue q(1 << 16);  // drained every 50 ms
    fw::net::UdpProberOptions o;
    o.key = opt_key;
    o.send_slots = slots;
    o.align_send_slots = send_phase_ms >= 0;
    o.send_slot_phase_ns = static_cast<int64_t>(std::max(0.0, send_phase_ms) * 1e6);
    o.kernel_rx_timestamps = !user_ts;
    o.kernel_tx_timestamps = !no_tx_ts;
    o.report_kernel_rtt = kernel_rtt;
    o.busy_poll.max_window_ns = static_cast<int64_t>(busy_poll_us * 1e3);
    o.busy_poll.cpu_share = busy_poll_cpu_pct / 100;
    auto p = fw::net::UdpProber::Start(o, clock, q);
    if (!p.ok()) return Fail(p.status());
    std::unique_ptr<fw::net::EchoResponder> responder;
    if (respond_port != 0) {
      fw::net::ResponderOptions ro;
      ro.listen_address = listen;
      ro.port = respond_port;
      ro.key = opt_key;
      auto r = fw::net::EchoResponder::Start(ro, clock, respond_own_thread ? nullptr : p->get());
      if (!r.ok()) return Fail(r.status());
      responder = std::move(*r);
    }
    fw::net::UdpProbePlan plan;
    plan.peers.push_back({"target", ip, addr->port(), flows});
    plan.rate_hz = rate;
    plan.timeout_ns = static_cast<int64_t>(timeout_ms) * 1'000'000;
    plan.payload_bytes = payload;
    if (fw::Status s = (*p)->SetPlan(plan); !s.ok()) return Fail(s);
    // Probe for `seconds` plus one timeout, then keep only probes sent early enough to have been
    // answered or declared lost by the end: cutting the tail this way does not bias the loss.
    std::vector<fw::net::ProbeResult> all, results;
    const int64_t timeout_ns = plan.timeout_ns;
    const auto end = std::chrono::steady_clock::now() +
                     std::chrono::duration<double>(seconds + timeout_ns * 1e-9 + 0.1);
    while (std::chrono::steady_clock::now() < end) {
      q.PopBatch(all, 1 << 20);
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    const int64_t cutoff = clock.WallNanos() - timeout_ns - 100'000'000;
    if (responder) responder->Stop();
    (*p)->Stop();
    q.PopBatch(all, 1 << 20);
    for (const auto& r : all) {
      if (r.timestamp_ns < cutoff) results.push_back(r);
    }
    std::vector<double> rtt_us, kernel_us;  // the reported RTTs; the kernel-stamped ones
    uint64_t lost = 0;
    for (const auto& r : results) {
      if (r.lost) {
        ++lost;
        continue;
      }
      rtt_us.push_back(static_cast<double>(r.rtt_ns) / 1e3);
      if (r.kernel_rtt_ns > 0) kernel_us.push_back(static_cast<double>(r.kernel_rtt_ns) / 1e3);
    }
    fw::net::UdpProberStats s = (*p)->Stats();
    std::printf(
        "sent=%lu results=%zu answered=%zu lost=%lu loss_pct=%.3f rtt_min_us=%.2f rtt_p50_us=%.2f "
        "rtt_p99_us=%.2f kernel_rtt_p50_us=%.2f kernel_rtt_p99_us=%.2f kernel_ts=%lu user_ts=%lu "
        "late=%lu replies=%lu busy_polls=%lu busy_poll_hits=%lu busy_poll_timeouts=%lu "
        "busy_poll_skipped=%lu "
        "busy_poll_ms=%.1f\n",
        s.sent, results.size(), rtt_us.size(), lost,
        results.empty() ? 0.0 : 100.0 * static_cast<double>(lost) / results.size(),
        Percentile(rtt_us, 0), Percentile(rtt_us, 0.5), Percentile(rtt_us, 0.99),
        Percentile(kernel_us, 0.5), Percentile(kernel_us, 0.99), s.rx_kernel_ts, s.rx_user_ts,
        s.late, s.answered, s.busy_polls, s.busy_poll_hits, s.busy_poll_timeouts,
        s.busy_poll_skipped, static_cast<double>(s.busy_poll_ns) / 1e6);
    return 0;
  }

  fw::net::TcpTarget t{"target", ip, addr->port(), {}};
  if (*bw) {
    fw::net::BandwidthProbe probe(clock, nullptr, opt_key);
    fw::net::BandwidthOptions o;
    o.bytes = bytes;
    o.timeout = std::chrono::milliseconds(timeout_ms);
    o.cpu_lead = std::chrono::milliseconds(cpu_lead_ms);
    std::vector<double> mbps, some, wait;
    for (uint32_t i = 0; i < repeat; ++i) {
      auto r = probe.Run(t, o);
      if (!r.ok()) return Fail(r.status());
      if (r->lost) {
        std::fprintf(stderr, "fw_netprobe: burst %u timed out\n", i);
        continue;
      }
      mbps.push_back(r->goodput_bps / 1e6);
      // Over the lead and the burst (docs/probes.md "Host CPU during a burst"); -1: unknown.
      const fw::CpuPressure& p = probe.last_pressure();
      some.push_back(p.some);
      wait.push_back(p.thread_wait);
      if (per_burst) {
        std::printf("burst=%u ms=%.2f mbps=%.1f cpu_busy=%.3f psi_some=%.3f thread_wait=%.3f\n", i,
                    static_cast<double>(r->rtt_ns) / 1e6, r->goodput_bps / 1e6,
                    r->cpu_busy_permille / 1000.0, p.some, p.thread_wait);
      }
    }
    std::printf(
        "bursts=%zu bytes=%lu goodput_p50_mbps=%.2f goodput_max_mbps=%.2f psi_some_p50=%.3f "
        "thread_wait_p50=%.3f\n",
        mbps.size(), bytes, Percentile(mbps, 0.5), Percentile(mbps, 1.0), Percentile(some, 0.5),
        Percentile(wait, 0.5));
    return mbps.empty() ? 2 : 0;
  }

  fw::net::TcpConnectProber prober(clock);
  std::vector<double> us;
  uint64_t lost = 0;
  for (uint32_t i = 0; i < repeat; ++i) {
    auto rs = prober.ProbeAll(std::span(&t, 1), std::chrono::milliseconds(timeout_ms));
    if (!rs[0].ok()) return Fail(rs[0].status());
    if (rs[0]->lost) {
      ++lost;
    } else {
      us.push_back(static_cast<double>(rs[0]->rtt_ns) / 1e3);
    }
  }
  std::printf("connects=%zu lost=%lu connect_p50_us=%.2f\n", us.size(), lost, Percentile(us, 0.5));
  return 0;
}
