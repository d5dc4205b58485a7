// Query strings as the API handlers see them.
#include "daemon/aggregator/api/query_string.h"

#include <gtest/gtest.h>

namespace fw::aggregator {
namespace {

using Params = std::vector<std::pair<std::string, std::string>>;

TEST(QueryStringTest, SplitsDecodesAndKeepsOrder) {
  EXPECT_EQ(ParseQueryString(""), Params{});
  EXPECT_EQ(ParseQueryString("?"), Params{});
  EXPECT_EQ(ParseQueryString("?a=1&b=x%20y&c&d=&b=2"),
            (Params{{"a", "1"}, {"b", "x y"}, {"c", ""}, {"d", ""}, {"b", "2"}}));
  EXPECT_EQ(ParseQueryString("src=node+01&&dst=n%2Fb"),
            (Params{{"src", "node 01"}, {"dst", "n/b"}}));
}

TEST(QueryStringTest, MalformedEscapesStayLiteral) {
  EXPECT_EQ(ParseQueryString("a=%zz&b=%4&c=100%"),
            (Params{{"a", "%zz"}, {"b", "%4"}, {"c", "100%"}}));
}

}  // namespace
}  // namespace fw::aggregator
