// fw_sim: the fleet simulator. Streams a scenario (or the heartbeat benchmark) into a real
// aggregator over gRPC and reports ingest figures and the findings score.
#include <stdlib.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>

#include "common/log.h"
#include "tests/sim/run_report.h"
#include "tests/sim/scenario.h"
#include "tests/sim/sim_runner.h"

int main(int argc, char** argv) {
  std::string mode = "scenario", scenario_path, json_out, work_dir, write_map, log_level = "info";
  fw::sim::RunOptions o;
  double duration = 0;
  int agents = 1000;
  double seconds = 30;
  int pid = 0;
  bool check = false;

  CLI::App app{"fw_sim: simulated agents on a modeled fat-tree, streaming to a real aggregator"};
  app.add_option("--mode", mode, "scenario | heartbeat")
      ->check(CLI::IsMember({"scenario", "heartbeat"}))
      ->capture_default_str();
  app.add_option("--scenario", scenario_path, "scenario YAML (mode scenario)");
  app.add_option("--aggregator-bin", o.aggregator.bin,
                 "start this fabricwatch-aggregator on loopback (stopped by PID at the end)");
  app.add_option("--aggregator-args", o.aggregator.extra_args,
                 "extra flags for the started aggregator, space-separated");
  app.add_option("--tls-dir", o.aggregator.tls_dir,
                 "mTLS: ca.crt, server.{crt,key} (the started aggregator) and client.{crt,key} "
                 "(naming every simulated node; tests/tls/sim_certs.sh makes them)");
  app.add_option("--grpc", o.aggregator.grpc, "attach: the aggregator's gRPC host:port");
  app.add_option("--http", o.aggregator.http, "attach: the aggregator's HTTP host:port");
  app.add_option("--aggregator-pid", pid, "attach: its PID, for CPU and RSS figures");
  app.add_option("--work-dir", work_dir,
                 "fabric map, aggregator log and state go here (default: a temporary directory, "
                 "removed at exit)");
  app.add_option("--time-scale", o.time_scale, "simulated seconds per real second")
      ->check(CLI::Range(0.01, 1000.0))
      ->capture_default_str();
  app.add_option("--start-phase", o.start_phase_s,
                 "real seconds to wait after the fleet connects before the simulated clock "
                 "starts: the phase of the faults' starts against the aggregator's ticks")
      ->check(CLI::Range(0.0, 10.0))
      ->capture_default_str();
  app.add_option("--findings-poll", o.findings_poll_s,
                 "seconds between the scorer's reads of /api/v1/findings (a finding's time to "
                 "detect is read when a poll first sees it)")
      ->check(CLI::Range(0.02, 10.0))
      ->capture_default_str();
  app.add_option("--duration", duration, "override the scenario's duration (seconds)");
  double heartbeat = -1;
  std::string routing;
  app.add_option("--routing", routing, "override the scenario's routing")
      ->check(CLI::IsMember({"ecmp", "deterministic"}));
  app.add_option("--heartbeat", heartbeat,
                 "override the scenario's heartbeat period (seconds; 0: none while streaming)");
  app.add_option("--agents", agents, "mode heartbeat: concurrent streams")
      ->check(CLI::Range(1, 16000))
      ->capture_default_str();
  app.add_option("--seconds", seconds, "mode heartbeat: measured seconds")
      ->check(CLI::Range(1.0, 3600.0))
      ->capture_default_str();
  app.add_option("--agents-per-channel", o.agents_per_channel, "streams per HTTP/2 connection")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  app.add_option("--ports-per-agent", o.ports_per_agent,
                 "NIC ports each agent reports once after its Hello (0: none)")
      ->capture_default_str()
      ->check(CLI::Range(0, 64));
  app.add_option("--max-unacked", o.max_unacked_batches,
                 "per stream: no new batch while this many are unacknowledged")
      ->check(CLI::Range(1, 200))
      ->capture_default_str();
  app.add_option("--batch-seconds", o.batch_seconds,
                 "each agent sends its results every N simulated seconds, and at once when they "
                 "hold a lost probe or it has escalated flows; 0: as the aggregator's plans pace it "
                 "(ProbePlan.report_interval_ms)")
      ->check(CLI::Range(0, 10))
      ->capture_default_str();
  std::string delivery = "agent";
  app.add_option("--delivery", delivery,
                 "agent (results reach the aggregator when a real agent's would: answered after the "
                 "echo, lost after the flow's probe timeout from its plan, batched per report "
                 "interval or at most every 250 ms when urgent) or second (each simulated second's "
                 "results at the agent's slot within that second, the model before session 16)")
      ->check(CLI::IsMember({"agent", "second"}))
      ->capture_default_str();
  std::string encoding = "columns";
  app.add_option("--batch-encoding", encoding,
                 "columns (ProbeBatch.columns, as the agent sends) or results (one message each)")
      ->check(CLI::IsMember({"columns", "results"}))
      ->capture_default_str();
  app.add_option("--grace", o.grace_s, "seconds after a fault's end its findings still count")
      ->capture_default_str();
  app.add_option("--json-out", json_out, "write the JSON report here");
  app.add_option("--write-map", write_map, "only write the scenario's fabric map here, then exit");
  app.add_flag("--check", check, "exit 1 when the verdict has failures");
  app.add_option("--log-level", log_level, "trace|debug|info|warn|error")->capture_default_str();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 3;
  }
  fw::InitLogging("fw_sim", log_level);
  o.aggregator.pid = pid;
  if (!o.aggregator.tls_dir.empty()) {
    const std::string& d = o.aggregator.tls_dir;
    auto tls = fw::tls::LoadTlsFiles({d + "/client.crt", d + "/client.key", d + "/ca.crt", false});
    if (!tls.ok()) {
      std::fprintf(stderr, "fw_sim: --tls-dir: %s\n", tls.status().message().c_str());
      return 2;
    }
    o.aggregator.tls = std::move(*tls);
  }
  o.delivery = delivery == "second" ? fw::sim::RunOptions::Delivery::kSecond
                                    : fw::sim::RunOptions::Delivery::kAgent;
  o.batch_encoding =
      encoding == "results" ? fw::sim::BatchEncoding::kResults : fw::sim::BatchEncoding::kColumns;

  std::optional<fw::sim::Scenario> scenario;
  if (mode == "scenario") {
    if (scenario_path.empty()) {
      std::fprintf(stderr, "fw_sim: --scenario FILE is required in mode scenario\n");
      return 3;
    }
    auto s = fw::sim::LoadScenario(scenario_path);
    if (!s.ok()) {
      std::fprintf(stderr, "fw_sim: %s\n", s.status().message().c_str());
      return 3;
    }
    scenario = std::move(*s);
    if (heartbeat >= 0) scenario->heartbeat_s = heartbeat;
    if (!routing.empty()) scenario->topology.deterministic = routing == "deterministic";
    if (duration > 0) {
      scenario->duration_s = duration;
      for (auto& f : scenario->faults) f.end_s = std::min(f.end_s, duration);
    }
    if (!write_map.empty()) {
      auto tree = fw::sim::FatTree::Build(scenario->topology);
      if (!tree.ok()) {
        std::fprintf(stderr, "fw_sim: %s\n", tree.status().message().c_str());
        return 3;
      }
      std::ofstream out(write_map, std::ios::trunc);
      out << tree->FabricMapYaml();
      out.close();
      if (!out) {
        std::fprintf(stderr, "fw_sim: cannot write %s\n", write_map.c_str());
        return 3;
      }
      return 0;
    }
  }

  bool remove_work_dir = false;
  if (work_dir.empty()) {
    std::string tmpl = (std::filesystem::temp_directory_path() / "fw_sim.XXXXXX").string();
    if (mkdtemp(tmpl.data()) == nullptr) {
      std::fprintf(stderr, "fw_sim: mkdtemp %s: %s\n", tmpl.c_str(), std::strerror(errno));
      return 3;
    }
    work_dir = tmpl;
    remove_work_dir = true;
  } else {
    std::error_code ec;
    std::filesystem::create_directories(work_dir, ec);
    if (ec) {
      std::fprintf(stderr, "fw_sim: cannot create %s: %s\n", work_dir.c_str(),
                   ec.message().c_str());
      return 3;
    }
  }
  o.aggregator.work_dir = work_dir;

  auto report = mode == "scenario" ? fw::sim::RunScenario(*scenario, o)
                                   : fw::sim::RunHeartbeatBench(agents, seconds, o);
  if (remove_work_dir && (!report.ok() || (*report)["verdict"]["failures"].empty())) {
    std::error_code ec;
    std::filesystem::remove_all(work_dir, ec);
  } else if (remove_work_dir) {
    std::fprintf(stderr, "fw_sim: kept %s for inspection (the verdict has failures)\n",
                 work_dir.c_str());
  }
  if (!report.ok()) {
    std::fprintf(stderr, "fw_sim: %s\n", report.status().message().c_str());
    return 3;
  }
  std::cout << fw::sim::FormatReport(*report) << std::flush;
  if (!json_out.empty()) {
    std::ofstream out(json_out, std::ios::trunc);
    out << report->dump(2) << "\n";
    out.close();
    if (!out) {
      std::fprintf(stderr, "fw_sim: cannot write %s\n", json_out.c_str());
      return 3;
    }
  }
  bool failed = !(*report)["verdict"]["failures"].empty();
  return check && failed ? 1 : 0;
}
