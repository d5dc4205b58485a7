// The agent's report pacing: the plan's interval, and which results go at once.
#include "daemon/agent/batch_pacer.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace fw::agent {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

net::ProbeResult Result(const char* peer, bool lost) {
  net::ProbeResult r;
  r.SetPeer(peer);
  r.lost = lost;
  return r;
}

TEST(BatchPacerTest, IntervalComesFromThePlanWithinBounds) {
  BatchPacer p(seconds(1));
  EXPECT_EQ(p.interval(), seconds(1));
  fabricwatch::v1::ProbePlan plan;
  plan.set_report_interval_ms(2000);
  p.SetPlan(plan);
  EXPECT_EQ(p.interval(), seconds(2));
  plan.set_report_interval_ms(0);  // an aggregator that does not pace: the default
  p.SetPlan(plan);
  EXPECT_EQ(p.interval(), seconds(1));
  plan.set_report_interval_ms(10);
  p.SetPlan(plan);
  EXPECT_EQ(p.interval(), BatchPacer::kMinInterval);
  plan.set_report_interval_ms(3'600'000);
  p.SetPlan(plan);
  EXPECT_EQ(p.interval(), BatchPacer::kMaxInterval);
}

TEST(BatchPacerTest, BadNewsAndEscalatedFlowsAreUrgent) {
  BatchPacer p(seconds(1));
  EXPECT_TRUE(p.Urgent(Result("b", /*lost=*/true)));  // loss, timeout, failed burst
  EXPECT_FALSE(p.Urgent(Result("b", false)));
  fabricwatch::v1::ProbePlan plan;
  plan.set_report_interval_ms(2000);
  plan.add_trace_requests()->set_peer("b");  // escalation traces the suspect pair's flows
  p.SetPlan(plan);
  EXPECT_TRUE(p.Urgent(Result("b", false)));
  EXPECT_FALSE(p.Urgent(Result("c", false)));
  EXPECT_TRUE(p.Urgent(Result("c", true)));
  plan.clear_trace_requests();  // the escalation ended
  p.SetPlan(plan);
  EXPECT_FALSE(p.Urgent(Result("b", false)));
}

TEST(BatchPacerTest, UrgentResultsGoAtOnceButAtMostEveryMinGap) {
  const auto last = BatchPacer::Clock::now();
  EXPECT_EQ(BatchPacer::Due(last, seconds(2), false), last + seconds(2));
  // Urgent: 250 ms after the previous batch (at once when that is longer ago).
  EXPECT_EQ(BatchPacer::Due(last, seconds(2), true), last + BatchPacer::kMinUrgentGap);
  EXPECT_LT(BatchPacer::Due(last - seconds(1), seconds(2), true), last);
  // Never later than the interval itself.
  EXPECT_EQ(BatchPacer::Due(last, milliseconds(100), true), last + milliseconds(100));
}

// The counter pass and the batch share wakeups: either one due takes the other along when it is
// due within half the shorter period, and never from further away.
TEST(BatchPacerTest, ThePassAndTheBatchGoTogetherWhenCloseAndApartOtherwise) {
  const auto now = BatchPacer::Clock::now();
  auto jobs = [&](milliseconds pass_in, milliseconds pass_period, milliseconds batch_in,
                  milliseconds batch_interval) {
    auto j = BatchPacer::DueTogether(now, now + pass_in, pass_period, now + batch_in,
                                     batch_interval);
    return std::make_pair(j.pass, j.batch);
  };
  using P = std::pair<bool, bool>;
  EXPECT_EQ(jobs(milliseconds(0), seconds(1), milliseconds(300), seconds(1)), P(true, true));
  EXPECT_EQ(jobs(milliseconds(400), seconds(1), milliseconds(-5), seconds(1)), P(true, true));
  EXPECT_EQ(jobs(milliseconds(0), seconds(1), milliseconds(600), seconds(1)), P(true, false));
  EXPECT_EQ(jobs(milliseconds(700), seconds(1), milliseconds(0), seconds(1)), P(false, true));
  EXPECT_EQ(jobs(milliseconds(10), seconds(1), milliseconds(20), seconds(1)), P(false, false));
  // A 5 s batch interval with 1 s passes: a batch goes at most half a pass period early.
  EXPECT_EQ(jobs(milliseconds(0), seconds(1), milliseconds(600), seconds(5)), P(true, false));
  EXPECT_EQ(jobs(milliseconds(0), seconds(1), milliseconds(400), seconds(5)), P(true, true));
}

// The report loop's schedule over a minute (wakeups 1 ms late, as Agent::RunReportWork takes
// them): with urgent results waiting all the time (a peer whose every probe is lost, or an
// escalated one), batches go every kMinUrgentGap and take the pass along whenever it is due
// within half a period. The pass still runs once a period; re-armed a period after the wakeup
// that took it early, it would run twice as often.
TEST(BatchPacerTest, UrgentBatchesDoNotMakeThePassRunMoreOftenThanItsPeriod) {
  using Clock = BatchPacer::Clock;
  const seconds period(1), interval(1);
  struct Count {
    int passes = 0, batches = 0;
    Clock::duration shortest_pass_gap = std::chrono::hours(1);
  };
  auto simulate = [&](bool urgent, bool from_due) {
    const Clock::time_point start = Clock::time_point{} + seconds(100);
    Clock::time_point next_pass = start + period, last_batch = start, last_pass = start;
    Count c;
    for (;;) {
      const Clock::time_point batch_due = BatchPacer::Due(last_batch, interval, urgent);
      const Clock::time_point now = std::min(next_pass, batch_due) + milliseconds(1);
      if (now >= start + seconds(60)) return c;
      const auto j = BatchPacer::DueTogether(now, next_pass, period, batch_due, interval);
      if (j.batch) {
        ++c.batches;
        last_batch = now;
      }
      if (j.pass) {
        ++c.passes;
        c.shortest_pass_gap = std::min(c.shortest_pass_gap, now - last_pass);
        last_pass = now;
        next_pass = from_due ? BatchPacer::NextPass(now, next_pass, period) : now + period;
      }
    }
  };
  const Count urgent = simulate(true, true);
  EXPECT_GE(urgent.passes, 59);
  EXPECT_LE(urgent.passes, 61);
  EXPECT_GE(urgent.batches, 200);  // every 250-500 ms
  EXPECT_GE(urgent.shortest_pass_gap, milliseconds(500));
  const Count calm = simulate(false, true);
  EXPECT_GE(calm.passes, 58);
  EXPECT_LE(calm.passes, 60);
  EXPECT_EQ(calm.batches, calm.passes);  // one phase: every batch with a pass
  EXPECT_GE(simulate(true, false).passes, 100);  // re-armed from the wakeup: about 2 a second
}

}  // namespace
}  // namespace fw::agent
