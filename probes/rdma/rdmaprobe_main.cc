// fw_rdmaprobe: `selftest` on a real port (or `--fake`, an in-memory device), for operators and
// the comparison with perftest in docs/rdma.md. The agent's `rdma-selftest` runs the same code.
#include <CLI/CLI.hpp>
#include <iostream>

#include "common/clock.h"
#include "probes/rdma/fake_verbs.h"
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
  CLI11_PARSE(app, argc, argv);
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
