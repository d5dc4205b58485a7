// The pause/resume body: names in order without duplicates; every malformed body is refused with
// its reason.
#include "daemon/aggregator/collective/pause_request.h"

#include <gtest/gtest.h>

namespace fw::aggregator::collective {
namespace {

TEST(PauseRequest, NamesInOrderWithoutDuplicates) {
  auto n = ParsePauseRequest(R"({"nodes": ["gpu2", "gpu1", "gpu2"]})");
  ASSERT_TRUE(n.ok()) << n.status().message();
  EXPECT_EQ(*n, (std::vector<std::string>{"gpu2", "gpu1"}));
  auto empty = ParsePauseRequest(R"({"nodes": []})");
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(empty->empty());
}

TEST(PauseRequest, RefusesMalformedBodies) {
  for (const char* body : {"", "{nodes", "[]", R"({"node": ["a"]})", R"({"nodes": "a"})",
                           R"({"nodes": ["a", 3]})", R"({"nodes": [""]})"}) {
    auto n = ParsePauseRequest(body);
    EXPECT_FALSE(n.ok()) << body;
    EXPECT_EQ(n.status().code(), StatusCode::kInvalidArgument) << body;
  }
  EXPECT_FALSE(ParsePauseRequest(R"({"nodes": [")" + std::string(254, 'x') + R"("]})").ok());
}

}  // namespace
}  // namespace fw::aggregator::collective
