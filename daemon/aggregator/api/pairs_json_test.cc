// /api/v1/pairs: query parsing, filters, limit, ordering and the JSON shape.
#include "daemon/aggregator/api/pairs_json.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace fw::aggregator {
namespace {

using ::testing::HasSubstr;

TEST(PairsQueryTest, ParsesFiltersLimitAndEscapes) {
  auto q = ParsePairsQuery("?src=node%2D01&dst=b+c&limit=5&other=1");
  ASSERT_TRUE(q.ok()) << q.status().ToString();
  EXPECT_EQ(q->src, "node-01");
  EXPECT_EQ(q->dst, "b c");
  EXPECT_EQ(q->limit, 5u);
  auto defaults = ParsePairsQuery("");
  ASSERT_TRUE(defaults.ok());
  EXPECT_EQ(defaults->limit, 1000u);
  EXPECT_EQ(ParsePairsQuery("src=%zz%4").value().src, "%zz%4");  // malformed escapes kept as text
}

TEST(PairsQueryTest, RejectsABadLimitNamingIt) {
  for (const char* bad : {"limit=-1", "limit=ten", "limit=", "limit=5x", "limit=99999999999"}) {
    auto q = ParsePairsQuery(bad);
    ASSERT_FALSE(q.ok()) << bad;
    EXPECT_EQ(q.status().code(), StatusCode::kInvalidArgument);
    EXPECT_THAT(q.status().message(), HasSubstr("limit:"));
  }
}

class PairsJsonTest : public ::testing::Test {
 protected:
  PairsJsonTest() : table_(clock_, nullptr) {
    auto add = [&](const char* src, const char* dst, Transport t, int64_t rtt, bool lost,
                   double goodput = 0) {
      ReportedProbe r;
      r.src_node = src;
      r.dst_node = dst;
      r.transport = t;
      r.src_port = 40001;
      r.flow_id = 1;
      r.rtt_ns = rtt;
      r.lost = lost;
      r.goodput_bps = goodput;
      table_.Record(r);
    };
    add("b", "a", Transport::kUdp, 20'000, false);
    add("a", "c", Transport::kUdp, 30'000, false);
    add("a", "c", Transport::kUdp, 0, true);
    add("a", "b", Transport::kTcpBw, 40'000'000, false, 9.5e9);
    add("a", "b", Transport::kUdp, 25'000, false);
  }
  FakeClock clock_;
  PairTable table_;
};

TEST_F(PairsJsonTest, RowsAreSortedAndCarryAllWindows) {
  const PairsPage page = RenderPairs(table_, PairsQuery{}, clock_.MonotonicNanos());
  EXPECT_EQ(page.matched, 4u);
  ASSERT_EQ(page.rows.size(), 4u);
  EXPECT_EQ(page.rows[0]["src"], "a");
  EXPECT_EQ(page.rows[0]["dst"], "b");
  EXPECT_EQ(page.rows[0]["transport"], "udp");  // udp sorts before tcp_bw by enum order
  EXPECT_EQ(page.rows[1]["transport"], "tcp_bw");
  EXPECT_EQ(page.rows[3]["src"], "b");
  const auto& ac = page.rows[2];
  EXPECT_EQ(ac["dst"], "c");
  EXPECT_EQ(ac["path_class"], "unknown");
  EXPECT_EQ(ac["flows"], nlohmann::json::parse(R"([{"src_port": 40001, "flow_id": 1}])"));
  for (const char* w : {"10s", "60s", "600s"}) {
    ASSERT_TRUE(ac["windows"].contains(w)) << w;
    EXPECT_EQ(ac["windows"][w]["probes"], 2);
    EXPECT_DOUBLE_EQ(ac["windows"][w]["loss_ratio"].get<double>(), 0.5);
    EXPECT_NEAR(ac["windows"][w]["rtt_p50_s"].get<double>(), 30e-6, 1e-6);
    EXPECT_TRUE(ac["windows"][w]["bandwidth_bps"].is_null());
  }
  const auto& bw = page.rows[1]["windows"]["600s"];
  EXPECT_DOUBLE_EQ(bw["bandwidth_bps"].get<double>(), 9.5e9);
}

TEST_F(PairsJsonTest, FiltersAndLimit) {
  PairsQuery q;
  q.src = "a";
  q.limit = 2;
  PairsPage page = RenderPairs(table_, q, clock_.MonotonicNanos());
  EXPECT_EQ(page.matched, 3u);
  ASSERT_EQ(page.rows.size(), 2u);
  q = PairsQuery{};
  q.dst = "a";
  page = RenderPairs(table_, q, clock_.MonotonicNanos());
  ASSERT_EQ(page.rows.size(), 1u);
  EXPECT_EQ(page.rows[0]["src"], "b");
  q.src = "nobody";
  EXPECT_TRUE(RenderPairs(table_, q, clock_.MonotonicNanos()).rows.empty());
}

TEST_F(PairsJsonTest, EmptyWindowsRenderNullQuantiles) {
  clock_.Advance(std::chrono::seconds(30));
  const PairsPage page = RenderPairs(table_, PairsQuery{}, clock_.MonotonicNanos());
  const auto& w10 = page.rows[0]["windows"]["10s"];
  EXPECT_EQ(w10["probes"], 0);
  EXPECT_TRUE(w10["rtt_p99_s"].is_null());
  EXPECT_EQ(page.rows[0]["windows"]["60s"]["probes"], 1);
  // The whole page serializes (no NaN reaches the JSON text).
  EXPECT_THAT(page.rows.dump(), ::testing::Not(HasSubstr("NaN")));
}

}  // namespace
}  // namespace fw::aggregator
