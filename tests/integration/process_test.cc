// The child-process helpers other integration tests rely on to tell a live daemon from a dead one.
#include "tests/integration/process.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <string>

namespace fw::testing {
namespace {

TEST(ProcessTest, RunningSeesAChildThatExited) {
  TempDir dir;
  Process p({"/bin/sh", "-c", "exit 3"}, dir.path() + "/log");
  // running() must poll: a child that has exited reads as not running within a generous bound.
  ASSERT_TRUE(WaitUntil([&] { return !p.running(); }, std::chrono::seconds(30)));
  ASSERT_TRUE(WIFEXITED(p.status()));
  EXPECT_EQ(WEXITSTATUS(p.status()), 3);
  EXPECT_EQ(p.Wait(std::chrono::milliseconds(0)), p.status());
}

TEST(ProcessTest, RunningHoldsForALiveChildUntilItIsKilled) {
  TempDir dir;
  Process p({"/bin/sleep", "60"}, dir.path() + "/log");
  EXPECT_TRUE(p.running());
  EXPECT_EQ(p.Wait(std::chrono::milliseconds(0)), -1);
  p.Signal(SIGKILL);
  ASSERT_TRUE(WaitUntil([&] { return !p.running(); }, std::chrono::seconds(30)));
  ASSERT_TRUE(WIFSIGNALED(p.status()));
  EXPECT_EQ(WTERMSIG(p.status()), SIGKILL);
}

}  // namespace
}  // namespace fw::testing
