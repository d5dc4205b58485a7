// Bridges the agent's flags to the node-checks library's one-shot check, and drains the node in
// Slurm on a critical result when the health-check flags ask for it.
#include "daemon/agent/check_main.h"

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <iostream>
#include <nlohmann/json.hpp>

#include "daemon/agent/node/check_command.h"
#include "common/http/http_client.h"

extern char** environ;

namespace fw::agent {
namespace {

CheckOptions ToCheckOptions(const AgentOptions& options, const std::string& format) {
  CheckOptions co;
  co.sysfs_root = options.sysfs_root;
  co.hwloc_xml = options.hwloc_xml;
  co.profile = options.profile;
  co.format = format;
  co.node_name = options.node_name;
  co.xmit_wait_tick_bytes = options.xmit_wait_tick_bytes;
  co.counter_interval = std::chrono::milliseconds(
      static_cast<int64_t>(std::max(0.0, options.check_counter_interval_s) * 1000));
  return co;
}

std::string ShortHostname() {
  char buf[256] = {};
  if (gethostname(buf, sizeof buf - 1) != 0) return "";
  std::string h = buf;
  return h.substr(0, h.find('.'));
}

// Active critical findings the aggregator locates on `node`; appends their summaries.
void AddAggregatorFindings(const HealthCheckOptions& hc, const std::string& node,
                           std::vector<std::string>* summaries, std::ostream& err) {
  auto r = http::Get(hc.api, "/api/v1/findings?active=true", hc.api_timeout_ms);
  if (!r.ok() || r->status != 200) {
    err << "fabricwatch-agent check: the aggregator's findings at " << hc.api << " were not read ("
        << (r.ok() ? "HTTP " + std::to_string(r->status) : r.status().message())
        << "); judging by the local checks only\n";
    return;
  }
  auto j = nlohmann::json::parse(r->body, nullptr, false);
  if (!j.is_array()) {
    err << "fabricwatch-agent check: " << hc.api << " answered no findings array; ignored\n";
    return;
  }
  for (const auto& f : j) {
    if (!f.is_object() || f.value("severity", "") != "critical") continue;
    const auto loc = f.value("location", nlohmann::json::object());
    if (!loc.is_object() || loc.value("node", "") != node) continue;
    summaries->push_back(f.value("summary", f.value("kind", "critical finding")));
  }
}

// Runs `argv` (argv[0] looked up in PATH) and waits; returns its exit status or -1, with `why`.
int RunProgram(const std::vector<std::string>& argv, std::string* why) {
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = 0;
  const int rc = posix_spawnp(&pid, args[0], nullptr, nullptr, args.data(), environ);
  if (rc != 0) {
    *why = "cannot start " + argv[0] + ": " + std::strerror(rc);
    return -1;
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) {
      *why = std::string("waitpid: ") + std::strerror(errno);
      return -1;
    }
  }
  if (!WIFEXITED(status)) {
    *why = argv[0] + " ended by signal " + std::to_string(WTERMSIG(status));
    return -1;
  }
  return WEXITSTATUS(status);
}

}  // namespace

void AddHealthCheckFlags(CLI::App* check, HealthCheckOptions* hc) {
  check->add_flag("--drain-on-critical", hc->drain,
                  "Slurm HealthCheckProgram mode: on a critical result, drain this node with "
                  "`scontrol update ... State=DRAIN Reason=...` (docs/slurm.md)");
  check->add_option("--slurm-node", hc->slurm_node,
                    "this node's Slurm name (default: --node-name, else the short hostname)");
  check->add_option("--scontrol", hc->scontrol, "the scontrol program")->capture_default_str();
  check->add_option("--api", hc->api,
                    "the aggregator's HTTP API HOST:PORT: its critical findings on this node "
                    "count too");
}

std::string DrainReason(const std::vector<std::string>& critical_summaries, size_t max_len) {
  std::string r = "fabricwatch: ";
  std::string first = critical_summaries.empty() ? "critical" : critical_summaries.front();
  for (char& c : first) {
    // scontrol takes the reason as one argument, but '=' and quotes confuse people who copy it
    // into a shell, and control characters break `sinfo -R`'s table.
    if (c == '"' || c == '\'' || c == '=' || static_cast<unsigned char>(c) < 0x20) c = ' ';
  }
  r += first;
  const std::string more = critical_summaries.size() > 1
                               ? " (+" + std::to_string(critical_summaries.size() - 1) + " more)"
                               : "";
  if (r.size() + more.size() > max_len) {
    r.resize(max_len > more.size() + 3 ? max_len - more.size() - 3 : 0);
    r += "...";
  }
  return r + more;
}

int RunCheckCommand(const AgentOptions& options, const std::string& format, std::ostream& out) {
  return RunCheck(ToCheckOptions(options, format), out);
}

int RunCheckCommand(const AgentOptions& options, const std::string& format,
                    const HealthCheckOptions& hc, std::ostream& out, std::ostream& err) {
  if (!hc.drain && hc.api.empty()) return RunCheckCommand(options, format, out);
  const CheckOptions co = ToCheckOptions(options, format);
  auto result = CheckNode(co, RealClock::Get());
  if (!result.ok()) {
    // Unknown is not critical: a node is never drained because the check itself failed.
    err << "fabricwatch-agent check: " << result.status().ToString() << "; not draining\n";
    return 3;
  }
  if (format == "json") {
    out << CheckResultToJson(*result).dump(2) << "\n";
  } else {
    out << CheckResultToText(*result);
  }
  int code = ExitCodeForFindings(result->findings);
  std::vector<std::string> critical;
  for (const Finding& f : result->findings) {
    if (f.severity == Severity::kCritical) critical.push_back(f.summary);
  }
  if (!hc.api.empty()) {
    const size_t local = critical.size();
    AddAggregatorFindings(hc, result->inventory.node, &critical, err);
    if (critical.size() > local) {
      err << "fabricwatch-agent check: " << critical.size() - local
          << " critical aggregator finding(s) on " << result->inventory.node << "\n";
      code = 2;
    }
  }
  if (code != 2 || !hc.drain) return code;
  std::string node = hc.slurm_node;
  if (node.empty()) node = options.node_name;
  if (node.empty()) node = ShortHostname();
  const std::string reason = DrainReason(critical);
  const std::vector<std::string> argv = {hc.scontrol, "update", "NodeName=" + node, "State=DRAIN",
                                         "Reason=" + reason};
  err << "fabricwatch-agent check: critical; draining: " << hc.scontrol
      << " update NodeName=" << node << " State=DRAIN Reason=\"" << reason << "\"\n";
  std::string why;
  const int rc = RunProgram(argv, &why);
  if (rc != 0) {
    err << "fabricwatch-agent check: drain failed: "
        << (rc < 0 ? why : hc.scontrol + " exited " + std::to_string(rc)) << "\n";
  }
  return code;
}

}  // namespace fw::agent
