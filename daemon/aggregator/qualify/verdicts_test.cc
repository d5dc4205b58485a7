// Peer-relative thresholds on synthetic sets of 8, and the profile's absolute limits.
#include "daemon/aggregator/qualify/verdicts.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace fw::qualify {
namespace {

using ::testing::HasSubstr;

MetricSpec Rtt() {
  MetricSpec s;
  s.label = "RTT p99";
  s.noise_floor = 50e-6;
  return s;
}

std::vector<Sample> Set(const std::vector<double>& ms) {
  std::vector<Sample> out;
  for (size_t i = 0; i < ms.size(); ++i) {
    out.push_back({"gpu" + std::to_string(i + 1), ms[i] * 1e-3, "to 7 peers"});
  }
  return out;
}

std::vector<Verdict> Verdicts(const std::vector<Judgement>& js) {
  std::vector<Verdict> v;
  for (const auto& j : js) v.push_back(j.verdict);
  return v;
}

TEST(Verdicts, OneOutlierAmongEightFailsWithTheMeasuredFigure) {
  auto js = JudgeSet(Rtt(), Set({0.40, 0.41, 0.39, 0.42, 0.38, 0.40, 2.4, 0.41}));
  const auto P = Verdict::kPass;
  EXPECT_EQ(Verdicts(js), (std::vector<Verdict>{P, P, P, P, P, P, Verdict::kFail, P}));
  ASSERT_EQ(js[6].reasons.size(), 1u);
  EXPECT_EQ(js[6].subject, "gpu7");
  EXPECT_THAT(js[6].reasons[0], HasSubstr("RTT p99 to 7 peers 2.4 ms, 5.9\xc3\x97 the set's median "
                                          "of 0.405 ms (fail at 3.0\xc3\x97, 8 members)"));
}

TEST(Verdicts, WideNaturalSpreadHasNoOutlier) {
  // Eight hosts from 1.0 to 3.1 ms: the slowest is 1.5x the median, but the MAD says that is
  // the set's normal spread, not an outlier.
  auto js = JudgeSet(Rtt(), Set({1.0, 1.3, 1.6, 1.9, 2.2, 2.5, 2.8, 3.1}));
  for (const auto& j : js) EXPECT_EQ(j.verdict, Verdict::kPass) << j.subject;
  // And a tight set with sub-noise differences: 5 us apart is not a finding.
  js = JudgeSet(Rtt(), Set({0.100, 0.101, 0.100, 0.102, 0.099, 0.100, 0.100, 0.140}));
  for (const auto& j : js) EXPECT_EQ(j.verdict, Verdict::kPass) << j.subject;
}

TEST(Verdicts, TwoOutliersAreBothFoundAndGradedBySize) {
  auto js = JudgeSet(Rtt(), Set({0.40, 2.4, 0.41, 0.39, 0.42, 1.0, 0.40, 0.41}));
  EXPECT_EQ(js[1].verdict, Verdict::kFail);
  EXPECT_EQ(js[5].verdict, Verdict::kWarn);  // 2.5x: above warn (1.5x), below fail (3x)
  EXPECT_THAT(js[5].reasons[0], HasSubstr("warn at 1.5\xc3\x97"));
  for (size_t i : {0u, 2u, 3u, 4u, 6u, 7u}) EXPECT_EQ(js[i].verdict, Verdict::kPass) << i;
}

TEST(Verdicts, LowerIsWorseForBandwidth) {
  MetricSpec bw;
  bw.label = "bandwidth";
  bw.unit = MetricSpec::Unit::kBitsPerSecond;
  bw.higher_is_worse = false;
  std::vector<Sample> s;
  for (int i = 0; i < 7; ++i) s.push_back({"h" + std::to_string(i), 9.4e9 + i * 1e7, ""});
  s.push_back({"slow", 0.9e9, "to 7 peers"});
  auto js = JudgeSet(bw, s);
  EXPECT_EQ(js.back().verdict, Verdict::kFail);
  // As a fraction of the median (about 9.42 Gbit/s); failing at a third of it.
  EXPECT_THAT(js.back().reasons[0],
              HasSubstr("bandwidth to 7 peers 900 Mbit/s, 0.10\xc3\x97 the set's median of 9.4"));
  EXPECT_THAT(js.back().reasons[0], HasSubstr("(fail at 0.33\xc3\x97"));
  for (size_t i = 0; i + 1 < js.size(); ++i) EXPECT_EQ(js[i].verdict, Verdict::kPass);
}

TEST(Verdicts, AbsoluteLimitsApplyEvenWhenTheWholeSetIsBad) {
  MetricSpec loss;
  loss.label = "loss";
  loss.unit = MetricSpec::Unit::kRatio;
  loss.noise_floor = 0.002;
  loss.abs_warn = 0.001;
  loss.abs_fail = 0.01;
  // Every member loses 5%: nobody is an outlier, yet everybody is beyond the profile.
  auto js = JudgeSet(loss, {{"a", 0.05, ""}, {"b", 0.05, ""}, {"c", 0.05, ""}, {"d", 0.002, ""}});
  EXPECT_EQ(js[0].verdict, Verdict::kFail);
  EXPECT_THAT(js[0].reasons[0], HasSubstr("loss 5%, above the profile's fail limit of 1%"));
  EXPECT_EQ(js[3].verdict, Verdict::kWarn);
  // Too few members for statistics: only the absolute limits speak.
  js = JudgeSet(Rtt(), Set({0.4, 4.0}));
  EXPECT_EQ(js[1].verdict, Verdict::kPass);
}

TEST(Verdicts, MissingMeasurementIsUnknownNotPass) {
  auto s = Set({0.4, 0.4, 0.4});
  s[1].value = NAN;
  auto js = JudgeSet(Rtt(), s);
  EXPECT_EQ(js[1].verdict, Verdict::kUnknown);
  EXPECT_THAT(js[1].reasons[0], HasSubstr("no measurement"));
  EXPECT_EQ(Worst(Verdict::kWarn, Verdict::kFail), Verdict::kFail);
}

}  // namespace
}  // namespace fw::qualify
