// fabricwatch: the operator CLI over the aggregator's HTTP API. Exit codes follow Nagios/NHC:
// 0 ok, 1 warning, 2 critical, 3 unknown or error.
#include <CLI/CLI.hpp>
#include <cstdlib>
#include <iostream>
#include <optional>

#include "daemon/cli/api_client.h"
#include "daemon/cli/collectives.h"
#include "daemon/cli/qualify.h"
#include "daemon/cli/verbs.h"
#include "daemon/cli/verdict.h"

int main(int argc, char** argv) {
  using namespace fw::cli;
  Options o;
  std::optional<std::string> api, aggregator;
  CLI::App app{
      "fabricwatch: ask the aggregator about the fabric.\n"
      "Exit codes: 0 ok, 1 warning, 2 critical, 3 unknown/error (unreachable API, HTTP error, "
      "bad JSON, unknown node)."};
  app.add_option("--api", api,
                 "the aggregator's HTTP API, HOST:PORT or https://HOST:PORT (default: "
                 "$FABRICWATCH_API, else " +
                     std::string(kDefaultApi) + ")");
  app.add_option("--aggregator", aggregator,
                 "deprecated alias of --api (the agent's --aggregator is gRPC)");
  app.add_option("--format", o.format, "text|json")
      ->check(CLI::IsMember({"text", "json"}))
      ->capture_default_str();
  app.add_option("--timeout-ms", o.timeout_ms, "HTTP timeout per request")
      ->check(CLI::Range(1, 600000))
      ->capture_default_str();
  std::string user, password_file, tls_ca, tls_cert, tls_key;
  app.add_option("--user", user,
                 "HTTP basic-auth user for an aggregator whose web config has users (qualify "
                 "needs it there); the password from --password-file or $" +
                     std::string(kPasswordEnv));
  app.add_option("--password-file", password_file,
                 "file whose first line is the --user password (never give it as an argument)");
  app.add_option("--tls-ca", tls_ca,
                 "CA file that verifies an https:// API (default: the system's CA certificates)");
  app.add_option("--tls-cert", tls_cert,
                 "client certificate for an https:// API that asks for one (with --tls-key)");
  app.add_option("--tls-key", tls_key, "the --tls-cert private key");
  app.require_subcommand(1);
  auto* status = app.add_subcommand("status", "fleet summary and overall verdict");
  auto* nodes = app.add_subcommand("nodes", "agents, their health and inventory");
  bool all = false;
  auto* findings = app.add_subcommand("findings", "active findings (--all adds resolved ones)");
  findings->add_flag("--all", all, "include resolved findings");
  auto* links = app.add_subcommand("links", "fabric links and their state");
  std::string src, dst;
  auto* pairs = app.add_subcommand("pairs", "per-pair probe statistics");
  pairs->add_option("--src", src, "only pairs from this node");
  pairs->add_option("--dst", dst, "only pairs to this node");
  std::string topo_node;
  auto* topo = app.add_subcommand(
      "topo", "a node's GPU-NIC affinity matrix and PCIe link state, verdict by its findings");
  topo->add_option("NODE", topo_node, "node name as `fabricwatch nodes` lists it")->required();
  QualifyArgs qa;
  std::string q_nodes, q_nodes_file;
  size_t q_max_nodes = 4096;
  bool q_quick = false, q_full = false;
  auto* qualify = app.add_subcommand(
      "qualify",
      "qualify nodes before a job (docs/qualify.md): exit 0 pass, 1 warn, 2 fail, "
      "3 could not qualify (aggregator unreachable, timeout before the verdicts)");
  qualify->add_option("--nodes", q_nodes, "comma list or Slurm hostlist, e.g. gpu[001-016,020]");
  qualify->add_option("--nodes-file", q_nodes_file, "hostlists, one or more a line; # comments");
  qualify->add_option("--profile", qa.profile, "threshold profile (default: the aggregator's)");
  qualify->add_option("--timeout", qa.timeout_s, "seconds for the whole suite, queueing included")
      ->check(CLI::Range(1.0, 590.0))
      ->capture_default_str();
  auto* quick = qualify->add_flag("--quick", q_quick, "the short suite (default)");
  qualify->add_flag("--full", q_full, "the long suite (more probes per pair)")->excludes(quick);
  qualify->add_option("--verdict-for", qa.verdict_for,
                      "exit with this node's verdict only (for a Slurm prolog on each node)");
  qualify->add_option("--job", qa.job,
                      "the scheduler's job id: requests of one job for the same set share a run");
  qualify->add_option("--max-nodes", q_max_nodes, "refuse a set larger than this")
      ->check(CLI::Range(size_t{1}, size_t{65536}))
      ->capture_default_str();
  std::string c_nodes;
  auto* collectives = app.add_subcommand(
      "collectives",
      "pause or resume collective probes on nodes (a scheduler's prolog and epilog)");
  collectives->require_subcommand(1);
  auto* c_pause = collectives->add_subcommand(
      "pause", "start no new collective probe group with these nodes until they are resumed");
  auto* c_resume = collectives->add_subcommand("resume", "let collective probes use these nodes");
  for (auto* sub : {c_pause, c_resume}) {
    sub->add_option("--nodes", c_nodes, "comma list or Slurm hostlist, e.g. gpu[001-016,020]")
        ->required();
    sub->fallthrough();
  }
  for (auto* sub : {status, nodes, findings, links, pairs, topo, qualify, collectives}) {
    sub->fallthrough();
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? 0 : kUnknown;
  }

  std::string note;
  auto address = ResolveApiAddress(api, aggregator, std::getenv(kApiEnv), &note);
  if (!note.empty()) std::cerr << note << "\n";
  if (!address.ok()) {
    std::cerr << "fabricwatch: " << address.status().message() << "\n";
    return kUnknown;
  }
  o.api = address->address;
  if (fw::Status st = ConfigureTls(*address, tls_ca, tls_cert, tls_key, &o); !st.ok()) {
    std::cerr << "fabricwatch: " << st.message() << "\n";
    return kUnknown;
  }
  auto auth = BasicAuthHeader(user, password_file, std::getenv(kPasswordEnv));
  if (!auth.ok()) {
    std::cerr << "fabricwatch: " << auth.status().message() << "\n";
    return kUnknown;
  }
  if (!auth->empty()) o.web.headers.push_back(std::move(*auth));
  if (const std::string w = PlainCredentialsWarning(o); !w.empty()) std::cerr << w << "\n";

  try {
    if (*status) return RunStatus(o, std::cout, std::cerr);
    if (*nodes) return RunNodes(o, std::cout, std::cerr);
    if (*findings) return RunFindings(o, all, std::cout, std::cerr);
    if (*links) return RunLinks(o, std::cout, std::cerr);
    if (*pairs) return RunPairs(o, src, dst, std::cout, std::cerr);
    if (*topo) return RunTopo(o, topo_node, std::cout, std::cerr);
    if (*collectives) {
      auto set = ResolveQualifyNodes(c_nodes, "", kMaxCollectiveNodes);
      if (!set.ok()) {
        std::cerr << "fabricwatch: bad --nodes: " << set.status().message() << "\n";
        return kUnknown;
      }
      return RunCollectivesPause(o, c_pause->parsed(), *set, std::cout, std::cerr);
    }
    if (*qualify) {
      auto set = ResolveQualifyNodes(q_nodes, q_nodes_file, q_max_nodes);
      if (!set.ok()) {
        std::cerr << "fabricwatch: could not qualify: " << set.status().message() << "\n";
        return kUnknown;
      }
      qa.nodes = std::move(*set);
      qa.suite = q_full ? "full" : "quick";
      return RunQualify(o, qa, std::cout, std::cerr);
    }
  } catch (const nlohmann::json::exception& e) {
    // The renderers tolerate missing fields; this is a document of an unexpected shape.
    std::cerr << "fabricwatch: the aggregator at " << o.api
              << " answered JSON of an unexpected shape: " << e.what() << "\n";
    return kUnknown;
  }
  return kUnknown;
}
