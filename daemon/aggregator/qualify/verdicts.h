// Qualification verdicts: a set's measurements judged against each other (median and MAD) and
// against the profile's absolute limits, with reasons that state the value and the threshold.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace fw::qualify {

// Ordered by severity, so the worst of several is their max. The numbers are the exit codes.
enum class Verdict : int { kPass = 0, kWarn = 1, kFail = 2, kUnknown = 3 };

// "pass", "warn", "fail", "unknown" (the QualifyReport vocabulary).
const char* VerdictName(Verdict v);
Verdict Worst(Verdict a, Verdict b);

// How one measured quantity is judged.
struct MetricSpec {
  std::string label;  // "RTT p99", "loss", "bandwidth"
  enum class Unit { kSeconds, kRatio, kBitsPerSecond } unit = Unit::kSeconds;
  bool higher_is_worse = true;  // RTT and loss: higher is worse; bandwidth: lower is worse
  // Peer-relative: a member is an outlier when its robust z-score (distance from the set's median
  // over 1.4826 x MAD) is at least min_z AND it is at least warn_ratio (fail_ratio) times worse
  // than the median. The ratio guard keeps a tight set (tiny MAD) from flagging harmless
  // differences; the z guard keeps a set with a wide natural spread from flagging its tail.
  double min_z = 3.5;
  double warn_ratio = 1.5;
  double fail_ratio = 3.0;
  // Spreads below this are measurement noise (e.g. 50 us of RTT on a shared host), and a spread
  // below relative_floor x median likewise: the MAD is raised to at least these.
  double noise_floor = 0;
  double relative_floor = 0.05;
  // Sets smaller than this are judged by the absolute limits only (a median of two says little).
  size_t min_members = 3;
  // The profile's absolute expectations, in the metric's unit; unset: none.
  std::optional<double> abs_warn, abs_fail;
};

// One member's value: a node ("gpu007") or a pair ("gpu007->gpu012"). `context` completes the
// label in the reason, e.g. "to 5 peers".
struct Sample {
  std::string subject;
  double value = 0;
  std::string context;
};

struct Judgement {
  std::string subject;
  Verdict verdict = Verdict::kPass;
  std::vector<std::string> reasons;  // empty for a pass
};

// The set's centre and spread as JudgeSet used them.
struct SetStats {
  double median = 0;
  double mad = 0;    // the raw MAD
  double scale = 0;  // 1.4826 x MAD, raised to the floors
  size_t members = 0;
};
SetStats Describe(const MetricSpec& spec, const std::vector<Sample>& samples);

// Judges every sample (one Judgement per sample, in order). A reason reads like
// "RTT p99 to 5 peers 2.4 ms, 6.1x the set's median of 0.39 ms (fail at 3x)" or
// "loss to 7 peers 4.2%, above the profile's fail limit of 1%".
std::vector<Judgement> JudgeSet(const MetricSpec& spec, const std::vector<Sample>& samples);

// "2.40 ms", "4.2%", "9.41 Gbit/s".
std::string FormatValue(MetricSpec::Unit unit, double value);

}  // namespace fw::qualify
