// Slurm hostlist expansion: the forms Slurm writes, padding, order, and the refusals.
#include "daemon/cli/hostlist.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace fw::cli {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::vector<std::string> Ok(std::string_view s, const HostlistLimits& l = {}) {
  auto r = ExpandHostlist(s, l);
  EXPECT_TRUE(r.ok()) << s << ": " << r.status().message();
  return r.ok() ? *r : std::vector<std::string>{};
}

std::string Err(std::string_view s, const HostlistLimits& l = {}) {
  auto r = ExpandHostlist(s, l);
  EXPECT_FALSE(r.ok()) << s << " expanded to " << (r.ok() ? r->size() : 0) << " names";
  return r.ok() ? "" : r.status().message();
}

TEST(Hostlist, CommaListKeepsOrderAndDropsDuplicates) {
  EXPECT_THAT(Ok("h3,h1,h2,h1"), ElementsAre("h3", "h1", "h2"));
  EXPECT_THAT(Ok(" a , b\tc\n"), ElementsAre("a", "b", "c"));
}

TEST(Hostlist, SlurmRangesWithPaddingAndSeveralGroups) {
  auto v = Ok("gpu[001-016,020],dgx-a[1-2]");
  ASSERT_EQ(v.size(), 19u);
  EXPECT_EQ(v.front(), "gpu001");
  EXPECT_EQ(v[15], "gpu016");
  EXPECT_EQ(v[16], "gpu020");
  EXPECT_EQ(v[17], "dgx-a1");
  EXPECT_EQ(v[18], "dgx-a2");
  EXPECT_THAT(Ok("n[8-10]"), ElementsAre("n8", "n9", "n10"));
  EXPECT_THAT(Ok("n[08-10]"), ElementsAre("n08", "n09", "n10"));
  EXPECT_THAT(Ok("r[1-2]-n[01-02].ib"),
              ElementsAre("r1-n01.ib", "r1-n02.ib", "r2-n01.ib", "r2-n02.ib"));
  EXPECT_THAT(Ok("[1-2]x"), ElementsAre("1x", "2x"));
  EXPECT_THAT(Ok("n[5]"), ElementsAre("n5"));
}

TEST(Hostlist, MalformedExpressionsNameTheProblem) {
  EXPECT_THAT(Err("gpu[1-4"), HasSubstr("without a matching ']'"));
  EXPECT_THAT(Err("gpu1-4]"), HasSubstr("without a matching '['"));
  EXPECT_THAT(Err("gpu[4-1]"), HasSubstr("runs backwards"));
  EXPECT_THAT(Err("gpu[a-b]"), HasSubstr("not a number"));
  EXPECT_THAT(Err("gpu[1-]"), HasSubstr("empty number"));
  EXPECT_THAT(Err("gpu[[1]]"), HasSubstr("nested"));
  EXPECT_THAT(Err("gpu;rm"), HasSubstr("cannot be part of a node name"));
  EXPECT_THAT(Err(""), HasSubstr("names no nodes"));
  EXPECT_THAT(Err(",,"), HasSubstr("names no nodes"));
  EXPECT_THAT(Err("n[1234567890123456789]"), HasSubstr("digits"));
}

TEST(Hostlist, RefusesASetLargerThanTheMaximumInsteadOfTruncating) {
  HostlistLimits l;
  l.max_hosts = 16;
  EXPECT_EQ(Ok("gpu[01-16]", l).size(), 16u);
  EXPECT_THAT(Err("gpu[01-17]", l), HasSubstr("more than 16 names"));
  EXPECT_THAT(Err("gpu[01-10],gpu[11-17]", l), HasSubstr("more than 16"));
  // Multiplying groups is counted before anything is built.
  EXPECT_THAT(Err("a[0-999999999]b[0-999999999]c[0-999999999]"), HasSubstr("more than 4096"));
  l.max_input = 8;
  EXPECT_THAT(Err("abcdefghi", l), HasSubstr("longer than the limit"));
}

TEST(Hostlist, NodesFileTakesLinesAndComments) {
  auto r = ExpandHostlistFile("# the job's nodes\ngpu[1-2]  gpu3\n\ngpu2,dgx1 # spare\n");
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_THAT(*r, ElementsAre("gpu1", "gpu2", "gpu3", "dgx1"));
  auto bad = ExpandHostlistFile("gpu1\ngpu[2\n");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("line 2"));
  EXPECT_FALSE(ExpandHostlistFile("# nothing\n").ok());
}

}  // namespace
}  // namespace fw::cli
