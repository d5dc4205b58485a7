// The qualification queue and its bookkeeping.
#include "daemon/aggregator/qualify/jobs.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>

namespace fw::qualify {
namespace {

bool Overlaps(const std::set<std::string>& a, const std::set<std::string>& b) {
  for (const std::string& n : a) {
    if (b.contains(n)) return true;
  }
  return false;
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
                         metrics::Registry& registry, Options options)
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
                                   {"reason"})) {
  for (const char* r : {"bad_request", "too_many_nodes", "busy", "stopping"}) {
    refused_.WithLabels({r});
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
  auto profile = FindQualifyProfile(request.profile);
  if (!profile.ok()) return Refuse("bad_request", profile.status().message());
  auto suite = FindSuite(request.suite);
  if (!suite.ok()) return Refuse("bad_request", suite.status().message());
  suite->ramp_max_s *= options_.time_scale;
  suite->measure_s *= options_.time_scale;

  const int64_t deadline = arrived + static_cast<int64_t>(request.timeout_s * 1e9);
  std::string id;
  uint64_t ticket = 0;
  std::vector<std::string> waited_for;
  bool started = false;
  {
    std::unique_lock lock(mu_);
    if (in_flight_.size() >= options_.max_in_flight) {
      lock.unlock();
      return Refuse("busy", std::to_string(options_.max_in_flight) +
                                " qualifications are already running or queued");
    }
    id = "q" + std::to_string(clock_.WallNanos() / 1'000'000) + "-" + std::to_string(++next_id_);
    ticket = ++next_ticket_;
    in_flight_.push_back({ticket, id, set, false});
    // First come, first served among overlapping sets: wait while an earlier entry (running or
    // queued) shares a node.
    const auto blocked = [&] {
      for (const Entry& e : in_flight_) {
        if (e.ticket == ticket) return false;
        if (Overlaps(e.nodes, set)) return true;
      }
      return false;
    };
    for (const Entry& e : in_flight_) {
      if (e.ticket != ticket && Overlaps(e.nodes, set)) waited_for.push_back(e.id);
    }
    if (!waited_for.empty()) {
      spdlog::info("msg=\"qualification queued\" id={} behind={}", id, waited_for.front());
    }
    while (!stop_ && blocked()) {
      const int64_t now = clock_.MonotonicNanos();
      if (now >= deadline) break;
      cv_.wait_for(lock, std::chrono::nanoseconds(std::min<int64_t>(deadline - now, 200'000'000)));
    }
    started = !stop_ && !blocked();
    for (Entry& e : in_flight_) {
      if (e.ticket == ticket) e.running = started;
    }
  }
  QualifyReport report;
  if (started) {
    spdlog::info("msg=\"qualification started\" id={} nodes={} suite={} profile={} timeout_s={}",
                 id, nodes.size(), suite->name, profile->name, request.timeout_s);
    report = RunSuite(env_, inputs_, clock_, {id, nodes, *profile, *suite, deadline}, stop_);
  } else {
    report.id = id;
    report.suite = suite->name;
    report.profile = profile->name;
    report.state = stop_ ? "error" : "timeout";
    report.note = stop_ ? "the aggregator is stopping"
                        : "queued behind qualification " +
                              (waited_for.empty() ? std::string("?") : waited_for.front()) +
                              " of overlapping nodes for the whole timeout";
    report.started_wall_ns = report.finished_wall_ns = clock_.WallNanos();
    for (const std::string& n : nodes) {
      report.nodes.push_back({n, Verdict::kUnknown, {"not qualified: " + report.note}});
    }
    report.exit_code = 3;
  }
  report.requested_wall_ns = arrived_wall;
  report.queued_s =
      std::max(0.0, static_cast<double>(report.started_wall_ns - arrived_wall) * 1e-9);
  {
    std::lock_guard lock(mu_);
    std::erase_if(in_flight_, [&](const Entry& e) { return e.ticket == ticket; });
  }
  cv_.notify_all();
  Publish(report);
  spdlog::info(
      "msg=\"qualification finished\" id={} state={} exit_code={} duration_s={:.2f} "
      "queued_s={:.2f}",
      report.id, report.state, report.exit_code, report.duration_s, report.queued_s);
  return report;
}

void QualifyJobs::RunAsync(QualifyJobRequest request,
                           std::function<void(StatusOr<QualifyReport>)> done) {
  std::lock_guard lock(mu_);
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
  std::lock_guard lock(mu_);
  recent_.push_front(report);
  while (recent_.size() > options_.history) recent_.pop_back();
}

std::vector<QualifyReport> QualifyJobs::Recent() const {
  std::lock_guard lock(mu_);
  return {recent_.begin(), recent_.end()};
}

void QualifyJobs::Shutdown() {
  stop_ = true;
  cv_.notify_all();
  std::vector<Worker> workers;
  {
    std::lock_guard lock(mu_);
    workers.swap(workers_);
  }
  for (Worker& w : workers) {
    if (w.thread.joinable()) w.thread.join();
  }
}

}  // namespace fw::qualify
