// State machine per element and flapping detection.
#include "daemon/aggregator/analysis/element_tracker.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace fw::analysis {
namespace {
constexpr char kFlapping[] = "link_flapping";

// `outage_s` >= 0: the flap is one short outage of that length that came back.
void ApplyFlapping(Finding& f, int toggles, double window_s, double outage_s) {
  if (f.kind == kFlapping) return;
  char buf[200];
  if (toggles < 3 && outage_s >= 0) {
    std::snprintf(buf, sizeof(buf),
                  " It went down for %.0f s and came back on its own (%d up/down changes in the "
                  "last %.0f minutes).",
                  outage_s, toggles, window_s / 60.0);
    f.evidence["outage_s"] = outage_s;
  } else {
    std::snprintf(buf, sizeof(buf), " It went down and up %d times in the last %.0f minutes.",
                  toggles, window_s / 60.0);
  }
  f.kind = kFlapping;
  f.severity = Severity::kCritical;
  f.summary = "Flapping: " + f.summary + buf;
  f.evidence["toggles"] = toggles;
}
int KindRank(const std::string& kind) {
  if (kind == kFlapping) return 3;
  if (kind == "link_down" || kind == "nic_down" || kind == "probe_unreachable") return 2;
  return 1;
}
}  // namespace

const char* ElementHealthName(ElementHealth h) {
  switch (h) {
    case ElementHealth::kOk:
      return "ok";
    case ElementHealth::kSuspect:
      return "suspect";
    case ElementHealth::kFiring:
      return "firing";
    case ElementHealth::kRecovering:
      return "recovering";
  }
  return "unknown";
}

void ElementTracker::Restore(const TrackedFinding& finding, double now_s) {
  Element& e = elements_[finding.element];
  e.health = ElementHealth::kFiring;
  e.consecutive_bad = config_.confirm_ticks;
  e.first_bad_s = now_s;
  e.first_bad_wall_ns = finding.first_seen_ns;
  e.last_bad_s = now_s;
  e.flapping = finding.finding.kind == kFlapping;
  e.pending.finding = finding.finding;
  e.finding = finding;
}

void ElementTracker::Observe(const std::string& element, Observation obs) {
  Element& e = elements_[element];
  e.observed = true;
  e.pending = std::move(obs);
}

void ElementTracker::Supersede(const std::string& element) {
  auto it = elements_.find(element);
  if (it != elements_.end()) it->second.superseded = true;
}

namespace {
// Counts a reading at `now_s` into a run of consecutive readings (`count`, the last at `last_s`);
// readings under half a second apart read the same second and count once. Returns whether it
// counted.
bool CountReading(int& count, double& last_s, double now_s) {
  if (count != 0 && now_s - last_s < 0.5) return false;
  ++count;
  last_s = now_s;
  return true;
}
}  // namespace

void ElementTracker::Instant(const std::string& element, bool down, bool clean, double now_s,
                             double probes) {
  Toggles& t = toggles_[element];
  t.reported = true;
  if (down) {
    if (!t.down) Toggle(t, true, now_s);
    t.up_seconds = 0;
  } else if (CountReading(t.up_seconds, t.last_up_s, now_s) && t.up_seconds == 1) {
    t.first_up_s = now_s;
  }
  if (down || !clean) {
    t.clean_seconds = 0;
    t.clean_probes = 0;
  } else if (CountReading(t.clean_seconds, t.last_clean_s, now_s)) {
    t.clean_probes += probes;
  }
  t.last_clean_probes = !down && clean ? probes : 0;
  // A down link is back up only once it reads clean; the outage ended where the up readings
  // began. A held-down link whose loss reads under 50 % for a second (late loss reports, flows
  // partly rerouted) and down again made three toggles, a flap, without it.
  if (!down && clean && t.down) Toggle(t, false, t.first_up_s);
}

void ElementTracker::Toggle(Toggles& t, bool down, double now_s) const {
  t.down = down;
  t.times.push_back(now_s);
  if (down) {
    t.down_since_s = now_s;
  } else if (config_.flap_short_outage_s > 0 &&
             now_s - t.down_since_s <= config_.flap_short_outage_s) {
    t.short_outage_end_s = now_s;
    t.short_outage_s = now_s - t.down_since_s;
  }
}

double ElementTracker::ShortOutage(const std::string& element, double now_s) const {
  auto it = toggles_.find(element);
  if (it == toggles_.end()) return -1;
  const Toggles& t = it->second;
  const bool recent =
      t.short_outage_end_s >= 0 && now_s - t.short_outage_end_s <= config_.flap_window_s;
  const int needed =
      std::max(1, static_cast<int>(std::ceil(config_.flap_short_outage_up_s - 1e-9)));
  const bool counted =
      t.clean_seconds >= needed + 1 ||
      (t.clean_seconds >= needed && t.clean_probes >= config_.flap_return_min_probes);
  const bool dense_back = config_.flap_dense_return &&
                          t.last_clean_probes >= config_.dense_confirm_min_probes &&
                          t.up_seconds >= needed;
  const bool back = !t.down && t.clean_seconds > 0 && (counted || dense_back);
  return recent && back ? t.short_outage_s : -1;
}

bool ElementTracker::CoversDataTime(const Element& e, double now_s) const {
  if (e.confirm_needed <= config_.confirm_ticks || e.consecutive_bad < 2) return true;
  // The evaluations took `real` seconds; the data they judged spans `real` less the lag's growth.
  // They must cover the data time that confirm_needed evaluations take at this tick rate, with one
  // second of slack for the lag's own jitter (it is read from heartbeats).
  const double real = now_s - e.first_bad_s;
  const double data = real - (ingest_lag_s_ - e.first_bad_lag_s);
  const double needed = real * (e.confirm_needed - 1) / (e.consecutive_bad - 1);
  return data + 1.0 >= needed;
}

int ElementTracker::ToggleCount(const std::string& element, double now_s) const {
  auto it = toggles_.find(element);
  if (it == toggles_.end()) return 0;
  return static_cast<int>(
      std::count_if(it->second.times.begin(), it->second.times.end(),
                    [&](double t) { return now_s - t <= config_.flap_window_s; }));
}

bool ElementTracker::IsFlapping(const std::string& element) const {
  auto it = elements_.find(element);
  return it != elements_.end() && it->second.flapping;
}

void ElementTracker::Fire(const std::string& key, Element& e, int64_t now_wall_ns,
                          Changes& changes) {
  e.health = ElementHealth::kFiring;
  TrackedFinding f;
  f.id = key + "@" + std::to_string(e.first_bad_wall_ns / 1'000'000'000);
  f.element = key;
  f.finding = e.pending.finding;
  f.active = true;
  f.first_seen_ns = e.first_bad_wall_ns;
  f.last_seen_ns = now_wall_ns;
  e.finding = f;
  changes.material.push_back(f);
}

bool ElementTracker::DenseRecheckable(const std::string& element) const {
  auto it = elements_.find(element);
  if (it == elements_.end()) return false;
  const Element& e = it->second;
  // The tick's own dense condition (EndTick), less the freshest data's verdict.
  return e.health == ElementHealth::kSuspect && e.pending.dense_recheck &&
         !e.pending.dense_confirmed && e.confirm_needed <= config_.confirm_ticks &&
         e.consecutive_bad + e.weak_lead >= std::max(1, config_.dense_confirm_ticks);
}

ElementTracker::Changes ElementTracker::ConfirmDense(
    const std::string& element, int64_t now_wall_ns,
    const std::map<std::string, double>& evidence) {
  Changes changes;
  if (!DenseRecheckable(element)) return changes;
  Element& e = elements_.find(element)->second;
  e.pending.dense_confirmed = true;
  e.pending.dense_recheck = false;
  for (const auto& [k, v] : evidence) e.pending.finding.evidence[k] = v;
  Fire(element, e, now_wall_ns, changes);
  return changes;
}

std::vector<std::string> ElementTracker::SuspectOrWeak() const {
  std::vector<std::string> out(weak_prev_.begin(), weak_prev_.end());
  for (const auto& [key, e] : elements_) {
    if (e.health == ElementHealth::kSuspect && !weak_prev_.contains(key)) out.push_back(key);
  }
  return out;
}

ElementTracker::Changes ElementTracker::EndTick(double now_s, int64_t now_wall_ns) {
  Changes changes;
  // A link that is not judged in a tick keeps its state (down stays down: not being judged is no
  // return) and starts its runs of up and clean readings again. Its record goes once its toggles
  // left the window, unless it is down and still read.
  for (auto it = toggles_.begin(); it != toggles_.end();) {
    Toggles& t = it->second;
    while (!t.times.empty() && now_s - t.times.front() > config_.flap_window_s) t.times.pop_front();
    const bool reported = t.reported;
    if (!reported) {
      t.clean_seconds = t.up_seconds = 0;
      t.clean_probes = t.last_clean_probes = 0;
    }
    t.reported = false;
    if (t.times.empty() && (!t.down || !reported)) {
      it = toggles_.erase(it);
    } else {
      ++it;
    }
  }

  for (auto it = elements_.begin(); it != elements_.end();) {
    const std::string& key = it->first;
    Element& e = it->second;
    bool erase = false;
    if (e.observed) {
      e.last_bad_s = now_s;
      if (e.health == ElementHealth::kOk) {
        e.health = ElementHealth::kSuspect;
        e.consecutive_bad = 0;
        e.first_bad_s = now_s;
        e.first_bad_lag_s = ingest_lag_s_;
        e.first_bad_wall_ns = now_wall_ns;
        e.confirm_needed = 0;
        e.quick_run = 0;
        e.weak_lead = weak_prev_.contains(key) ? 1 : 0;
      }
      ++e.consecutive_bad;
      e.confirm_needed = std::max(e.confirm_needed, e.pending.confirm_ticks);
      e.quick_run = e.pending.confirm_ticks <= config_.confirm_ticks ? e.quick_run + 1 : 0;
      if (e.health == ElementHealth::kRecovering) e.health = ElementHealth::kFiring;
      const int toggles = ToggleCount(key, now_s);
      const double outage_s = ShortOutage(key, now_s);
      if (e.pending.can_flap && (toggles >= config_.flap_toggles || outage_s >= 0)) {
        e.flapping = true;
      }
      if (e.flapping) ApplyFlapping(e.pending.finding, toggles, config_.flap_window_s, outage_s);
      const bool dense =
          e.pending.dense_confirmed && e.confirm_needed <= config_.confirm_ticks &&
          e.consecutive_bad + e.weak_lead >= std::max(1, config_.dense_confirm_ticks);
      const bool confirmed =
          dense || e.quick_run >= config_.confirm_ticks ||
          (e.consecutive_bad >= std::max(config_.confirm_ticks, e.confirm_needed) &&
           CoversDataTime(e, now_s));
      if (e.health == ElementHealth::kSuspect && confirmed) {
        Fire(key, e, now_wall_ns, changes);
      } else if (e.health == ElementHealth::kFiring && e.finding) {
        TrackedFinding& f = *e.finding;
        // Within one incident the finding keeps its worst kind: a down link whose window is
        // draining is still the same outage, not a new degradation.
        if (KindRank(e.pending.finding.kind) < KindRank(f.finding.kind)) {
          e.pending.finding.kind = f.finding.kind;
          e.pending.finding.severity = f.finding.severity;
          e.pending.finding.summary = f.finding.summary;
        }
        const bool material = f.finding.kind != e.pending.finding.kind ||
                              f.finding.severity != e.pending.finding.severity;
        f.finding = e.pending.finding;
        f.last_seen_ns = now_wall_ns;
        (material ? changes.material : changes.touched).push_back(f);
      }
    } else if (e.superseded) {
      if (e.finding && e.health != ElementHealth::kSuspect) {
        e.finding->active = false;
        e.finding->finding.evidence["superseded"] = 1;
        changes.material.push_back(*e.finding);
      }
      erase = true;
    } else {
      switch (e.health) {
        case ElementHealth::kOk:
        case ElementHealth::kSuspect:
          erase = true;
          break;
        case ElementHealth::kFiring:
          e.health = ElementHealth::kRecovering;
          e.good_since_s = now_s;
          break;
        case ElementHealth::kRecovering: {
          double quiet = now_s - e.good_since_s;
          bool resolved = quiet >= config_.recovery_s;
          if (e.flapping) {
            auto t = toggles_.find(key);
            const double last_toggle =
                (t == toggles_.end() || t->second.times.empty()) ? -1e18 : t->second.times.back();
            resolved = resolved && now_s - last_toggle >= config_.flap_quiet_s;
          }
          if (resolved) {
            if (e.finding) {
              e.finding->active = false;
              changes.material.push_back(*e.finding);
            }
            erase = true;
          }
          break;
        }
      }
    }
    e.observed = false;
    e.superseded = false;
    it = erase ? elements_.erase(it) : std::next(it);
  }
  weak_prev_.swap(weak_now_);
  weak_now_.clear();
  return changes;
}

std::vector<TrackedFinding> ElementTracker::ActiveFindings() const {
  std::vector<TrackedFinding> out;
  for (const auto& [key, e] : elements_) {
    if (e.finding && e.finding->active) out.push_back(*e.finding);
  }
  return out;
}

ElementHealth ElementTracker::HealthOf(const std::string& element) const {
  auto it = elements_.find(element);
  return it == elements_.end() ? ElementHealth::kOk : it->second.health;
}

std::string ElementTracker::KindOf(const std::string& element) const {
  auto it = elements_.find(element);
  if (it == elements_.end() || !it->second.finding) return {};
  return it->second.finding->finding.kind;
}

}  // namespace fw::analysis
