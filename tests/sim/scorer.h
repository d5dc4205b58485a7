// Scoring: findings against ground truth (precision, recall, localization, time to detect), and
// the aggregator's resource use from /proc and its /metrics counters.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "tests/sim/scenario.h"
#include "tests/sim/topology.h"

namespace fw::sim {

struct ObservedFinding {
  std::string id;
  std::string kind;                        // the latest kind seen
  std::string type, loc_id, node, device;  // location
  bool active = false;
  double first_seen_unix_s = 0;  // the aggregator's first_seen, or when the scorer first saw it
  double observed_unix_s = 0;    // when the scorer first saw it
  // Every kind the finding took, with when the scorer first saw it, in order. A finding keeps its
  // id while it escalates (link_degraded → link_down → link_flapping: a flap needs several
  // toggles); empty means only `kind` at `observed_unix_s`.
  std::vector<std::pair<std::string, double>> kinds;
};

// Parses a /api/v1/findings body (a JSON array of findings, DESIGN.md schema). Entries without an
// id or kind are skipped and counted in `*malformed`; a body that is not an array is an error.
StatusOr<std::vector<ObservedFinding>> ParseFindings(const std::string& body, double now_unix_s,
                                                     int* malformed);

// "2024-05-01T12:00:00Z", with optional fraction and numeric offset; nullopt when not RFC 3339.
std::optional<double> ParseRfc3339(std::string_view text);

// Keeps the first observation of every finding id across polls, and each later change of kind.
class FindingsTracker {
 public:
  void Update(const std::vector<ObservedFinding>& findings);
  std::vector<ObservedFinding> All() const;

 private:
  std::map<std::string, ObservedFinding> by_id_;
};

// One injected fault, as the scorer judges it.
struct Truth {
  std::string label;                   // "link_loss leaf001~spine00"
  std::vector<std::string> kinds;      // acceptable finding kinds
  std::string type, id, node, device;  // the exact element
  std::set<std::string> related;  // location ids that point at the fault without naming it exactly
  double start_unix_s = 0, end_unix_s = 0;
};

// `run_start_unix_s` is the wall time of simulated second 0; `time_scale` simulated s per real s.
std::vector<Truth> GroundTruth(const Scenario& scenario, const FatTree& tree,
                               double run_start_unix_s, double time_scale);

struct FaultScore {
  std::string label;
  bool detected = false;   // some finding related to the fault appeared while it was active
  bool localized = false;  // one of them names the exact element with an acceptable kind
  double ttd_s = -1;       // fault start to the first exact (else related) finding; -1 if none
  std::string finding;     // the id that counted
};

struct Score {
  size_t findings = 0;
  size_t true_positives = 0;
  size_t false_positives = 0;
  double precision = -1;     // -1 when there were no findings
  double recall = -1;        // -1 when there were no faults
  double localization = -1;  // over detected faults; -1 when none were detected
  double ttd_median_s = -1;
  std::vector<FaultScore> faults;
  std::vector<std::string> false_positive_ids;
};

// A finding is a true positive when its location is the fault's exact element or related to it (a
// location id listing candidates, "spine00,spine01", is related when one of them is) and
// the scorer first saw it between the fault's start and `grace_s` after its end; any other finding
// is a false positive (a healthy run's findings are all false positives). Times are when the scorer
// first saw a finding (polling adds up to one period), not its first_seen, which an analyzer may
// date back to its first evidence. A finding localizes a fault from the first poll that showed it
// at the exact element with an accepted kind: TTD then counts to that poll.
Score ComputeScore(const std::vector<Truth>& truths, const std::vector<ObservedFinding>& findings,
                   double grace_s);

struct ProcSample {
  double cpu_s = 0;  // user + system
  uint64_t rss_bytes = 0;
  uint64_t hwm_bytes = 0;  // peak RSS
};
StatusOr<ProcSample> ReadProc(pid_t pid);

// The sum over every label set of a metric in Prometheus text format; nullopt when absent.
std::optional<double> SumMetric(std::string_view text, std::string_view name);

}  // namespace fw::sim
