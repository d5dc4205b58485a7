// Peer-relative and absolute judgement of a qualification set's measurements.
#include "daemon/aggregator/qualify/verdicts.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "daemon/aggregator/analysis/robust_stats.h"

namespace fw::qualify {
namespace {

// 1.4826 x MAD estimates the standard deviation of normally distributed data.
constexpr double kMadToSigma = 1.4826;

std::string Num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g", v);
  return buf;
}

std::string Ratio(double r) {
  char buf[32];
  std::snprintf(buf, sizeof buf, r >= 10 ? "%.0f" : r >= 1 ? "%.1f" : "%.2f", r);
  return std::string(buf) + "\xc3\x97";  // U+00D7 MULTIPLICATION SIGN
}

// How many times worse `v` is than `median` (>= 1 means worse), by the metric's direction.
double Worseness(const MetricSpec& spec, double v, double median) {
  if (spec.higher_is_worse) {
    if (median > 0) return v / median;
    return v > 0 ? INFINITY : 1;
  }
  if (v > 0) return median / v;
  return median > 0 ? INFINITY : 1;
}

}  // namespace

const char* VerdictName(Verdict v) {
  switch (v) {
    case Verdict::kPass:
      return "pass";
    case Verdict::kWarn:
      return "warn";
    case Verdict::kFail:
      return "fail";
    case Verdict::kUnknown:
      return "unknown";
  }
  return "unknown";
}

Verdict Worst(Verdict a, Verdict b) { return static_cast<int>(a) >= static_cast<int>(b) ? a : b; }

std::string FormatValue(MetricSpec::Unit unit, double value) {
  switch (unit) {
    case MetricSpec::Unit::kSeconds:
      return Num(value * 1e3) + " ms";
    case MetricSpec::Unit::kRatio:
      return Num(value * 100) + "%";
    case MetricSpec::Unit::kBitsPerSecond:
      if (value >= 1e9) return Num(value / 1e9) + " Gbit/s";
      return Num(value / 1e6) + " Mbit/s";
  }
  return Num(value);
}

SetStats Describe(const MetricSpec& spec, const std::vector<Sample>& samples) {
  SetStats s;
  std::vector<double> v;
  v.reserve(samples.size());
  for (const Sample& x : samples) {
    if (std::isfinite(x.value)) v.push_back(x.value);
  }
  s.members = v.size();
  if (v.empty()) return s;
  s.median = analysis::Median(v);
  s.mad = analysis::MedianAbsDeviation(v, s.median);
  s.scale =
      std::max({kMadToSigma * s.mad, spec.noise_floor, spec.relative_floor * std::abs(s.median)});
  return s;
}

std::vector<Judgement> JudgeSet(const MetricSpec& spec, const std::vector<Sample>& samples) {
  const SetStats st = Describe(spec, samples);
  const bool relative = st.members >= spec.min_members && st.scale > 0;
  std::vector<Judgement> out;
  out.reserve(samples.size());
  for (const Sample& x : samples) {
    Judgement j;
    j.subject = x.subject;
    const std::string what = spec.label + (x.context.empty() ? "" : " " + x.context) + " " +
                             FormatValue(spec.unit, x.value);
    if (!std::isfinite(x.value)) {
      j.verdict = Verdict::kUnknown;
      j.reasons.push_back(spec.label + (x.context.empty() ? "" : " " + x.context) +
                          ": no measurement");
      out.push_back(std::move(j));
      continue;
    }
    if (relative) {
      const double dist = spec.higher_is_worse ? x.value - st.median : st.median - x.value;
      const double z = dist / st.scale;
      const double worse = Worseness(spec, x.value, st.median);
      Verdict v = Verdict::kPass;
      if (z >= spec.min_z && worse >= spec.fail_ratio) {
        v = Verdict::kFail;
      } else if (z >= spec.min_z && worse >= spec.warn_ratio) {
        v = Verdict::kWarn;
      }
      if (v != Verdict::kPass) {
        j.verdict = v;
        // Lower-is-worse metrics read as fractions of the median ("0.21x the set's median").
        const auto shown = [&](double r) { return spec.higher_is_worse ? r : 1 / r; };
        const double limit = shown(v == Verdict::kFail ? spec.fail_ratio : spec.warn_ratio);
        const std::string rel = std::isinf(worse) ? "while the set's median is "
                                                  : Ratio(shown(worse)) + " the set's median of ";
        j.reasons.push_back(what + ", " + rel + FormatValue(spec.unit, st.median) + " (" +
                            VerdictName(v) + " at " + Ratio(limit) + ", " +
                            std::to_string(st.members) + " members)");
      }
    }
    const auto beyond = [&](double limit) {
      return spec.higher_is_worse ? x.value > limit : x.value < limit;
    };
    const char* side = spec.higher_is_worse ? "above" : "below";
    if (spec.abs_fail && beyond(*spec.abs_fail)) {
      j.verdict = Verdict::kFail;
      j.reasons.push_back(what + ", " + side + " the profile's fail limit of " +
                          FormatValue(spec.unit, *spec.abs_fail));
    } else if (spec.abs_warn && beyond(*spec.abs_warn)) {
      j.verdict = Worst(j.verdict, Verdict::kWarn);
      j.reasons.push_back(what + ", " + side + " the profile's warn limit of " +
                          FormatValue(spec.unit, *spec.abs_warn));
    }
    out.push_back(std::move(j));
  }
  return out;
}

}  // namespace fw::qualify
