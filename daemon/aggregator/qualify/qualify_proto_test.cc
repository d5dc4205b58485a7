// The Qualify RPC's messages carry what the HTTP API's JSON does: suite and job in the request;
// id, state, note, suite, profile, job, node and pair verdicts, steps and times in the report.
#include "daemon/aggregator/qualify/qualify_proto.h"

#include <gtest/gtest.h>

namespace fw::qualify {
namespace {

TEST(QualifyProto, RequestCarriesSuiteJobProfileAndTimeout) {
  fabricwatch::v1::QualifyRequest in;
  in.add_nodes("gpu001");
  in.add_nodes("gpu002");
  in.set_profile("h100");
  in.set_timeout_s(12.5);
  in.set_suite("full");
  in.set_job("4711");
  const QualifyJobRequest r = FromProto(in);
  EXPECT_EQ(r.nodes, (std::vector<std::string>{"gpu001", "gpu002"}));
  EXPECT_EQ(r.profile, "h100");
  EXPECT_EQ(r.timeout_s, 12.5);
  EXPECT_EQ(r.suite, "full");
  EXPECT_EQ(r.job, "4711");
}

TEST(QualifyProto, EmptyRequestFieldsTakeTheDefaults) {
  fabricwatch::v1::QualifyRequest in;
  in.add_nodes("a");
  const QualifyJobRequest r = FromProto(in);
  EXPECT_EQ(r.suite, "");  // the jobs read "" as quick
  EXPECT_EQ(r.job, "");
  EXPECT_EQ(r.timeout_s, QualifyJobRequest{}.timeout_s);
}

TEST(QualifyProto, ReportCarriesEveryField) {
  QualifyReport r;
  r.id = "q1-1";
  r.job = "4711";
  r.suite = "full";
  r.profile = "generic";
  r.state = "timeout";
  r.note = "the timeout came during step mesh";
  r.duration_s = 4.5;
  r.queued_s = 1.25;
  r.nodes = {{"a", Verdict::kPass, {}}, {"b", Verdict::kFail, {"agent down: last heard 9 s ago"}}};
  r.pairs = {{"a", "c", Verdict::kWarn, {"loss 3%"}}};
  r.steps = {{"agents", "done", 0.01, "1 up"}, {"bandwidth", "skipped", 0, "why"}};
  r.exit_code = 3;
  fabricwatch::v1::QualifyReport out;
  ToProto(r, &out);
  EXPECT_EQ(out.id(), "q1-1");
  EXPECT_EQ(out.job(), "4711");
  EXPECT_EQ(out.suite(), "full");
  EXPECT_EQ(out.profile(), "generic");
  EXPECT_EQ(out.state(), "timeout");
  EXPECT_EQ(out.note(), r.note);
  EXPECT_EQ(out.duration_s(), 4.5);
  EXPECT_EQ(out.queued_s(), 1.25);
  EXPECT_EQ(out.exit_code(), 3);
  ASSERT_EQ(out.nodes_size(), 2);
  EXPECT_EQ(out.nodes(1).node(), "b");
  EXPECT_EQ(out.nodes(1).verdict(), "fail");
  ASSERT_EQ(out.nodes(1).reasons_size(), 1);
  EXPECT_EQ(out.nodes(1).reasons(0), "agent down: last heard 9 s ago");
  // Pairs are their own list now, not folded into the nodes' reasons.
  EXPECT_EQ(out.nodes(0).reasons_size(), 0);
  ASSERT_EQ(out.pairs_size(), 1);
  EXPECT_EQ(out.pairs(0).src(), "a");
  EXPECT_EQ(out.pairs(0).dst(), "c");
  EXPECT_EQ(out.pairs(0).verdict(), "warn");
  EXPECT_EQ(out.pairs(0).reasons(0), "loss 3%");
  ASSERT_EQ(out.steps_size(), 2);
  EXPECT_EQ(out.steps(1).name(), "bandwidth");
  EXPECT_EQ(out.steps(1).state(), "skipped");
  EXPECT_EQ(out.steps(0).duration_s(), 0.01);
  EXPECT_EQ(out.steps(0).note(), "1 up");
}

}  // namespace
}  // namespace fw::qualify
