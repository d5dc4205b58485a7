// GET /api/v1/nodes query parameters: a name filter and the opt-in topology fields.
#include "daemon/aggregator/api/nodes_query.h"

#include <gtest/gtest.h>

namespace fw::aggregator {
namespace {

TEST(NodesQueryTest, PlainListHasNoTopology) {
  auto q = ParseNodesQuery("");
  ASSERT_TRUE(q.ok());
  EXPECT_TRUE(q->name.empty());
  EXPECT_FALSE(q->WithTopology());
}

TEST(NodesQueryTest, NamingANodeBringsItsTopology) {
  auto q = ParseNodesQuery("?name=gpu%2Dnode%2001&other=x");
  ASSERT_TRUE(q.ok());
  EXPECT_EQ(q->name, "gpu-node 01");
  EXPECT_TRUE(q->WithTopology());
}

TEST(NodesQueryTest, TopologyFlagValues) {
  EXPECT_TRUE(ParseNodesQuery("topology")->WithTopology());
  EXPECT_TRUE(ParseNodesQuery("topology=true")->WithTopology());
  EXPECT_TRUE(ParseNodesQuery("topology=1")->WithTopology());
  EXPECT_FALSE(ParseNodesQuery("topology=false")->WithTopology());
  EXPECT_FALSE(ParseNodesQuery("topology=0")->WithTopology());
  auto bad = ParseNodesQuery("topology=yes");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("topology"), std::string::npos);
}

}  // namespace
}  // namespace fw::aggregator
