// The qualification suite: agents, local checks, the dense mesh, recent findings; then verdicts.
#include "daemon/aggregator/qualify/suite.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <optional>
#include <set>
#include <thread>
#include <unordered_map>

#include "daemon/aggregator/analysis/robust_stats.h"
#include "daemon/aggregator/qualify/burst_schedule.h"

namespace fw::qualify {
namespace {

// Agents send their local checks every 60 s and on every change; a report a little older than
// that (one period plus transit) is still the latest the agent made.
constexpr double kFreshCheck_s = 65;
constexpr auto kPoll = std::chrono::milliseconds(100);
// The longest the mesh waits for the fleet's scheduled collective jobs on the set to end: a Gloo
// group of 1 MiB x 20 takes 1-3 s on the loaded test hosts.
constexpr double kQuietMax_s = 10;

std::string Seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", s);
  return buf;
}

class Run {
 public:
  Run(QualifyEnv& env, QualifyInputs& inputs, const Clock& clock, const SuiteRequest& req,
      const std::atomic<bool>& stop)
      : env_(env), inputs_(inputs), clock_(clock), req_(req), stop_(stop) {
    report_.id = req.id;
    report_.suite = req.suite.name;
    report_.profile = req.profile.name;
    report_.started_wall_ns = clock.WallNanos();
    for (const std::string& n : req.nodes) {
      index_[n] = report_.nodes.size();
      report_.nodes.push_back({n, Verdict::kPass, {}});
    }
  }

  QualifyReport Go() {
    const int64_t t0 = clock_.MonotonicNanos();
    Step("agents", [&] { return Agents(); });
    Step("local_checks", [&] { return LocalChecks(); });
    Step("mesh", [&] { return Mesh(); });
    Step("bandwidth", [&] { return Bandwidth(); });
    Step("rdma", [&] { return Rdma(); });
    Step("collective", [&] { return Collective(); });
    Step("findings", [&] { return Findings(); });
    env_.ResumeCollectives(paused_collectives_);
    if (report_.state == "done") PathClassMedians();
    report_.finished_wall_ns = clock_.WallNanos();
    report_.duration_s = static_cast<double>(clock_.MonotonicNanos() - t0) * 1e-9;
    Verdict worst = Verdict::kPass;
    for (const NodeResult& n : report_.nodes) worst = Worst(worst, n.verdict);
    for (const PairResult& p : report_.pairs) worst = Worst(worst, p.verdict);
    report_.exit_code = report_.state == "done" ? static_cast<int>(worst) : 3;
    return std::move(report_);
  }

 private:
  // A step returns its note; it sets timed_out_ when the deadline cut it short.
  template <typename Fn>
  void Step(const char* name, Fn fn) {
    if (report_.state != "done") {
      report_.steps.push_back({name, "skipped", 0, "after the " + report_.state});
      return;
    }
    const int64_t t0 = clock_.MonotonicNanos();
    skipped_ = false;
    std::string note = fn();
    StepResult s{name, "done", static_cast<double>(clock_.MonotonicNanos() - t0) * 1e-9, note};
    if (skipped_) s.state = "skipped";
    if (stop_) {
      s.state = "error";
      report_.state = "error";
      report_.note = "the aggregator is stopping";
    } else if (timed_out_) {
      s.state = "timeout";
      report_.state = "timeout";
      report_.note = "the timeout came during step " + std::string(name) + " (" + note + ")";
    }
    report_.steps.push_back(std::move(s));
  }

  void Skip(const char* name, std::string why) {
    report_.steps.push_back({name, "skipped", 0, std::move(why)});
  }

  NodeResult& NodeOf(const std::string& n) { return report_.nodes[index_.at(n)]; }

  void Mark(const std::string& node, Verdict v, std::string reason) {
    NodeResult& r = NodeOf(node);
    r.verdict = Worst(r.verdict, v);
    r.reasons.push_back(std::move(reason));
  }

  // Sleeps until `until_ns` (monotonic) or the deadline or a stop; false when cut short.
  bool SleepUntil(int64_t until_ns, const std::function<bool()>& done = nullptr) {
    while (true) {
      const int64_t now = clock_.MonotonicNanos();
      if (stop_) return false;
      if (now >= req_.deadline_ns) {
        timed_out_ = true;
        return false;
      }
      if (now >= until_ns || (done && done())) return true;
      std::this_thread::sleep_for(std::min<std::chrono::nanoseconds>(
          kPoll, std::chrono::nanoseconds(std::min(until_ns, req_.deadline_ns) - now)));
    }
  }

  std::string Agents() {
    size_t down = 0;
    const auto agents = env_.Agents(req_.nodes);
    for (size_t i = 0; i < req_.nodes.size(); ++i) {
      const NodeResult n{req_.nodes[i], Verdict::kPass, {}};
      const auto& a = agents.at(i);
      if (!a.known) {
        Mark(n.node, Verdict::kFail,
             "agent unknown: no fabricwatch agent has connected for " + n.node +
                 " since the aggregator started");
        ++down;
      } else if (!a.up) {
        Mark(n.node, Verdict::kFail,
             "agent down: last heard from " + Seconds(a.silent_s) + " s ago");
        ++down;
      } else {
        up_.push_back(n.node);
      }
    }
    return std::to_string(up_.size()) + " up, " + std::to_string(down) + " down or unknown";
  }

  std::string LocalChecks() {
    std::set<std::string> up(up_.begin(), up_.end());
    size_t stale = 0, flagged = 0;
    for (const std::string& n : up_) {
      const auto age = inputs_.CheckReportAge(n);
      if (!age) {
        Mark(n, Verdict::kWarn, "local checks: none received since the aggregator started");
        ++stale;
      } else if (*age > kFreshCheck_s) {
        Mark(n, Verdict::kWarn,
             "local checks: the latest is " + Seconds(*age) +
                 " s old (agents report at least every 60 s)");
        ++stale;
      }
    }
    for (const analysis::TrackedFinding& t : env_.ActiveFindings()) {
      const Finding& f = t.finding;
      if (!IsLocalCheckKind(f.kind) || !up.contains(f.location.node)) continue;
      Mark(f.location.node, f.severity == Severity::kCritical ? Verdict::kFail : Verdict::kWarn,
           "local check " + f.kind + " (" + SeverityName(f.severity) + "): " + f.summary);
      ++flagged;
    }
    return std::to_string(flagged) + " findings, " + std::to_string(stale) + " stale";
  }

  std::string Mesh() {
    if (up_.size() < 2) return "fewer than 2 nodes up: no pairs to probe";
    std::vector<aggregator::NodeId> ids;
    std::unordered_map<aggregator::NodeId, std::string> name_of;
    for (const std::string& n : up_) {
      ids.push_back(env_.IdOf(n));
      name_of[ids.back()] = n;
    }
    const std::vector<std::string> no_rdma = env_.RdmaUnavailable(up_);
    for (size_t i = 0; i < up_.size(); ++i) {
      if (i < no_rdma.size() && no_rdma[i].empty()) {
        rdma_up_.push_back(up_[i]);
      } else {
        no_rdma_.emplace_back(up_[i], i < no_rdma.size() ? no_rdma[i] : "not reported");
      }
    }
    const std::string quiet = QuietCollectives();
    if (timed_out_ || stop_) return quiet;
    auto collection = inputs_.Collect(ids);
    env_.SetMesh(req_.id, up_, req_.suite);
    const size_t total = up_.size() * (up_.size() - 1);
    // The overlay is in force once most pairs report at the raised rate: a third of a second's
    // worth of it, which the ordinary plan (about one probe a second) cannot reach.
    const uint64_t raised =
        std::max<uint64_t>(2, static_cast<uint64_t>(req_.suite.rate_pps * req_.suite.flows / 3));
    const auto coverage = [&] {
      size_t seen = 0;
      for (const auto& [k, s] : collection->Snapshot()) seen += s.probes >= raised;
      return static_cast<double>(seen) >= req_.suite.ramp_coverage * static_cast<double>(total);
    };
    const int64_t ramp0 = clock_.MonotonicNanos();
    bool ok = SleepUntil(ramp0 + static_cast<int64_t>(req_.suite.ramp_max_s * 1e9), coverage);
    const double ramp_s = static_cast<double>(clock_.MonotonicNanos() - ramp0) * 1e-9;
    collection->Reset();
    const int64_t m0 = clock_.MonotonicNanos();
    if (ok) ok = SleepUntil(m0 + static_cast<int64_t>(req_.suite.measure_s * 0.5e9));
    collection->StartSecondHalf();
    if (ok) ok = SleepUntil(m0 + static_cast<int64_t>(req_.suite.measure_s * 1e9));
    const double measured_s = static_cast<double>(clock_.MonotonicNanos() - m0) * 1e-9;
    env_.SetMesh(req_.id, {}, req_.suite);
    auto pairs = collection->Snapshot();
    // The RDMA UD mesh ran in the same window (the overlay raises both); the rdma step judges it.
    rdma_pairs_ = collection->Snapshot(ProbeFamily::kRdma);
    rdma_measured_s_ = measured_s;
    name_of_ = name_of;
    inputs_.Release(collection);
    const std::string note = quiet + std::to_string(total) + " pairs at " +
                             Seconds(req_.suite.rate_pps * req_.suite.flows) +
                             " probes/s each; ramp " + Seconds(ramp_s) + " s, measured " +
                             Seconds(measured_s) + " of " + Seconds(req_.suite.measure_s) + " s";
    if (!ok) {
      for (const std::string& n : up_) {
        if (NodeOf(n).verdict == Verdict::kPass) {
          Mark(n, Verdict::kUnknown, "mesh not completed: " + note);
        }
      }
      return note;
    }
    Judge(pairs, name_of, measured_s);
    return note;
  }

  // The fleet's scheduled collective jobs load the paths the mesh judges: a Gloo group of these
  // nodes (the stage starts its first groups as soon as agents connect) raised every pair's RTT
  // p99 to 5-20 ms in the first run after connect on the namespace fabric. The schedule is paused
  // on the set for the whole suite (resumed at its end, except where something else paused it),
  // and the mesh waits up to kQuietMax_s for the jobs in flight to end. Returns the note's prefix.
  std::string QuietCollectives() {
    paused_collectives_ = env_.PauseCollectives(up_);
    const int64_t t0 = clock_.MonotonicNanos();
    const auto quiet = [&] { return !env_.CollectivesRunningOn(up_); };
    if (quiet()) return "";
    SleepUntil(t0 + static_cast<int64_t>(kQuietMax_s * 1e9), quiet);
    const double waited = static_cast<double>(clock_.MonotonicNanos() - t0) * 1e-9;
    if (timed_out_ || stop_) return "waited " + Seconds(waited) + " s for scheduled collective jobs";
    return quiet() ? "waited " + Seconds(waited) + " s for a scheduled collective job to end; "
                   : "a scheduled collective job still ran after " + Seconds(waited) +
                         " s, measured beside it; ";
  }

  void Judge(const std::map<std::pair<aggregator::NodeId, aggregator::NodeId>, PairSamples>& pairs,
             const std::unordered_map<aggregator::NodeId, std::string>& name_of,
             double measured_s) {
    MetricSpec rtt;
    rtt.label = fam_.label + "RTT p99";
    // The spread below which RTT differences are noise: scheduling on a shared host moves a p99
    // by a hundred microseconds or so, and a difference under a twentieth of the profile's warn
    // limit is finer than the profile resolves ("generic": 250 us; the DGX profiles: 100 us). An
    // outlier stands min_z (3.5) such spreads above the median.
    rtt.noise_floor = std::max(100e-6, req_.profile.rtt_p99_warn_s / 20);
    rtt.warn_ratio = 2.0;
    rtt.fail_ratio = 3.0;
    rtt.abs_warn = req_.profile.rtt_p99_warn_s;
    rtt.abs_fail = req_.profile.rtt_p99_fail_s;
    MetricSpec loss;
    loss.label = fam_.label + "loss";
    loss.unit = MetricSpec::Unit::kRatio;
    loss.noise_floor = 0.01;  // a lost probe in a hundred is not an outlier by itself
    loss.warn_ratio = 2.0;
    loss.fail_ratio = 3.0;
    loss.abs_warn = req_.profile.loss_warn;
    loss.abs_fail = req_.profile.loss_fail;

    struct NodeAgg {
      std::vector<double> p99s, losses;
      size_t peers = 0;
    };
    std::map<std::string, NodeAgg> agg;
    // Pairs are judged unordered, by the better of their two directions: a round trip crosses the
    // same links either way, so a link fault shows in both, while a busy prober inflates one.
    struct Both {
      double p99 = INFINITY, loss = INFINITY;
      uint64_t probes = 0, lost = 0;
    };
    std::map<std::pair<std::string, std::string>, Both> unordered;
    for (const auto& [key, s] : pairs) {
      const std::string& a = name_of.at(key.first);
      const std::string& b = name_of.at(key.second);
      if (s.probes == 0) {
        PairResult p{a,
                     b,
                     Verdict::kFail,
                     {"no " + fam_.label + "probe results from " + a + " to " + b + " in " +
                      Seconds(measured_s) + " s: unreachable, or " + a + "'s agent is not probing"}};
        unreached_.push_back(std::move(p));
        continue;
      }
      const double p99 = SustainedRttP99(s);
      const double l = static_cast<double>(s.lost) / static_cast<double>(s.probes);
      Both& u = unordered[a < b ? std::make_pair(a, b) : std::make_pair(b, a)];
      if (std::isfinite(p99)) u.p99 = std::min(u.p99, p99);
      u.loss = std::min(u.loss, l);
      u.probes += s.probes;
      u.lost += s.lost;
      for (const std::string* n : {&a, &b}) {
        NodeAgg& g = agg[*n];
        if (std::isfinite(p99)) g.p99s.push_back(p99);
        g.losses.push_back(l);
      }
      ++agg[a].peers;
    }
    std::vector<Sample> pair_rtt, pair_loss;
    std::vector<std::pair<std::string, std::string>> pair_names;
    for (const auto& [ab, u] : unordered) {
      pair_names.push_back(ab);
      const std::string subject = ab.first + "<->" + ab.second;
      pair_rtt.push_back({subject, std::isfinite(u.p99) ? u.p99 : NAN, "(better direction)"});
      pair_loss.push_back({subject, u.loss,
                           "(better direction; " + std::to_string(u.lost) + " of " +
                               std::to_string(u.probes) + " both ways)"});
    }
    // Per node: the medians of its pairs' p99 and loss (both directions), so that one bad pair
    // stays a pair verdict and a node bad toward all its peers stands out.
    std::vector<Sample> node_rtt, node_loss;
    for (auto& [n, g] : agg) {
      const double med = g.p99s.empty() ? NAN : analysis::Median(g.p99s);
      const std::string ctx = "to " + std::to_string(g.peers) + " peers";
      node_rtt.push_back({n, med, ctx});
      node_loss.push_back({n, analysis::Median(g.losses), ctx});
    }
    for (const auto* set : {&node_rtt, &node_loss}) {
      const MetricSpec& spec = set == &node_rtt ? rtt : loss;
      for (const Judgement& j : JudgeSet(spec, *set)) {
        if (j.verdict == Verdict::kPass) continue;
        for (const std::string& r : j.reasons) Mark(j.subject, j.verdict, r);
      }
    }
    JudgeAgainstHistory(unordered, rtt);
    // Pairs: judged among all pairs; a pair with a failed end is that node's problem already.
    std::map<std::pair<std::string, std::string>, PairResult> by_pair;
    for (const auto* set : {&pair_rtt, &pair_loss}) {
      const MetricSpec& spec = set == &pair_rtt ? rtt : loss;
      const auto js = JudgeSet(spec, *set);
      for (size_t i = 0; i < js.size(); ++i) {
        if (js[i].verdict == Verdict::kPass) continue;
        const auto& [a, b] = pair_names[i];
        PairResult& p = by_pair[{a, b}];
        p.src = a;
        p.dst = b;
        p.verdict = Worst(p.verdict, js[i].verdict);
        for (const std::string& r : js[i].reasons) p.reasons.push_back(r);
      }
    }
    for (PairResult& p : unreached_) by_pair[{p.src, p.dst}] = std::move(p);
    unreached_.clear();
    for (auto& [k, p] : by_pair) {
      if (NodeOf(p.src).verdict == Verdict::kFail || NodeOf(p.dst).verdict == Verdict::kFail) {
        continue;
      }
      report_.pairs.push_back(std::move(p));
    }
  }

  // The third threshold source: each node's median RTT p99 to its peers of one path class against
  // the fleet's recent healthy median for that class, so that a uniformly slow set still fails.
  // Keeps every measured pair's class for PathClassMedians().
  template <typename Unordered>
  void JudgeAgainstHistory(const Unordered& unordered, const MetricSpec& rtt) {
    std::map<std::string, std::map<std::string, std::vector<double>>> by_node;  // class -> p99s
    for (const auto& [ab, u] : unordered) {
      if (!std::isfinite(u.p99)) continue;
      const std::string cls = fam_.class_prefix + env_.PathClassOf(ab.first, ab.second);
      measured_.push_back({ab.first, ab.second, cls, u.p99});
      by_node[ab.first][cls].push_back(u.p99);
      by_node[ab.second][cls].push_back(u.p99);
    }
    if (req_.fleet_baseline.empty()) return;
    for (auto& [node, classes] : by_node) {
      for (auto& [cls, v] : classes) {
        auto b = req_.fleet_baseline.find(cls);
        if (b == req_.fleet_baseline.end() || b->second.rtt_p99_s <= 0) continue;
        // The lower median: a node is held to the history only when at least half of its peers
        // of the class are slow, so one bad peer (the other end's fault) does not flag it.
        std::sort(v.begin(), v.end());
        const double med = v[(v.size() - 1) / 2];
        const double base = b->second.rtt_p99_s;
        const double ratio = med / base;
        Verdict verdict = Verdict::kPass;
        // As within the set, an outlier stands min_z noise spreads above its reference: the
        // history of a quiet hour does not flag a busy host's scheduling jitter.
        if (med - base >= rtt.min_z * rtt.noise_floor) {
          if (ratio >= rtt.fail_ratio) {
            verdict = Verdict::kFail;
          } else if (ratio >= rtt.warn_ratio) {
            verdict = Verdict::kWarn;
          }
        }
        if (verdict == Verdict::kPass) continue;
        const std::string kind = FleetHistory::Describe(cls);
        const double limit = verdict == Verdict::kFail ? rtt.fail_ratio : rtt.warn_ratio;
        Mark(node, verdict,
             fam_.label + "RTT p99 to " + std::to_string(v.size()) + " " + kind + " peers " +
                 FormatValue(MetricSpec::Unit::kSeconds, med) + ", " + Times(ratio) +
                 " the fleet's history for " + kind + " paths (" +
                 FormatValue(MetricSpec::Unit::kSeconds, base) + ", the median of " +
                 std::to_string(b->second.runs) + " runs; " + VerdictName(verdict) + " at " +
                 Times(limit) + ")");
      }
    }
  }

  static std::string Times(double r) {
    char buf[32];
    std::snprintf(buf, sizeof buf, r >= 10 ? "%.0f" : "%.1f", r);
    return std::string(buf) + "\xc3\x97";  // U+00D7 MULTIPLICATION SIGN
  }

  // What this run adds to the fleet's history: per path class, the median RTT p99 of the measured
  // pairs whose both ends passed and which no pair verdict flagged.
  void PathClassMedians() {
    std::set<std::pair<std::string, std::string>> flagged;
    for (const PairResult& p : report_.pairs) {
      if (p.verdict != Verdict::kPass) {
        flagged.insert({p.src, p.dst});
        flagged.insert({p.dst, p.src});
      }
    }
    std::map<std::string, std::vector<double>> healthy;
    for (const Measured& m : measured_) {
      if (NodeOf(m.a).verdict != Verdict::kPass || NodeOf(m.b).verdict != Verdict::kPass ||
          flagged.contains({m.a, m.b})) {
        continue;
      }
      healthy[m.path_class].push_back(m.p99);
    }
    for (auto& [cls, v] : healthy) report_.path_classes[cls] = {analysis::Median(v), v.size()};
  }

  // Step 3: bandwidth bursts in rounds (burst_schedule.h), each round asked of its senders through
  // the plans and waited for before the next, so no NIC carries two bursts at once.
  std::string Bandwidth() {
    if (up_.size() < 2) return "fewer than 2 nodes up: no bursts";
    std::vector<Done> done;
    std::string note;
    if (!BurstRounds(up_, ProbeFamily::kIp, done, note)) {
      MarkUnfinished(up_, "bandwidth not completed: " + note);
      return note;
    }
    JudgeBursts(done);
    return note;
  }

  // Bursts cut short leave the nodes that had passed so far without a verdict, with the reason.
  void MarkUnfinished(const std::vector<std::string>& nodes, const std::string& reason) {
    for (const std::string& n : nodes) {
      if (NodeOf(n).verdict == Verdict::kPass) Mark(n, Verdict::kUnknown, reason);
    }
  }

  struct Done {
    Burst burst;
    std::optional<BurstSample> sample;
  };

  // Runs the rounds of `nodes`' bursts of one family (TCP through SetBursts, RDMA RC through
  // SetRdmaRcBursts) and collects their results into `done`; false when cut short.
  bool BurstRounds(const std::vector<std::string>& nodes, ProbeFamily family,
                   std::vector<Done>& done, std::string& note) {
    const bool full = req_.suite.name == "full";
    const bool rc = family == ProbeFamily::kRdma;
    const auto rounds = ScheduleBursts(nodes, full ? BurstPattern::kAllPairs : BurstPattern::kRing);
    std::vector<aggregator::NodeId> ids;
    for (const std::string& n : nodes) ids.push_back(env_.IdOf(n));
    auto collection = inputs_.Collect(ids);
    // Round ids: the run's hash in the high bits, so a run's rounds never match another run's;
    // RC rounds are numbered apart from the TCP ones.
    uint64_t base = 1469598103934665603ull;
    for (unsigned char c : req_.id) base = (base ^ c) * 1099511628211ull;
    base = (base << 16) | (1ull << 63);
    const int64_t t0 = clock_.MonotonicNanos();
    bool ok = true;
    size_t r = 0;
    auto ask = [&](const BurstRound& round_bursts, uint64_t round) {
      if (rc) {
        env_.SetRdmaRcBursts(req_.id, round_bursts, round, req_.suite);
      } else {
        env_.SetBursts(req_.id, round_bursts, round, req_.suite);
      }
    };
    for (; r < rounds.size() && ok; ++r) {
      const uint64_t round = base | ((rc ? 0x8000 : 0) + r + 1);
      ask(rounds[r], round);
      const auto all_in = [&] {
        const auto bursts = collection->Bursts(family);
        return std::all_of(rounds[r].begin(), rounds[r].end(),
                           [&](const Burst& b) { return Find(bursts, b, round).has_value(); });
      };
      const int64_t until =
          clock_.MonotonicNanos() +
          static_cast<int64_t>((req_.suite.bw_timeout_s + req_.suite.bw_round_slack_s) * 1e9);
      ok = SleepUntil(until, all_in);
      const auto bursts = collection->Bursts(family);
      for (const Burst& b : rounds[r]) done.push_back({b, Find(bursts, b, round)});
    }
    ask({}, 0);
    inputs_.Release(collection);
    const double took = static_cast<double>(clock_.MonotonicNanos() - t0) * 1e-9;
    note = std::string(rc ? "RDMA RC " : "") + (full ? "all-pairs" : "ring") + ": " +
           std::to_string(r) + " of " + std::to_string(rounds.size()) + " rounds, " +
           std::to_string(done.size()) + " bursts" +
           (rc ? std::string(" (the agents' RC burst size)")
               : " of " + FormatBytes(req_.suite.bw_bytes)) +
           " in " + Seconds(took) + " s";
    return ok;
  }

  // Step 4: the RDMA variants among the nodes whose agents announced RDMA ports: the RDMA UD
  // mesh (raised with the UDP one and measured in the same window) judged like the UDP mesh, and
  // RDMA RC write bursts in rounds like step 3's. Nodes without RDMA are skipped with a note.
  std::string Rdma() {
    std::string unavailable;
    for (size_t i = 0; i < no_rdma_.size(); ++i) {
      unavailable += (i ? "; " : "") + std::string("rdma unavailable on ") + no_rdma_[i].first +
                     " (" + no_rdma_[i].second + ")";
    }
    if (!no_rdma_.empty()) {
      unavailable += no_rdma_.size() == 1 ? ": skipped for it" : ": skipped for them";
    }
    if (rdma_up_.size() < 2) {
      skipped_ = true;
      const std::string few = "fewer than 2 nodes up with RDMA";
      return unavailable.empty() ? few : unavailable + "; " + few;
    }
    std::set<aggregator::NodeId> ids;
    for (const std::string& n : rdma_up_) ids.insert(env_.IdOf(n));
    Collection::PairMap ud;
    for (const auto& [k, v] : rdma_pairs_) {
      if (ids.contains(k.first) && ids.contains(k.second)) ud[k] = v;
    }
    fam_ = {"RDMA UD ", std::string(FleetHistory::kRdmaPrefix)};
    Judge(ud, name_of_, rdma_measured_s_);
    uint64_t probes = 0;
    for (const auto& [k, v] : ud) probes += v.probes;
    std::string note = std::to_string(ud.size()) + " RDMA UD pairs, " + std::to_string(probes) +
                       " probes in the mesh's " + Seconds(rdma_measured_s_) + " s";
    fam_ = {"RDMA RC ", std::string(FleetHistory::kRdmaPrefix)};
    std::vector<Done> done;
    std::string rc_note;
    if (BurstRounds(rdma_up_, ProbeFamily::kRdma, done, rc_note)) {
      JudgeBursts(done);
    } else {
      MarkUnfinished(rdma_up_, "RDMA RC bursts not completed: " + rc_note);
    }
    fam_ = {};
    note += "; " + rc_note;
    if (!unavailable.empty()) note += "; " + unavailable;
    return note;
  }

  // Step 5: one Gloo all-reduce over the nodes that are up, through the collective stage, waited
  // for within the time box. A failed or unanswered group fails the members named; the group's
  // bus bandwidth (its slowest member's) is judged against the profile and the fleet's last Gloo
  // group at the same size. The group's figure does not say which member is slow, so a low
  // figure flags every member (the collective stage's bisection finds the culprit in time).
  std::string Collective() {
    // Nodes an earlier step failed are left out: they would only stall or slow the group, whose
    // figure could then not tell the others apart.
    std::vector<std::string> members;
    for (const std::string& n : up_) {
      if (NodeOf(n).verdict != Verdict::kFail) members.push_back(n);
    }
    const size_t left_out = up_.size() - members.size();
    if (members.size() < 2) {
      skipped_ = true;
      return "fewer than 2 nodes up and not failed: no all-reduce";
    }
    const SuiteSpec& su = req_.suite;
    auto job = env_.StartAllReduce(members, su.allreduce_bytes, su.allreduce_iterations);
    if (!job.ok()) {
      skipped_ = true;
      return "not run: " + std::string(job.status().message()) +
             "; collective findings on these nodes count in the findings step";
    }
    std::optional<CollectiveOutcome> out;
    const int64_t t0 = clock_.MonotonicNanos();
    const bool ok = SleepUntil(t0 + static_cast<int64_t>(su.allreduce_wait_s * 1e9), [&] {
      out = env_.AllReduceOutcome(*job);
      return out.has_value();
    });
    if (!out) out = env_.AllReduceOutcome(*job);
    const double took = static_cast<double>(clock_.MonotonicNanos() - t0) * 1e-9;
    const std::string what =
        "Gloo all-reduce of " + FormatBytes(su.allreduce_bytes) + " x " +
        std::to_string(su.allreduce_iterations) + " over " + std::to_string(members.size()) +
        " nodes (job " + *job + ")" +
        (left_out ? ", " + std::to_string(left_out) + " failed nodes left out" : "");
    if (!out) {
      env_.EndAllReduce(*job);
      if (!ok) {  // the deadline or a stop: the step is cut short, not judged
        for (const std::string& n : members) {
          if (NodeOf(n).verdict == Verdict::kPass) {
            Mark(n, Verdict::kUnknown, "collective not completed: " + what);
          }
        }
        return what + ": no outcome in " + Seconds(took) + " s";
      }
      for (const std::string& n : members) {
        Mark(n, Verdict::kFail,
             what + ": no outcome within " + Seconds(su.allreduce_wait_s) + " s (group timed out)");
      }
      return what + ": timed out after " + Seconds(took) + " s";
    }
    // Agents without the Gloo backend answer "unknown backend": the step cannot run on this set.
    const bool no_gloo =
        !out->errors.empty() && std::all_of(out->errors.begin(), out->errors.end(), [](auto& e) {
          return e.second.find("unknown backend") != std::string::npos;
        });
    if (no_gloo) {
      skipped_ = true;
      return "not run: " + out->errors.front().first + "'s agent has no Gloo backend (" +
             out->errors.front().second + ")";
    }
    if (!out->errors.empty() || !out->missing.empty()) {
      for (const auto& [node, error] : out->errors) {
        if (index_.contains(node)) {
          Mark(node, Verdict::kFail, what + " failed on " + node + ": " + error);
        }
      }
      for (const std::string& node : out->missing) {
        if (index_.contains(node)) {
          Mark(node, Verdict::kFail, what + ": " + node + " did not answer (group timed out)");
        }
      }
      return what + ": failed, " + std::to_string(out->errors.size()) + " errors, " +
             std::to_string(out->missing.size()) + " without an answer";
    }
    const MetricSpec::Unit bps = MetricSpec::Unit::kBitsPerSecond;
    const double b = out->busbw_bps;
    std::string note = what + ": busbw " + FormatValue(bps, b) + " in " + Seconds(took) + " s";
    Verdict v = Verdict::kPass;
    std::string why;
    const QualifyProfile& p = req_.profile;
    if (p.allreduce_busbw_fail_bps > 0 && b < p.allreduce_busbw_fail_bps) {
      v = Verdict::kFail;
      why = "below profile " + p.name + "'s fail limit " +
            FormatValue(bps, p.allreduce_busbw_fail_bps);
    } else if (p.allreduce_busbw_warn_bps > 0 && b < p.allreduce_busbw_warn_bps) {
      v = Verdict::kWarn;
      why = "below profile " + p.name + "'s warn limit " +
            FormatValue(bps, p.allreduce_busbw_warn_bps);
    }
    // Against the fleet's last group: as for bursts, 3x (5x) below warns (fails).
    const double h = out->history_busbw_bps;
    if (h > 0) {
      note += " (fleet's last Gloo group: " + FormatValue(bps, h) + ")";
      const Verdict hv = b * 5 <= h ? Verdict::kFail : b * 3 <= h ? Verdict::kWarn : Verdict::kPass;
      if (hv != Verdict::kPass && Worst(v, hv) != v) {
        v = hv;
        why = Times(h / b) + " below the fleet's last Gloo group across nodes (" +
              FormatValue(bps, h) + "; " + VerdictName(hv) + " at " +
              (hv == Verdict::kFail ? "5" : "3") + "\xc3\x97)";
      }
    }
    if (v != Verdict::kPass) {
      for (const std::string& n : members) {
        Mark(n, v, what + ": busbw " + FormatValue(bps, b) + " of the set, " + why);
      }
    }
    return note;
  }

  static std::string FormatBytes(uint64_t b) {
    return b % (1u << 20) == 0 ? std::to_string(b >> 20) + " MiB" : std::to_string(b) + " bytes";
  }

  std::optional<BurstSample> Find(const std::map<BurstKey, BurstSample>& bursts, const Burst& b,
                                  uint64_t round) {
    auto it = bursts.find({env_.IdOf(b.src), env_.IdOf(b.dst), round});
    if (it == bursts.end()) return std::nullopt;
    return it->second;
  }

  template <typename DoneT>
  void JudgeBursts(const std::vector<DoneT>& done) {
    MetricSpec bw;
    bw.label = fam_.label + "goodput";
    const bool rc = !fam_.label.empty();
    bw.unit = MetricSpec::Unit::kBitsPerSecond;
    bw.higher_is_worse = false;
    // One burst of a few MiB over unshaped veth on a shared host swings 2x with CPU contention
    // (tests/fabric_e2e/fwe2e.py): spreads below 15% of the median are noise, and a path must be
    // 3x (5x) below the median to warn (fail).
    bw.relative_floor = 0.15;
    bw.warn_ratio = 3.0;
    bw.fail_ratio = 5.0;
    if (req_.profile.goodput_warn_bps > 0) bw.abs_warn = req_.profile.goodput_warn_bps;
    if (req_.profile.goodput_fail_bps > 0) bw.abs_fail = req_.profile.goodput_fail_bps;
    const double bound = static_cast<double>(req_.suite.bw_bytes) * 8 / req_.suite.bw_timeout_s;
    std::vector<Sample> pair_samples;
    std::vector<const DoneT*> pair_of;
    std::map<std::pair<std::string, std::string>, PairResult> by_pair;
    std::map<std::string, std::vector<double>> per_node;
    std::map<std::string, size_t> lost_of;  // bursts to or from the node that failed
    for (const DoneT& d : done) {
      const Burst& b = d.burst;
      auto add_pair = [&](Verdict v, std::string reason) {
        PairResult& p = by_pair[{b.src, b.dst}];
        p.src = b.src;
        p.dst = b.dst;
        p.verdict = Worst(p.verdict, v);
        p.reasons.push_back(std::move(reason));
      };
      if (!d.sample) {
        const std::string within =
            " within " + Seconds(req_.suite.bw_timeout_s + req_.suite.bw_round_slack_s) + " s: ";
        add_pair(Verdict::kWarn, rc ? "no RDMA RC write result from " + b.src + " to " + b.dst +
                                          within + "the burst failed (a broken connection) or the"
                                          " connection through the aggregator did not come up"
                                    : "no bandwidth result from " + b.src + " to " + b.dst +
                                          within + b.src +
                                          "'s agent did not run the burst (too old?)");
        continue;
      }
      double value = d.sample->goodput_bps;
      if (d.sample->lost) {
        // A burst cut off at its timeout moved less than its bytes in that time.
        value = bound;
        add_pair(Verdict::kFail, "burst of " + FormatBytes(req_.suite.bw_bytes) + " from " + b.src +
                                     " to " + b.dst + " failed or did not complete within " +
                                     Seconds(req_.suite.bw_timeout_s) + " s (goodput below " +
                                     FormatValue(bw.unit, bound) + ")");
      }
      if (d.sample->lost) {
        ++lost_of[b.src];
        ++lost_of[b.dst];
      }
      pair_samples.push_back({b.src + "->" + b.dst, value, "to " + b.dst});
      pair_of.push_back(&d);
      per_node[b.src].push_back(value);
      per_node[b.dst].push_back(value);
    }
    // A node's figure: its best burst when it had one or two (a ring: one sent, one received; a
    // slow node is slow both ways, its neighbours only once), else the median of its bursts.
    std::vector<Sample> node_samples;
    for (auto& [n, v] : per_node) {
      const bool best = v.size() <= 2;
      const double x = best ? *std::max_element(v.begin(), v.end()) : analysis::Median(v);
      node_samples.push_back({n, x,
                              std::string(best ? "best of " : "median of ") +
                                  std::to_string(v.size()) +
                                  (v.size() == 1 ? " burst" : " bursts")});
    }
    // A node none of whose bursts got through fails outright: with two such nodes in a small
    // set the MAD cannot single them out, and a neighbour keeps its other burst.
    for (const auto& [n, v] : per_node) {
      if (lost_of[n] < v.size()) continue;
      Mark(n, Verdict::kFail,
           "goodput: all " + std::to_string(v.size()) + " of its bursts failed or did not " +
               "complete within " + Seconds(req_.suite.bw_timeout_s) + " s (below " +
               FormatValue(bw.unit, bound) + ")");
    }
    for (const Judgement& j : JudgeSet(bw, node_samples)) {
      if (j.verdict == Verdict::kPass) continue;
      for (const std::string& reason : j.reasons) Mark(j.subject, j.verdict, reason);
    }
    const auto js = JudgeSet(bw, pair_samples);
    for (size_t i = 0; i < js.size(); ++i) {
      if (js[i].verdict == Verdict::kPass) continue;
      const Burst& b = pair_of[i]->burst;
      PairResult& p = by_pair[{b.src, b.dst}];
      p.src = b.src;
      p.dst = b.dst;
      p.verdict = Worst(p.verdict, js[i].verdict);
      for (const std::string& reason : js[i].reasons) p.reasons.push_back(reason);
    }
    for (auto& [k, p] : by_pair) {
      if (NodeOf(p.src).verdict == Verdict::kFail || NodeOf(p.dst).verdict == Verdict::kFail) {
        continue;
      }
      report_.pairs.push_back(std::move(p));
    }
  }

  std::string Findings() {
    std::set<std::string> in(req_.nodes.begin(), req_.nodes.end());
    size_t n = 0;
    for (const analysis::TrackedFinding& t : env_.ActiveFindings()) {
      const Finding& f = t.finding;
      if (IsLocalCheckKind(f.kind)) continue;  // judged in local_checks
      const Verdict v = f.severity == Severity::kCritical ? Verdict::kFail : Verdict::kWarn;
      const std::string reason = "active finding " + f.kind + " (" + SeverityName(f.severity) +
                                 ", " + t.element + "): " + f.summary;
      if (f.location.type == "pair") {
        const size_t tilde = f.location.id.find('~');
        if (tilde == std::string::npos) continue;
        const std::string a = f.location.id.substr(0, tilde), b = f.location.id.substr(tilde + 1);
        if (!in.contains(a) || !in.contains(b)) continue;
        if (NodeOf(a).verdict == Verdict::kFail || NodeOf(b).verdict == Verdict::kFail) continue;
        report_.pairs.push_back({a, b, v, {reason}});
        ++n;
      } else if (in.contains(f.location.node)) {
        Mark(f.location.node, v, reason);
        ++n;
      }
    }
    return std::to_string(n) + " active findings involve these nodes";
  }

  QualifyEnv& env_;
  bool skipped_ = false;  // the running step did not run (its note says why)
  QualifyInputs& inputs_;
  const Clock& clock_;
  const SuiteRequest& req_;
  const std::atomic<bool>& stop_;
  QualifyReport report_;
  std::unordered_map<std::string, size_t> index_;
  std::vector<std::string> up_;
  std::vector<PairResult> unreached_;
  struct Measured {
    std::string a, b, path_class;
    double p99 = 0;
  };
  std::vector<Measured> measured_;  // the mesh's unordered pairs with a p99
  // The probe family being judged: a prefix of its verdicts' labels ("RDMA UD ") and of its
  // history's path classes ("rdma_"); empty for the host stack's UDP and TCP probes.
  struct Family {
    std::string label, class_prefix;
  };
  Family fam_;
  std::vector<std::string> rdma_up_;  // up_ whose agents announced RDMA ports, in order
  std::vector<std::string> paused_collectives_;  // the schedule paused by this run, resumed at end
  std::vector<std::pair<std::string, std::string>> no_rdma_;  // the other up_, and why
  Collection::PairMap rdma_pairs_;    // the RDMA UD results of the mesh's window
  double rdma_measured_s_ = 0;
  std::unordered_map<aggregator::NodeId, std::string> name_of_;
  bool timed_out_ = false;
};

}  // namespace

StatusOr<SuiteSpec> FindSuite(const std::string& name) {
  // Quick: 25 probes/s on each of 2 flows per ordered pair for 5 s is 250 samples a pair (a p99
  // from the 3rd-worst; a node's figure is the median over its pairs); 8 nodes send 350 probes/s
  // each, which a loaded 2-core test machine carries without dropping. Full: 4x the samples.
  if (name.empty() || name == "quick") return SuiteSpec{"quick", 25, 2, 4, 0.9, 5};
  if (name == "full") {
    SuiteSpec full{"full", 25, 4, 6, 0.95, 10};
    full.bw_timeout_s = 5;
    full.allreduce_bytes = 8u << 20;
    full.allreduce_iterations = 20;
    full.allreduce_wait_s = 30;
    return full;
  }
  return Status::InvalidArgument("unknown suite '" + name + "' (quick or full)");
}

bool IsLocalCheckKind(const std::string& kind) {
  return kind == "port_errors" || kind == "port_congestion" || kind == "pcie_downtrained" ||
         kind == "gpu_nic_locality" || kind == "topology_mismatch";
}

QualifyReport RunSuite(QualifyEnv& env, QualifyInputs& inputs, const Clock& clock,
                       const SuiteRequest& req, const std::atomic<bool>& stop) {
  return Run(env, inputs, clock, req, stop).Go();
}

}  // namespace fw::qualify
