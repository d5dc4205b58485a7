// fabricwatch-agent: run the per-node daemon, or `check` the node once and exit.
#include <malloc.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <iostream>

#include "common/config.h"
#include "common/daemon_util.h"
#include "common/http/http_client.h"
#include "common/log.h"
#include "common/sd_notify.h"
#include "common/tls/tls_config.h"
#include "daemon/agent/agent.h"
#include "daemon/agent/check_main.h"
#include "daemon/agent/event_engine.h"
#include "daemon/agent/grpc_threads.h"
#include "probes/rdma/fake_verbs.h"
#include "probes/rdma/rdma_selftest.h"
#include "probes/rdma/verbs_ibv.h"

namespace {

// Test only (--test-rdma-fake-*): a fake InfiniBand device mlx5_0 with this LID, linked to the
// other processes' fake devices over loopback UDP (FakeFabric::EnableLoopbackLink, docs/rdma.md
// "End to end with fake verbs"), with faults on its port.
struct FakeRdmaFlags {
  int lid = 0, udp_base = 0, rc_fail = 0;
  double loss = 0, latency_us = 2, host_delay_us = 0;
};

fw::StatusOr<std::unique_ptr<fw::rdma::FakeFabric>> MakeFakeRdma(const FakeRdmaFlags& f) {
  if (f.udp_base == 0) {
    return fw::Status::InvalidArgument("--test-rdma-fake-lid needs --test-rdma-fake-udp-base");
  }
  auto fabric =
      std::make_unique<fw::rdma::FakeFabric>(fw::RealClock::Get(), static_cast<uint64_t>(f.lid));
  fw::rdma::FakeDeviceConfig d;
  d.name = "mlx5_0";
  fw::rdma::FakePortConfig p;
  p.lid = static_cast<uint16_t>(f.lid);
  p.latency_ns = static_cast<int64_t>(f.latency_us * 1e3);
  // 2 Gb/s: an RC write's serialization (262 us per 64 KiB) hides the loopback UDP hop of its
  // ack, so RC goodput reads the port's rate, not the build host's scheduling.
  p.rate_gbps = 2;
  fw::rdma::GidEntry g;
  g.gid.raw[0] = 0xfe;
  g.gid.raw[1] = 0x80;
  g.gid.raw[14] = static_cast<uint8_t>(f.lid >> 8);
  g.gid.raw[15] = static_cast<uint8_t>(f.lid);
  g.type = fw::rdma::GidType::kIb;
  p.gids = {g};
  d.ports = {p};
  d.node_guid = static_cast<uint64_t>(f.lid);
  fabric->AddDevice(d);
  fabric->SetLoss("mlx5_0", 1, f.loss);
  fabric->SetPollDelay("mlx5_0", static_cast<int64_t>(f.host_delay_us * 1e3));
  fabric->FailNextRcWrites("mlx5_0", f.rc_fail, fw::rdma::WcStatus::kRemAccessErr);
  fw::Status ls = fabric->EnableLoopbackLink(static_cast<uint16_t>(f.udp_base));
  if (!ls.ok()) return ls;
  spdlog::warn(
      "msg=\"test mode: fake RDMA verbs\" device=mlx5_0 lid={} udp_port={} loss={} "
      "latency_us={} host_delay_us={}",
      f.lid, f.udp_base + f.lid, f.loss, f.latency_us, f.host_delay_us);
  return fabric;
}

}  // namespace

int main(int argc, char** argv) {
  // One malloc arena for the whole process, before any thread exists. glibc gives threads their
  // own arenas (up to 8 per core), and each keeps what its thread once freed resident: 3-4 MiB of
  // this agent's footprint with per-thread arenas (docs/performance.md). The agent's threads
  // allocate a few times a second at most, so sharing one arena's lock costs nothing measurable.
  mallopt(M_ARENA_MAX, 1);
  // gRPC's closures and timers on one thread of ours instead of libgrpc's engine threads
  // (daemon/agent/event_engine.h); before any gRPC object exists.
  fw::agent::UseOneThreadEventEngine();
  fw::agent::AgentOptions o;
  fw::Seconds heartbeat{o.heartbeat_interval_s}, sample{o.sample_interval_s};
  fw::Seconds counter_slow{o.counter_slow_interval_s};
  fw::Seconds check_interval{o.check_counter_interval_s};
  fw::Seconds code_release{o.code_release_interval_s};
  std::string log_level = "info", config, format = "text";

  fw::ConfigBinding binding;
  binding.Bind("aggregator", &o.aggregator);
  binding.Bind("node-name", &o.node_name);
  binding.Bind("probe-address", &o.probe_address);
  binding.Bind("probe-nics", &o.probe_nics);
  binding.Bind("probe-port", &o.probe_port);
  binding.Bind("http-listen", &o.http_listen);
  binding.Bind("sysfs-root", &o.sysfs_root);
  binding.Bind("hwloc-xml", &o.hwloc_xml);
  binding.Bind("profile", &o.profile);
  binding.Bind("probe-key-file", &o.probe_key_file);
  binding.Bind("probes", &o.probes);
  binding.Bind("probe-source-port-base", &o.probe_source_port_base);
  binding.Bind("probe-busy-poll-us", &o.probe_busy_poll_us);
  binding.Bind("probe-send-phase-ms", &o.probe_send_phase_ms);
  binding.Bind("probe-send-slots", &o.probe_send_slots);
  binding.Bind("probe-reply-reads", &o.probe_reply_reads);
  binding.Bind("probe-tx-timestamps", &o.probe_tx_timestamps);
  binding.Bind("plan-max-targets", &o.plan_max_targets);
  binding.Bind("plan-max-pps", &o.plan_max_pps);
  binding.Bind("plan-max-bytes-per-s", &o.plan_max_bytes_per_s);
  binding.Bind("responder-allow-any", &o.responder_allow_any);
  binding.Bind("heartbeat-interval", &heartbeat);
  binding.Bind("sample-interval", &sample);
  binding.Bind("counter-slow-interval", &counter_slow);
  binding.Bind("xmit-wait-tick-bytes", &o.xmit_wait_tick_bytes);
  binding.Bind("code-release-interval", &code_release);
  binding.Bind("buffer-batches", &o.buffer_batches);
  binding.Bind("buffer-mb", &o.buffer_mb);
  binding.Bind("log-level", &log_level);
  binding.Bind("rdma", &o.rdma);
  fw::tls::TlsFiles tls_files;
  std::string web_config;
  fw::tls::BindTlsConfig(binding, &tls_files);
  binding.Bind("web-config", &web_config);
  if (!fw::LoadConfigFromArgs(binding, argc, argv, "fabricwatch-agent")) return 3;
  auto duration = fw::DurationSetter;

  CLI::App app{
      "fabricwatch-agent: watches this node's fabric (topology, NIC counters, probes to "
      "peers) and streams it to the aggregator."};
  app.add_option("--config", config, "YAML file whose keys are these flags' names");
  app.add_option("--aggregator", o.aggregator, "aggregator gRPC address HOST:PORT")
      ->capture_default_str();
  app.add_option("--node-name", o.node_name, "this node's name (default: hostname)");
  app.add_option("--probe-address", o.probe_address, "the address peers probe");
  app.add_option("--probe-nics", o.probe_nics,
                 "fabric NICs to probe from, one socket each: eth0,eth1 (each interface's IPv4 "
                 "address, bound to it) or mlx5_0=10.0.0.5 (docs/probes.md, \"Every fabric NIC\")");
  app.add_option("--probe-port", o.probe_port, "UDP and TCP echo port (0: any free port)")
      ->capture_default_str();
  app.add_option("--probe-key-file", o.probe_key_file,
                 "file holding the fleet's shared probe key (HMAC); answers only signed probes");
  app.add_option("--probe-source-port-base", o.probe_source_port_base,
                 "flow j to every peer uses this source port + j (0: ephemeral)")
      ->capture_default_str();
  app.add_option("--probe-busy-poll-us", o.probe_busy_poll_us,
                 "spin up to this long for replies after each send slot (0: sleep at once; the "
                 "round trip then includes one wakeup, as sockperf's does)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 10'000.0));
  app.add_option("--probe-send-phase-ms", o.probe_send_phase_ms,
                 "UDP probes go out this many ms after each point of the wall clock's send-slot "
                 "grid (0: together with every agent; -1: no grid; docs/probes.md)")
      ->capture_default_str()
      ->check(CLI::Range(-1.0, 60'000.0));
  app.add_option("--probe-send-slots", o.probe_send_slots,
                 "UDP send slots per period of each plan rate: the flows of a rate are spread "
                 "over them, and each slot is one wakeup of the prober and of the peers' "
                 "responders (docs/probes.md)")
      ->capture_default_str()
      ->check(CLI::Range(1, 100));
  app.add_option("--probe-reply-reads", o.probe_reply_reads,
                 "when the UDP prober reads its replies: immediate (each reply wakes it; rtt is "
                 "the user-space round trip, as sockperf's) or deferred (in the wakeups it takes "
                 "anyway to send and expire; rtt ends at the kernel's receive stamp; "
                 "docs/probes.md) (default immediate)")
      ->check(CLI::IsMember({"immediate", "deferred"}));
  app.add_option("--probe-tx-timestamps", o.probe_tx_timestamps,
                 "on|off: the UDP prober's software TX stamps, a stamped copy of each probe read "
                 "back from the error queue for a kernel-stamped round trip the agent does not "
                 "report (docs/probes.md) (default on)")
      ->check(CLI::IsMember({"on", "off"}));
  // Ceilings on what any plan may ask; a plan past them is trimmed and counted (docs/probes.md).
  app.add_option("--plan-max-targets", o.plan_max_targets,
                 "most plan entries probed; later ones are left out")
      ->capture_default_str()
      ->check(CLI::Range(1, 1'000'000));
  app.add_option("--plan-max-pps", o.plan_max_pps,
                 "most probes/s a plan may ask of this node (UDP flows x rate, packet budget)")
      ->capture_default_str()
      ->check(CLI::Range(1.0, 1e7));
  app.add_option("--plan-max-bytes-per-s", o.plan_max_bytes_per_s,
                 "most probe bytes/s a plan may ask (byte budget, bandwidth bursts)")
      ->default_str("125000000")  // not 1.25e+08, as the config file and man page write it
      ->check(CLI::Range(1e3, 1e12));
  app.add_option("--probes", o.probes, "run the echo responder and probe peers (true|false)")
      ->capture_default_str();
  app.add_option("--responder-allow-any", o.responder_allow_any,
                 "answer every prober, not only the nodes whose plans name this one (true|false; "
                 "for fabrics that rewrite probe source addresses, e.g. NAT)")
      ->default_str("false");
  app.add_option("--http-listen", o.http_listen, "HTTP /metrics listen address")
      ->capture_default_str();
  app.add_option("--sysfs-root", o.sysfs_root, "sysfs root")->capture_default_str();
  app.add_option("--hwloc-xml", o.hwloc_xml, "use an exported hwloc topology instead of live");
  app.add_option("--profile", o.profile, "expected node shape: a name or a YAML file");
  app.add_option_function<std::string>("--heartbeat-interval", duration(&heartbeat),
                                       "heartbeat period (default 5s)");
  app.add_option_function<std::string>("--sample-interval", duration(&sample),
                                       "counter sampling period (default 1s)");
  app.add_option_function<std::string>(
      "--counter-slow-interval", duration(&counter_slow),
      "period of the counters no check or rate uses, docs/node-checks.md (default 10s)");
  app.add_option("--xmit-wait-tick-bytes", o.xmit_wait_tick_bytes,
                 "bytes of line time per port_xmit_wait tick, for the congestion ratio "
                 "(docs/node-checks.md)")
      ->capture_default_str()
      ->check(CLI::Range(0.001, 1e6));
  app.add_option_function<std::string>(
      "--code-release-interval", duration(&code_release),
      "unmap idle code pages (start-up code) 30s after start and then this often, so RSS holds "
      "what the agent runs, docs/performance.md; 0 never (default 5m)");
  app.add_option("--buffer-batches", o.buffer_batches, "max unacknowledged batches kept")
      ->capture_default_str();
  app.add_option("--buffer-mb", o.buffer_mb, "max MiB of unacknowledged batches kept")
      ->capture_default_str();
  app.add_option("--log-level", log_level, "trace|debug|info|warn|error")->capture_default_str();
  fw::tls::AddTlsFlags(app, &tls_files, "this agent (it must name this node)");
  app.add_option("--web-config,--web-config-file", web_config,
                 "HTTP TLS and basic auth, in the Prometheus exporter-toolkit web config format");
  app.add_option("--test-batches", o.test_batches, "test only: send N numbered batches")->group("");
  app.add_option("--test-batch-rate", o.test_batch_rate, "test only: numbered batches per second")
      ->group("");
  app.add_option("--collective-test-delay-ms", o.collective_test_delay_ms,
                 "test only: sleep before each collective iteration (a late rank)")
      ->check(CLI::Range(0, 10000))
      ->group("");
  app.add_option("--test-trace-budget", o.trace_budget_fraction,
                 "test only: path-trace packets per probe packet sent (default 0.02)")
      ->check(CLI::Range(0.0, 100.0))
      ->group("");
  app.add_option("--rdma", o.rdma, "auto|off: RDMA UD probes on every usable port (docs/rdma.md)")
      ->check(CLI::IsMember({"auto", "off"}))
      ->capture_default_str();
  // Test only: fake RDMA verbs on a fake InfiniBand device mlx5_0 with this LID, linked to the
  // other agents' fake devices over loopback UDP (FakeFabric::EnableLoopbackLink, docs/rdma.md
  // "End to end with fake verbs"), with faults on its port.
  FakeRdmaFlags fake;
  app.add_option("--test-rdma-fake-lid", fake.lid, "test only: fake RDMA device with this LID")
      ->check(CLI::Range(1, 0xbfff))
      ->group("");
  app.add_option("--test-rdma-fake-udp-base", fake.udp_base,
                 "test only: the fake devices' loopback UDP ports are this + LID")
      ->check(CLI::Range(1024, 60000))
      ->group("");
  app.add_option("--test-rdma-fake-loss", fake.loss, "test only: loss on the fake port")
      ->check(CLI::Range(0.0, 1.0))
      ->group("");
  app.add_option("--test-rdma-fake-latency-us", fake.latency_us,
                 "test only: one-way latency of the fake port")
      ->check(CLI::Range(0.0, 1e6))
      ->group("");
  app.add_option("--test-rdma-fake-host-delay-us", fake.host_delay_us,
                 "test only: host delay (completion to poll) of the fake device")
      ->check(CLI::Range(0.0, 1e6))
      ->group("");
  app.add_option("--test-rdma-fake-rc-fail", fake.rc_fail,
                 "test only: the first N RC writes of the fake device fail (rem_access_err)")
      ->check(CLI::Range(0, 1000))
      ->group("");
  std::string port_file;
  app.add_option("--port-file", port_file, "write the bound HTTP port as JSON here once listening");
  fw::rdma::SelftestOptions selftest;
  CLI::App* rdma_selftest = app.add_subcommand(
      "rdma-selftest",
      "UD latency and RC write bandwidth on one RDMA port, in loopback or with a peer host "
      "(--server on one, --peer on the other); exit 0/2/3");
  rdma_selftest->add_option("--device", selftest.device, "RDMA device")->capture_default_str();
  rdma_selftest->add_option("--port", selftest.port, "port (0: the first usable)");
  rdma_selftest->add_option("--seconds", selftest.seconds, "UD probing time")
      ->check(CLI::Range(0.1, 3600.0))
      ->capture_default_str();
  rdma_selftest->add_option("--rc-bursts", selftest.rc_bursts, "RC write bursts (0: none)")
      ->check(CLI::Range(0, 1000))
      ->capture_default_str();
  rdma_selftest->add_option("--rc-bytes", selftest.rc_burst_bytes, "bytes per RC write burst")
      ->check(CLI::Range(uint64_t{65536}, uint64_t{1} << 34))
      ->capture_default_str();
  auto* selftest_server =
      rdma_selftest->add_flag("--server", selftest.server, "wait for one peer on --tcp-port");
  rdma_selftest
      ->add_option("--peer", selftest.peer,
                   "the peer host running rdma-selftest --server: probe it and write into it")
      ->excludes(selftest_server);
  rdma_selftest
      ->add_option("--tcp-port", selftest.tcp_port,
                   "TCP port of the connection-data exchange with the peer")
      ->check(CLI::Range(0, 65535))
      ->capture_default_str();
  rdma_selftest
      ->add_option("--timeout", selftest.timeout_s,
                   "seconds to wait for the peer (accept, connect, each message)")
      ->check(CLI::Range(0.1, 86400.0))
      ->capture_default_str();
  rdma_selftest->add_flag("--json", selftest.json, "print one JSON object instead of text");
  CLI::App* check = app.add_subcommand("check", "check this node once and exit 0/1/2/3");
  check->add_option("--format", format, "text|json")
      ->check(CLI::IsMember({"text", "json"}))
      ->capture_default_str();
  check->add_option_function<std::string>(
      "--counter-interval", duration(&check_interval),
      "time between the two counter passes that give rates (default 1s; 0: one snapshot)");
  fw::agent::HealthCheckOptions health_check;
  fw::agent::AddHealthCheckFlags(check, &health_check);
  check->fallthrough();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e);
    return rc == 0 ? 0 : 3;  // usage errors are "unknown" in the Nagios convention
  }
  o.heartbeat_interval_s = heartbeat.value > 0 ? heartbeat.value : 5;
  o.sample_interval_s = sample.value > 0 ? sample.value : 1;
  o.counter_slow_interval_s = counter_slow.value > 0 ? counter_slow.value : 10;
  o.code_release_interval_s = std::max(0.0, code_release.value);
  o.check_counter_interval_s = check_interval.value >= 0 ? check_interval.value : 1;

  if (*rdma_selftest) {
    fw::InitLogging("rdma-selftest", log_level);  // on stderr: stdout is the report
    selftest.progress = &std::cerr;
    if (fake.lid > 0) {  // test only: a fake device on the loopback link instead of libibverbs
      auto fabric = MakeFakeRdma(fake);
      if (!fabric.ok()) {
        std::cerr << "rdma-selftest: " << fabric.status().message() << "\n";
        return 3;
      }
      auto verbs = (*fabric)->MakeVerbs({"mlx5_0"});
      return fw::rdma::RunSelftest(*verbs, fw::RealClock::Get(), selftest, std::cout);
    }
    auto verbs = fw::rdma::MakeIbverbs(o.sysfs_root);
    return fw::rdma::RunSelftest(*verbs, fw::RealClock::Get(), selftest, std::cout);
  }
  if (*check) return fw::agent::RunCheckCommand(o, format, health_check, std::cout, std::cerr);

  fw::InitLogging("agent", log_level);
  fw::BlockTerminationSignals();
  // libgrpc's timer threads and resolver executor stopped, its timers ticked on fw-grpc-ee
  // (daemon/agent/grpc_threads.h); before the agent makes its first channel.
  if (fw::agent::StopGrpcOwnThreads()) {
    fw::agent::RunPeriodicallyOnEngineThread(fw::agent::TickGrpcTimers,
                                             fw::agent::kGrpcTimerTickPeriod);
  }
  fw::tls::ResolveCommandLinePrecedence(app, &tls_files);
  auto tls = fw::tls::LoadTlsFiles(tls_files);
  if (!tls.ok()) {
    spdlog::critical("msg=\"cannot start\" error=\"{}\"", tls.status().message());
    return 3;
  }
  o.tls = std::move(*tls);
  if (!web_config.empty()) {
    auto web = fw::http::LoadWebConfigFile(web_config);
    if (!web.ok()) {
      spdlog::critical("msg=\"cannot start\" error=\"{}\"", web.status().message());
      return 3;
    }
    o.web = std::move(*web);
  }

  std::unique_ptr<fw::rdma::FakeFabric> fake_fabric;  // outlives the agent, which uses its verbs
  if (fake.lid > 0) {
    auto made = MakeFakeRdma(fake);
    if (!made.ok()) {
      spdlog::critical("msg=\"cannot start\" error=\"{}\"", made.status().message());
      return 3;
    }
    fake_fabric = std::move(*made);
    fw::rdma::FakeFabric* f = fake_fabric.get();
    o.rdma_verbs = [f] { return f->MakeVerbs({"mlx5_0"}); };
    o.rdma_runner.mesh.unchanneled_poll_ns = 100'000;
    // Small RC bursts and a quick retry: the end-to-end test sees a reconnect within seconds.
    o.rdma_runner.rc.write.burst_bytes = 4u << 20;
    o.rdma_runner.rc.backoff_base_s = 0.5;
  }
  fw::agent::Agent agent(o);
  fw::tls::LogTransportSecurity("agent", o.tls);
  if (o.tls && !fw::tls::NamesNode(o.tls->names, agent.node_name())) {
    // The aggregator would refuse every session (PERMISSION_DENIED): say so now, once.
    spdlog::critical(
        "msg=\"cannot start: the --tls-cert does not name this node\" node={} cert_names={}",
        agent.node_name(), fmt::format("{}", fmt::join(o.tls->names, ",")));
    return 3;
  }
  // The report loop runs on this thread between its signal and watchdog waits (below).
  fw::Status st = agent.Start(fw::agent::Agent::ReportOn::kCaller);
  if (!st.ok()) {
    spdlog::critical("msg=\"cannot start\" error=\"{}\"", st.message());
    return 3;
  }
  if (!port_file.empty() &&
      !fw::WritePortFile(port_file,
                         "{\"http_port\": " + std::to_string(agent.http_port()) + "}\n")) {
    spdlog::critical("msg=\"cannot write port file\" file={}", port_file);
    return 3;
  }
  // Every listener accepts now (Start() returned): READY=1 lets units ordered after this one
  // start. The watchdog is fed while this daemon's own /healthz answers over loopback, i.e. while
  // the HTTP workers that Prometheus and the probes' peers depend on still serve.
  // The main thread also runs the report loop (counter pass, batches, check reports), so a slow
  // self-check delays that work by at most its timeout.
  const std::string status = "serving: HTTP port " + std::to_string(agent.http_port());
  fw::ServiceWork report{[&] { return agent.RunReportWork(); }, agent.report_wake_fd()};
  int sig = fw::RunAsNotifyService(
      status, [&](int timeout_ms) { return agent.HttpHealthy(timeout_ms); }, &report);
  spdlog::info("msg=\"shutting down\" signal={}", sig);
  agent.Stop();
  return 0;
}
