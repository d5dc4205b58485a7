// The qualification queue and its bookkeeping.
#include "daemon/aggregator/qualify/jobs.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>

#include "daemon/aggregator/qualify/qualify_store.h"
#include "daemon/aggregator/qualify/report_json.h"

namespace fw::qualify {
namespace {

bool Overlaps(const std::set<std::string>& a, const std::set<std::string>& b) {
  for (const std::string& n : a) {
    if (b.contains(n)) return true;
  }
  return false;
}

// A report for `nodes` that no suite judged: every node unknown, with `why`; exit 3.
QualifyReport NotQualified(const std::string& id, const std::vector<std::string>& nodes,
                           const std::string& why) {
  QualifyReport r;
  r.id = id;
  r.note = why;
  for (const std::string& n : nodes)
    r.nodes.push_back({n, Verdict::kUnknown, {"not qualified: " + why}});
  r.exit_code = 3;
  return r;
}

// Requests of one job share a run when they name the same set, suite and profile.
std::string JobKey(const std::string& job, const std::string& suite, const std::string& profile,
                   const std::set<std::string>& nodes) {
  std::string k = job + '\n' + suite + '\n' + profile;
  for (const std::string& n : nodes) k += '\n' + n;
  return k;
}

bool ValidName(const std::string& n) {
  if (n.empty() || n.size() > 255) return false;
  for (char c : n) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.') {
      return false;
    }
  }
  return true;
}

}  // namespace

QualifyJobs::QualifyJobs(QualifyEnv& env, QualifyInputs& inputs, const Clock& clock,
                         metrics::Registry& registry, Options options, QualificationStore* store)
    : env_(env),
      inputs_(inputs),
      clock_(clock),
      options_(options),
      result_(registry.AddGauge(
          "fabricwatch_qualification_result",
          "The latest qualification verdict of a node by suite: 0 pass, 1 warn, 2 fail, 3 could "
          "not be judged. Only nodes with a known agent get a series.",
          {"node", "suite"})),
      refused_(registry.AddCounter("fabricwatch_qualify_refused_total",
                                   "Qualification requests refused before running, by reason.",
                                   {"reason"})),
      store_(store),
      history_skipped_(registry
                           .AddCounter("fabricwatch_qualify_history_skipped_total",
                                       "Fleet-history entries (a stored report's path-class "
                                       "medians) left out as malformed, or a history that could "
                                       "not be read; qualification then judges without them.")
                           .WithLabels({})) {
  for (const char* r : {"bad_request", "too_many_nodes", "busy", "stopping"}) {
    refused_.WithLabels({r});
  }
  if (store_ && store_->is_open()) {
    ReportQuery q;
    q.limit = 1000;  // the store's cap; kMaxRuns per class of them are kept
    auto stored = store_->Find(q);
    if (stored.ok()) {
      history_skipped_.Inc(static_cast<double>(history_.Load(*stored)));
    } else {
      history_skipped_.Inc();  // the store logged why
    }
  }
}

QualifyJobs::~QualifyJobs() { Shutdown(); }

Status QualifyJobs::Refuse(const char* reason, std::string message) {
  refused_.WithLabels({reason}).Inc();
  spdlog::warn("msg=\"qualification refused\" reason={} detail=\"{}\"", reason, message);
  return reason == std::string("too_many_nodes") || reason == std::string("busy")
             ? Status::ResourceExhausted(std::move(message))
             : Status::InvalidArgument(std::move(message));
}

StatusOr<QualifyReport> QualifyJobs::Run(const QualifyJobRequest& request) {
  const int64_t arrived = clock_.MonotonicNanos();
  const int64_t arrived_wall = clock_.WallNanos();
  if (stop_) return Refuse("stopping", "the aggregator is stopping");
  if (request.nodes.empty()) return Refuse("bad_request", "no nodes given");
  if (request.nodes.size() > options_.max_nodes) {
    return Refuse("too_many_nodes", std::to_string(request.nodes.size()) +
                                        " nodes is more than the limit of " +
                                        std::to_string(options_.max_nodes));
  }
  std::vector<std::string> nodes;
  std::set<std::string> set;
  for (const std::string& n : request.nodes) {
    if (!ValidName(n))
      return Refuse("bad_request", "node name '" + n.substr(0, 64) + "' is not valid");
    if (set.insert(n).second) nodes.push_back(n);
  }
  if (!std::isfinite(request.timeout_s) || request.timeout_s <= 0 ||
      request.timeout_s > options_.max_timeout_s) {
    return Refuse("bad_request", "timeout_s must be in (0, " +
                                     std::to_string(static_cast<int>(options_.max_timeout_s)) +
                                     "]");
  }
  if (!request.job.empty() && (request.job.size() > 64 || !ValidName(request.job))) {
    return Refuse("bad_request", "job '" + request.job.substr(0, 64) +
                                     "' is not valid (at most 64 of A-Z a-z 0-9 - _ .)");
  }
  auto profile = FindQualifyProfile(request.profile);
  if (!profile.ok()) return Refuse("bad_request", profile.status().message());
  auto suite = FindSuite(request.suite);
  if (!suite.ok()) return Refuse("bad_request", suite.status().message());
  suite->ramp_max_s *= options_.time_scale;
  suite->measure_s *= options_.time_scale;

  const int64_t deadline = arrived + static_cast<int64_t>(request.timeout_s * 1e9);
  const std::string key =
      request.job.empty() ? std::string() : JobKey(request.job, suite->name, profile->name, set);
  std::string id;
  uint64_t ticket = 0;
  std::vector<std::string> waited_for;
  bool started = false;
  auto outcome = std::make_shared<Outcome>();
  {
    MutexLock lock(mu_);
    if (!key.empty()) {
      if (auto joined = JoinableLocked(key, arrived)) {
        spdlog::info("msg=\"qualification joined\" job={} id={} finished={}", request.job,
                     joined->id, joined->done);
        QualifyReport r = AwaitLocked(joined, nodes, deadline);
        r.job = request.job;
        r.suite = suite->name;
        r.profile = profile->name;
        return r;
      }
    }
    if (in_flight_.size() >= options_.max_in_flight) {
      lock.Unlock();
      return Refuse("busy", std::to_string(options_.max_in_flight) +
                                " qualifications are already running or queued");
    }
    id = "q" + std::to_string(clock_.WallNanos() / 1'000'000) + "-" + std::to_string(++next_id_);
    outcome->id = id;
    ticket = ++next_ticket_;
    in_flight_.push_back({ticket, id, set, false, key, outcome});
    // First come, first served among overlapping sets: wait while an earlier entry (running or
    // queued) shares a node.
    for (const Entry& e : in_flight_) {
      if (e.ticket != ticket && Overlaps(e.nodes, set)) waited_for.push_back(e.id);
    }
    if (!waited_for.empty()) {
      spdlog::info("msg=\"qualification queued\" id={} behind={}", id, waited_for.front());
    }
    while (!stop_ && BlockedLocked(ticket, set)) {
      const int64_t now = clock_.MonotonicNanos();
      if (now >= deadline) break;
      cv_.WaitFor(mu_, std::chrono::nanoseconds(std::min<int64_t>(deadline - now, 200'000'000)));
    }
    started = !stop_ && !BlockedLocked(ticket, set);
    for (Entry& e : in_flight_) {
      if (e.ticket == ticket) e.running = started;
    }
  }
  QualifyReport report;
  if (started) {
    spdlog::info(
        "msg=\"qualification started\" id={} job={} nodes={} suite={} profile={} timeout_s={}", id,
        request.job, nodes.size(), suite->name, profile->name, request.timeout_s);
    SuiteRequest sr{id, nodes, *profile, *suite, deadline};
    sr.fleet_baseline = history_.Baselines();
    report = RunSuite(env_, inputs_, clock_, sr, stop_);
  } else {
    report = NotQualified(id, nodes,
                          stop_ ? "the aggregator is stopping"
                                : "queued behind qualification " +
                                      (waited_for.empty() ? std::string("?") : waited_for.front()) +
                                      " of overlapping nodes for the whole timeout");
    report.state = stop_ ? "error" : "timeout";
    report.started_wall_ns = report.finished_wall_ns = clock_.WallNanos();
  }
  report.job = request.job;
  report.suite = suite->name;
  report.profile = profile->name;
  report.requested_wall_ns = arrived_wall;
  report.queued_s =
      std::max(0.0, static_cast<double>(report.started_wall_ns - arrived_wall) * 1e-9);
  {
    MutexLock lock(mu_);
    std::erase_if(in_flight_, [&](const Entry& e) { return e.ticket == ticket; });
    outcome->report = report;
    outcome->done = true;
    outcome->finished_ns = clock_.MonotonicNanos();
    if (!key.empty() && report.state == "done") finished_jobs_.emplace_back(key, outcome);
  }
  cv_.NotifyAll();
  Publish(report);
  spdlog::info(
      "msg=\"qualification finished\" id={} job={} state={} exit_code={} duration_s={:.2f} "
      "queued_s={:.2f}",
      report.id, report.job, report.state, report.exit_code, report.duration_s, report.queued_s);
  return report;
}

std::shared_ptr<QualifyJobs::Outcome> QualifyJobs::JoinableLocked(const std::string& key,
                                                                  int64_t now_ns) {
  const auto reuse_ns = static_cast<int64_t>(options_.job_reuse_s * 1e9);
  std::erase_if(finished_jobs_,
                [&](const auto& f) { return now_ns - f.second->finished_ns > reuse_ns; });
  for (const Entry& e : in_flight_) {
    if (e.key == key) return e.outcome;
  }
  for (auto it = finished_jobs_.rbegin(); it != finished_jobs_.rend(); ++it) {
    if (it->first == key) return it->second;
  }
  return nullptr;
}

bool QualifyJobs::BlockedLocked(uint64_t ticket, const std::set<std::string>& set) const {
  for (const Entry& e : in_flight_) {
    if (e.ticket == ticket) return false;
    if (Overlaps(e.nodes, set)) return true;
  }
  return false;
}

QualifyReport QualifyJobs::AwaitLocked(const std::shared_ptr<Outcome>& o,
                                       const std::vector<std::string>& nodes, int64_t deadline) {
  while (!o->done && !stop_) {
    const int64_t now = clock_.MonotonicNanos();
    if (now >= deadline) break;
    cv_.WaitFor(mu_, std::chrono::nanoseconds(std::min<int64_t>(deadline - now, 200'000'000)));
  }
  if (o->done) return o->report;
  QualifyReport r = NotQualified(
      o->id, nodes,
      stop_ ? "the aggregator is stopping"
            : "qualification " + o->id + " of the same job had not finished within the timeout");
  r.state = stop_ ? "error" : "timeout";
  r.started_wall_ns = r.finished_wall_ns = clock_.WallNanos();
  return r;
}

void QualifyJobs::RunAsync(QualifyJobRequest request,
                           std::function<void(StatusOr<QualifyReport>)> done) {
  MutexLock lock(mu_);
  if (stop_) {
    done(Status::Unavailable("the aggregator is stopping"));
    return;
  }
  // Finished workers are joined here and in Shutdown(); at most max_in_flight run a suite at once
  // (Run refuses the rest at once).
  std::erase_if(workers_, [](Worker& w) {
    if (!w.finished->load()) return false;
    w.thread.join();
    return true;
  });
  auto finished = std::make_shared<std::atomic<bool>>(false);
  workers_.push_back(
      {std::thread([this, finished, request = std::move(request), done = std::move(done)] {
         done(Run(request));
         finished->store(true);
       }),
       finished});
}

void QualifyJobs::Publish(const QualifyReport& report) {
  std::vector<std::string> names;
  for (const NodeResult& n : report.nodes) names.push_back(n.node);
  const auto agents = env_.Agents(names);
  for (size_t i = 0; i < report.nodes.size(); ++i) {
    if (!agents.at(i).known) continue;  // bounded cardinality: only real nodes get a series
    result_.WithLabels({names[i], report.suite}).Set(static_cast<double>(report.nodes[i].verdict));
  }
  if (store_) {
    // The store logs and counts its own errors; the report stays listed from memory.
    (void)store_->Save(report);
  }
  for (const auto& [cls, m] : report.path_classes) history_.Add(cls, m.rtt_p99_s);
  MutexLock lock(mu_);
  recent_.push_front(report);
  while (recent_.size() > options_.history) recent_.pop_back();
}

nlohmann::json QualifyJobs::Find(const ReportQuery& q) const {
  if (store_ && store_->is_open()) {
    auto stored = store_->Find(q);
    if (stored.ok()) return std::move(*stored);
  }
  nlohmann::json out = nlohmann::json::array();
  for (const QualifyReport& r : Recent()) {
    if (out.size() >= q.limit) break;
    if (!q.id.empty() && r.id != q.id) continue;
    if (!q.job.empty() && r.job != q.job) continue;
    if (!q.node.empty() && std::none_of(r.nodes.begin(), r.nodes.end(),
                                        [&](const NodeResult& n) { return n.node == q.node; })) {
      continue;
    }
    out.push_back(ReportToJson(r));
  }
  return out;
}

std::vector<QualifyReport> QualifyJobs::Recent() const {
  MutexLock lock(mu_);
  return {recent_.begin(), recent_.end()};
}

void QualifyJobs::Shutdown() {
  stop_ = true;
  cv_.NotifyAll();
  std::vector<Worker> workers;
  {
    MutexLock lock(mu_);
    workers.swap(workers_);
  }
  for (Worker& w : workers) {
    if (w.thread.joinable()) w.thread.join();
  }
}

}  // namespace fw::qualify
