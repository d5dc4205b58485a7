// fabricwatch-aggregator: flags and config, then run until SIGTERM/SIGINT.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "common/config.h"
#include "common/daemon_util.h"
#include "common/http/http_client.h"
#include "common/log.h"
#include "common/sd_notify.h"
#include "common/tls/tls_config.h"
#include "daemon/aggregator/aggregator.h"

int main(int argc, char** argv) {
  fw::aggregator::AggregatorOptions o;
  fw::Seconds tick{o.tick_s}, hb_timeout{o.heartbeat_timeout_s};
  fw::Seconds hb_grace{o.heartbeat_grace_max_s};
  fw::Seconds bw_interval{static_cast<double>(o.planner.bw_interval_s)};
  fw::Seconds latency_floor{o.analysis.latency_floor_s};
  fw::Seconds host_delay_floor{o.analysis.rdma_host_delay_floor_s};
  fw::Seconds recovery{o.analysis.recovery_s}, flap_quiet{o.analysis.flap_quiet_s};
  fw::Seconds collective_interval{static_cast<double>(o.collective.schedule.interval_ns) * 1e-9};
  fw::Seconds escalation_timeout{o.escalation.probe_timeout_ms * 1e-3};
  fw::Seconds timeout_floor{o.planner.probe_timeout_floor_ms * 1e-3};
  std::string log_level = "info";
  std::string config;

  fw::ConfigBinding binding;
  binding.Bind("grpc-listen", &o.grpc_listen);
  binding.Bind("http-listen", &o.http_listen);
  binding.Bind("fabric-map", &o.fabric_map);
  binding.Bind("state-dir", &o.state_dir);
  binding.Bind("tick", &tick);
  binding.Bind("heartbeat-timeout", &hb_timeout);
  binding.Bind("heartbeat-grace-max", &hb_grace);
  binding.Bind("log-level", &log_level);
  binding.Bind("bandwidth-interval", &bw_interval);
  binding.Bind("latency-floor", &latency_floor);
  binding.Bind("collective-interval", &collective_interval);
  binding.Bind("escalation-probe-timeout", &escalation_timeout);
  binding.Bind("probe-timeout-floor", &timeout_floor);
  binding.Bind("grpc-queues", &o.grpc_queues);
  fw::tls::TlsFiles tls_files;
  std::string web_config;
  fw::tls::BindTlsConfig(binding, &tls_files);
  binding.Bind("web-config", &web_config);
  fw::aggregator::BindClientLimits(binding, &o.limits);

  if (!fw::LoadConfigFromArgs(binding, argc, argv, "fabricwatch-aggregator")) return 3;
  auto duration = fw::DurationSetter;

  CLI::App app{
      "fabricwatch-aggregator: collects every agent's stream, localizes fabric problems, "
      "and serves metrics and a JSON API."};
  app.add_option("--config", config, "YAML file whose keys are these flags' names");
  app.add_option("--grpc-listen", o.grpc_listen, "gRPC listen address")->capture_default_str();
  app.add_option("--http-listen", o.http_listen, "HTTP listen address")->capture_default_str();
  app.add_option("--fabric-map", o.fabric_map, "fabric map YAML (switches, links, hosts)");
  app.add_option("--state-dir", o.state_dir, "directory for findings history and ingest state");
  app.add_option_function<std::string>("--tick", duration(&tick), "analysis period (default 1s)");
  app.add_option_function<std::string>("--heartbeat-timeout", duration(&hb_timeout),
                                       "mark an agent down after this much silence (default 15s)");
  app.add_option_function<std::string>(
      "--heartbeat-grace-max", duration(&hb_grace),
      "while the aggregator reads heartbeats late, or many agents fall silent at once, wait up "
      "to this much longer before marking agents down (default 105s)");
  app.add_option_function<std::string>("--bandwidth-interval", duration(&bw_interval),
                                       "at least this long between bandwidth bursts to one peer "
                                       "(default 300s)");
  app.add_option_function<std::string>("--latency-floor", duration(&latency_floor),
                                       "a probe counts as slow only if this much above its "
                                       "baseline; set it above the hosts' scheduling jitter "
                                       "(default 20us)");
  app.add_option_function<std::string>("--collective-interval", duration(&collective_interval),
                                       "each collective probe group runs once per this period; "
                                       "0 starts none (default 300s)");
  app.add_option_function<std::string>(
      "--escalation-probe-timeout", duration(&escalation_timeout),
      "an escalated pair's UDP probes are lost after this long without an echo (at most 60s; "
      "0: the agents' own 1s) (default 0)");
  app.add_option_function<std::string>(
      "--probe-timeout-floor", duration(&timeout_floor),
      "agents' UDP probe timeouts follow each flow's round trip down to this floor, so a lost "
      "probe is reported within it instead of the fixed timeout (at most 60s; 0: fixed) "
      "(default 200ms)");
  app.add_option(
         "--grpc-queues", o.grpc_queues,
         "gRPC completion queues, a thread each; 0: 1 for a fabric map of up to 5,000 nodes, "
         "else 4 (default 0)")
      ->check(CLI::Range(0, fw::aggregator::GrpcServer::kMaxCompletionQueues));
  app.add_option("--log-level", log_level, "trace|debug|info|warn|error")->capture_default_str();
  fw::tls::AddTlsFlags(app, &tls_files, "the aggregator (it must name the host agents dial)");
  app.add_option("--web-config,--web-config-file", web_config,
                 "HTTP TLS and basic auth, in the Prometheus exporter-toolkit web config format");
  fw::aggregator::AddClientLimitFlags(app, &o.limits);
  std::string port_file;
  app.add_option("--port-file", port_file,
                 "write the bound ports as JSON here once listening (for tests and scripts)");
  app.add_flag("--record-test-batches", o.record_test_batches,
               "test only: remember the ids of numbered test batches")
      ->group("");
  // Test only: a loaded build host delays healthy hosts' RDMA completions by a millisecond or more.
  app.add_option_function<std::string>("--test-rdma-host-delay-floor", duration(&host_delay_floor),
                                       "test only: rdma_host_delay_floor_s (default 1ms)")
      ->group("");
  // Test only: the namespace findings tests shorten how long a finding waits before it resolves,
  // so that each fault's resolution costs seconds, not the production default's half minute.
  app.add_option_function<std::string>("--test-recovery", duration(&recovery),
                                       "test only: an element stays good this long before its "
                                       "finding resolves (default 30s)")
      ->group("");
  app.add_option_function<std::string>("--test-flap-quiet", duration(&flap_quiet),
                                       "test only: a flapping element resolves after this long "
                                       "without a toggle (default 60s)")
      ->group("");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 3;
  }
  o.tick_s = tick.value > 0 ? tick.value : 1;
  o.heartbeat_timeout_s = hb_timeout.value;
  o.heartbeat_grace_max_s = hb_grace.value;
  o.analysis.latency_floor_s = latency_floor.value;
  o.analysis.rdma_host_delay_floor_s = host_delay_floor.value;
  o.analysis.recovery_s = std::clamp(recovery.value, 1.0, 3600.0);
  o.analysis.flap_quiet_s = std::clamp(flap_quiet.value, 1.0, 3600.0);
  o.collective.schedule.interval_ns =
      static_cast<int64_t>(std::clamp(collective_interval.value, 0.0, 86400.0) * 1e9);
  o.planner.bw_interval_s = static_cast<uint32_t>(std::clamp(bw_interval.value, 1.0, 86400.0));
  // Whole milliseconds, at least 1 when set: 0 is the agents' default.
  o.escalation.probe_timeout_ms =
      escalation_timeout.value > 0 ? static_cast<uint32_t>(std::clamp(
                                         std::round(escalation_timeout.value * 1e3), 1.0, 60000.0))
                                   : 0;
  o.planner.probe_timeout_floor_ms =
      timeout_floor.value > 0 ? static_cast<uint32_t>(std::clamp(std::round(timeout_floor.value * 1e3),
                                                                 1.0, 60000.0))
                              : 0;

  fw::InitLogging("aggregator", log_level);
  fw::BlockTerminationSignals();
  fw::tls::ResolveCommandLinePrecedence(app, &tls_files);
  auto tls = fw::tls::LoadTlsFiles(tls_files);
  if (!tls.ok()) {
    spdlog::critical("msg=\"cannot start\" error=\"{}\"", tls.status().message());
    return 3;
  }
  o.tls = std::move(*tls);
  fw::tls::LogTransportSecurity("aggregator", o.tls);
  if (!web_config.empty()) {
    auto web = fw::http::LoadWebConfigFile(web_config);
    if (!web.ok()) {
      spdlog::critical("msg=\"cannot start\" error=\"{}\"", web.status().message());
      return 3;
    }
    o.web = std::move(*web);
  }

  fw::aggregator::Aggregator agg(o);
  fw::Status st = agg.Start();
  if (!st.ok()) {
    spdlog::critical("msg=\"cannot start\" error=\"{}\"", st.message());
    return 3;
  }
  if (!port_file.empty() &&
      !fw::WritePortFile(port_file, "{\"grpc_port\": " + std::to_string(agg.grpc_port()) +
                                        ", \"http_port\": " + std::to_string(agg.http_port()) +
                                        "}\n")) {
    spdlog::critical("msg=\"cannot write port file\" file={}", port_file);
    return 3;
  }
  // Every listener accepts now (Start() returned): READY=1 lets units ordered after this one
  // start. The watchdog is fed while this daemon's own /healthz answers over loopback, i.e. while
  // the HTTP workers that Prometheus and the probes' peers depend on still serve.
  const std::string status = "serving: gRPC port " + std::to_string(agg.grpc_port()) +
                             ", HTTP port " + std::to_string(agg.http_port());
  int sig =
      fw::RunAsNotifyService(status, [&](int timeout_ms) { return agg.HttpHealthy(timeout_ms); });
  spdlog::info("msg=\"shutting down\" signal={}", sig);
  agg.Stop();
  return 0;
}
