// fabricwatch-aggregator: flags and config, then run until SIGTERM/SIGINT.
#include <signal.h>

#include <CLI/CLI.hpp>
#include <cstdio>

#include "common/config.h"
#include "common/log.h"
#include "daemon/aggregator/aggregator.h"

int main(int argc, char** argv) {
  fw::aggregator::AggregatorOptions o;
  fw::Seconds tick{o.tick_s}, hb_timeout{o.heartbeat_timeout_s};
  std::string log_level = "info";
  std::string config;

  fw::ConfigBinding binding;
  binding.Bind("grpc-listen", &o.grpc_listen);
  binding.Bind("http-listen", &o.http_listen);
  binding.Bind("fabric-map", &o.fabric_map);
  binding.Bind("state-dir", &o.state_dir);
  binding.Bind("tick", &tick);
  binding.Bind("heartbeat-timeout", &hb_timeout);
  binding.Bind("log-level", &log_level);

  if (std::string path = fw::FindConfigFlag(argc, argv); !path.empty()) {
    fw::Status st = binding.LoadFile(path);
    if (!st.ok()) {
      std::fprintf(stderr, "fabricwatch-aggregator: %s\n", st.message().c_str());
      return 3;
    }
  }
  auto duration = [](fw::Seconds* s) {
    return [s](const std::string& v) {
      auto d = fw::ParseDurationSeconds(v);
      if (!d.ok()) throw CLI::ValidationError(d.status().message());
      s->value = *d;
    };
  };

  CLI::App app{"fabricwatch-aggregator: collects every agent's stream, localizes fabric problems, "
               "and serves metrics and a JSON API."};
  app.add_option("--config", config, "YAML file whose keys are these flags' names");
  app.add_option("--grpc-listen", o.grpc_listen, "gRPC listen address")->capture_default_str();
  app.add_option("--http-listen", o.http_listen, "HTTP listen address")->capture_default_str();
  app.add_option("--fabric-map", o.fabric_map, "fabric map YAML (switches, links, hosts)");
  app.add_option("--state-dir", o.state_dir, "directory for findings history and ingest state");
  app.add_option_function<std::string>("--tick", duration(&tick), "analysis period (default 1s)");
  app.add_option_function<std::string>("--heartbeat-timeout", duration(&hb_timeout),
                                       "mark an agent down after this much silence (default 15s)");
  app.add_option("--log-level", log_level, "trace|debug|info|warn|error")->capture_default_str();
  app.add_flag("--record-test-batches", o.record_test_batches,
               "test only: remember the ids of numbered test batches")
      ->group("");
  CLI11_PARSE(app, argc, argv);
  o.tick_s = tick.value > 0 ? tick.value : 1;
  o.heartbeat_timeout_s = hb_timeout.value;

  fw::InitLogging("aggregator", log_level);
  // Handle signals synchronously on this thread; every other thread inherits the blocked mask.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  signal(SIGPIPE, SIG_IGN);

  fw::aggregator::Aggregator agg(o);
  fw::Status st = agg.Start();
  if (!st.ok()) {
    spdlog::critical("msg=\"cannot start\" error=\"{}\"", st.message());
    return 3;
  }
  int sig = 0;
  sigwait(&set, &sig);
  spdlog::info("msg=\"shutting down\" signal={}", sig);
  agg.Stop();
  return 0;
}
