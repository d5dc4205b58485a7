// The life of each element's finding: ok → suspect → firing (degraded, down, ...) → recovering →
// ok, with flapping detection. Pure logic on injected times.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "daemon/aggregator/analysis/config.h"
#include "daemon/aggregator/analysis/tracked_finding.h"

namespace fw::analysis {

enum class ElementHealth : uint8_t { kOk, kSuspect, kFiring, kRecovering };
const char* ElementHealthName(ElementHealth h);

// What one evaluation concluded about a bad element.
struct Observation {
  Finding finding;
  bool can_flap = false;  // a link or NIC: toggles may turn it into link_flapping
  // Consecutive bad evaluations this kind of evidence needs before it fires; 0 means the config's
  // confirm_ticks. Evidence that transient causes mimic (latency alone on one access link) asks
  // for more.
  int confirm_ticks = 0;
  // The freshest data (the last two complete seconds) shows the loss on its own, significant at a
  // finding's level: the element may fire after `dense_confirm_ticks` instead of `confirm_ticks`
  // (AnalysisConfig), unless it asks for persistence.
  bool dense_confirmed = false;
  // Loss evidence that the dense test may confirm (not latency alone, not held for its switch)
  // and that it did not confirm in this evaluation: Analyzer::Recheck reads it again between ticks.
  bool dense_recheck = false;
};

// Not thread-safe: the analyzer's tick thread owns it.
class ElementTracker {
 public:
  explicit ElementTracker(const AnalysisConfig& config) : config_(config) {}

  // Puts back an active finding loaded from the store; its element starts in kFiring and resolves
  // after the recovery period if the fault is gone.
  void Restore(const TrackedFinding& finding, double now_s);

  // During a tick: the element is bad in this evaluation.
  void Observe(const std::string& element, Observation obs);
  // During a tick: the element's evidence is now explained by a larger element (a switch, a host):
  // its finding resolves at the end of this tick instead of after the recovery period.
  void Supersede(const std::string& element);
  // During a tick: the element's loss is significant only at the weak level that escalates it
  // (AnalysisConfig::escalate_loss_significance), not yet at a finding's. If it turns suspect at
  // the next evaluation, that evaluation counts towards `dense_confirm_ticks`: the fresh, escalated
  // data then confirms on its own a suspicion that the earlier data raised.
  void Weak(const std::string& element) { weak_now_.insert(element); }
  // Between ticks: `element` is weakly lossy on evidence judged since the last EndTick (a lead
  // found between ticks, Analyzer::BetweenTicks), which counts as the evaluation before the next
  // tick: an element that turns suspect at the next tick has it as its weak lead, as if the last
  // tick had called Weak() for it.
  void WeakBeforeNextTick(const std::string& element) { weak_prev_.insert(element); }
  // During a tick: a per-second up/down reading of a link or NIC (for flapping). A down element
  // toggles back up only on a clean reading.
  // `clean`: read up with little loss (Evaluation::LinkInstant), the only reading that can end a
  // short outage; `probes`: how many probes crossed it in that second.
  void Instant(const std::string& element, bool down, bool clean, double now_s, double probes = 0);
  // How late the aggregator reads its agents' data (FleetState::ingest_lag_s), for the next
  // EndTick. A confirmation that asks for persistence (more than `confirm_ticks` evaluations) must
  // also cover as much data time as those evaluations took: when the lag grows, the data reaches
  // the aggregator slower than its ticks run, and a few seconds of a fabric's queueing would
  // otherwise last 30 evaluations.
  void SetIngestLag(double lag_s) { ingest_lag_s_ = lag_s; }

  // Ends the tick. Elements not observed in it count as good. Returns the findings that were
  // opened, changed kind or severity, or resolved in this tick (`material`), and separately every
  // active finding whose last_seen moved.
  struct Changes {
    std::vector<TrackedFinding> material;
    std::vector<TrackedFinding> touched;
  };
  Changes EndTick(double now_s, int64_t now_wall_ns);

  // After EndTick: whether `element` is suspect on loss evidence that the dense test alone would
  // fire now (Observation::dense_recheck, its `dense_confirm_ticks` evaluations counted as at a
  // tick, no persistence asked), had the freshest data passed it.
  bool DenseRecheckable(const std::string& element) const;
  // Between ticks: the dense test passed on the freshest data for such an element (it is still
  // DenseRecheckable): it fires now, as it would have at a tick, with `evidence` added to its
  // finding. Returns the opened finding in `material`; nothing for any other element.
  Changes ConfirmDense(const std::string& element, int64_t now_wall_ns,
                       const std::map<std::string, double>& evidence);
  // After EndTick: the elements suspect, or weakly lossy, after it.
  std::vector<std::string> SuspectOrWeak() const;

  std::vector<TrackedFinding> ActiveFindings() const;
  ElementHealth HealthOf(const std::string& element) const;
  // The active finding's kind for the element, or empty.
  std::string KindOf(const std::string& element) const;
  bool IsFlapping(const std::string& element) const;
  size_t TrackedCount() const { return elements_.size(); }

 private:
  struct Element {
    ElementHealth health = ElementHealth::kOk;
    int consecutive_bad = 0;
    double first_bad_s = 0;
    double first_bad_lag_s = 0;  // the ingest lag when it became suspect
    int64_t first_bad_wall_ns = 0;
    double last_bad_s = 0;
    double good_since_s = 0;
    bool observed = false;  // in the current tick
    bool superseded = false;
    bool flapping = false;
    // One element (a host) may be observed by several rules with different confirmations. It fires
    // after the usual confirmation of consecutive ticks that asked for no more than that
    // (`quick_run`), or after the longest confirmation any of its ticks asked for since it became
    // suspect (`confirm_needed`): one tick of a quick rule must not fire what a slow rule holds.
    int confirm_needed = 0;
    int quick_run = 0;
    int weak_lead = 0;  // 1 when the evaluation before it turned suspect was Weak()
    Observation pending;
    std::optional<TrackedFinding> finding;
  };
  struct Toggles {
    bool down = false;
    bool reported = false;  // in the current tick
    std::deque<double> times;
    double down_since_s = 0;
    // The end of the last outage no longer than `flap_short_outage_s`, and how long it lasted;
    // -1 when none.
    double short_outage_end_s = -1;
    double short_outage_s = 0;
    // Consecutive evaluations that read the element up and clean on its own probes, each a
    // complete second of its own (readings under half a second apart count once); 0 once one
    // reads it down or lossy, or does not judge it.
    int clean_seconds = 0;
    double last_clean_s = 0;
    double clean_probes = 0;  // the probes of those readings
    // The same for evaluations that read it up (clean or not), and the probes of the last reading
    // when it was clean, else 0 (AnalysisConfig::flap_dense_return).
    int up_seconds = 0;
    double last_up_s = 0;
    double first_up_s = 0;  // the first reading of that run
    double last_clean_probes = 0;
  };
  int ToggleCount(const std::string& element, double now_s) const;
  // Records a change of `t` at `now_s` (down, or back up).
  void Toggle(Toggles& t, bool down, double now_s) const;
  // The length of a short outage of `element` that ended within `flap_window_s` and after which
  // the element has read up and clean in `flap_short_outage_up_s` complete seconds, or -1.
  double ShortOutage(const std::string& element, double now_s) const;
  // Whether a confirmation that asks for persistence covers enough data time (SetIngestLag).
  bool CoversDataTime(const Element& e, double now_s) const;
  void Fire(const std::string& key, Element& e, int64_t now_wall_ns, Changes& changes);

  AnalysisConfig config_;
  double ingest_lag_s_ = 0;
  std::map<std::string, Element> elements_;
  std::unordered_map<std::string, Toggles> toggles_;
  std::set<std::string> weak_now_;   // Weak() in this tick
  std::set<std::string> weak_prev_;  // ...in the last one
};

}  // namespace fw::analysis
