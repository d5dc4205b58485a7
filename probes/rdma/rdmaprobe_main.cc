// fw_rdmaprobe: `selftest` on a real port (or `--fake`, an in-memory device), for operators and
// the comparison with perftest in docs/rdma.md. The agent's `rdma-selftest` runs the same code.
#include <CLI/CLI.hpp>
#include <iostream>

#include "common/clock.h"
#include "common/log.h"
#include "probes/rdma/fake_verbs.h"
#include "probes/rdma/rdma_cpu_bench.h"
#include "probes/rdma/rdma_selftest.h"
#include "probes/rdma/verbs_ibv.h"

int main(int argc, char** argv) {
  CLI::App app("fw_rdmaprobe: RDMA probes on one port");
  app.require_subcommand(1);
  fw::rdma::SelftestOptions o;
  bool fake = false;
  std::string sysfs = "/sys";
  auto* st = app.add_subcommand("selftest", "loopback UD latency and RC write bandwidth");
  st->add_option("--device", o.device, "RDMA device")->capture_default_str();
  st->add_option("--port", o.port, "port (0: first usable)");
  st->add_option("--seconds", o.seconds, "UD probing time")->check(CLI::Range(0.1, 3600.0));
  st->add_option("--rate", o.rate_hz, "UD probes/s per flow")->check(CLI::Range(1.0, 100000.0));
  st->add_option("--flows", o.flows, "flow labels / source QPs")->check(CLI::Range(1, 64));
  st->add_option("--rc-bursts", o.rc_bursts, "RC write bursts (0: none)")
      ->check(CLI::Range(0, 1000));
  st->add_option("--rc-bytes", o.rc_burst_bytes, "bytes per RC burst");
  st->add_option("--sysfs-root", sysfs, "where GID types are read");
  st->add_flag("--fake", fake, "an in-memory 100 Gb/s IB device with 2 us latency (no hardware)");
  st->add_flag("--server", o.server, "wait for one peer on --tcp-port");
  st->add_option("--peer", o.peer, "the peer host running selftest --server");
  st->add_option("--tcp-port", o.tcp_port, "TCP port of the connection-data exchange");
  st->add_option("--timeout", o.timeout_s, "seconds to wait for the peer")
      ->check(CLI::Range(0.1, 86400.0));
  st->add_flag("--json", o.json, "one JSON object instead of text");
  fw::rdma::CpuBenchOptions cb;
  auto* cpu = app.add_subcommand(
      "cpu", "the agent RDMA thread's CPU at a UD probe rate, against the in-memory fake");
  cpu->add_option("--targets", cb.targets, "fake peers")->check(CLI::Range(1, 256));
  cpu->add_option("--flows", cb.flows, "flows per target")->check(CLI::Range(1, 64));
  cpu->add_option("--rate", cb.rate_hz, "probes/s per flow")->check(CLI::Range(0.1, 1000.0));
  cpu->add_option("--seconds", cb.seconds, "measured window")->check(CLI::Range(1.0, 600.0));
  cpu->add_option("--warmup", cb.warmup_s, "before the window")->check(CLI::Range(0.0, 60.0));
  cpu->add_option("--linger", cb.linger_s, "kept running after the window")
      ->check(CLI::Range(0.0, 60.0));
  cpu->add_option("--send-window-ms", cb.send_window_ms, "send windows (0: off)")
      ->check(CLI::Range(0.0, 10000.0))
      ->capture_default_str();
  cpu->add_flag("!--no-answer", cb.answer, "the peers do not probe the agent back");
  auto* linkcost = app.add_subcommand(
      "linkcost", "the thread CPU of each syscall the fake's loopback link makes for a NIC");
  CLI11_PARSE(app, argc, argv);
  fw::InitLogging("fw_rdmaprobe", "warn");  // on stderr: stdout is the report
  if (*cpu) return fw::rdma::RunCpuBench(cb, std::cout);
  if (*linkcost) return fw::rdma::RunLinkCostBench(std::cout);
  o.progress = &std::cerr;
  if (fake) {
    fw::rdma::FakeFabric fabric(fw::RealClock::Get());
    fw::rdma::FakeDeviceConfig d;
    d.name = o.device;
    fw::rdma::FakePortConfig p;
    p.lid = 1;
    d.ports = {p};
    fabric.AddDevice(d);
    auto v = fabric.MakeVerbs({o.device});
    return fw::rdma::RunSelftest(*v, fw::RealClock::Get(), o, std::cout);
  }
  auto v = fw::rdma::MakeIbverbs(sysfs);
  return fw::rdma::RunSelftest(*v, fw::RealClock::Get(), o, std::cout);
}
