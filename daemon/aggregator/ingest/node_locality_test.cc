// Node locality: the affinity matrix and PCIe rows survive the check report → API round trip, and
// the fleet keeps the latest parsable report per node.
#include "daemon/aggregator/ingest/node_locality.h"

#include <gtest/gtest.h>

#include <cmath>

#include "daemon/aggregator/ingest/fleet_state.h"
#include "exporter/registry.h"

namespace fw::aggregator {
namespace {

using nlohmann::json;

// The shape `fabricwatch-agent check --format json` prints (probes and ports trimmed).
const char* kCheckJson = R"({
  "node": "n1", "gpus": [], "nics": [],
  "affinity": [
    {"gpu": "GPU0", "nic": "mlx5_0", "class": "PXB"},
    {"gpu": "GPU0", "nic": "mlx5_1", "class": "SYS"},
    {"gpu": "GPU1", "nic": "mlx5_0", "class": "NODE"},
    {"gpu": "GPU1", "nic": "mlx5_1", "class": "PIX"}
  ],
  "pcie": [
    {"bdf": "0000:44:00.0", "role": "gpu", "for": "GPU0", "present": true,
     "current_speed_gts": 16.0, "max_speed_gts": 16.0, "current_width": 8, "max_width": 16,
     "problems": []},
    {"bdf": "0000:43:00.0", "role": "nic", "for": "mlx5_0", "present": false,
     "current_speed_gts": null, "max_speed_gts": null, "current_width": null, "max_width": null,
     "problems": ["cannot read current_link_speed"]}
  ],
  "ports": [], "findings": []})";

TEST(NodeLocalityTest, AffinityRoundTripsAsMatrix) {
  auto loc = LocalityFromCheckJson(kCheckJson);
  ASSERT_TRUE(loc.ok()) << loc.status().message();
  EXPECT_TRUE(loc->reported);
  EXPECT_EQ(loc->gpus, (std::vector<std::string>{"GPU0", "GPU1"}));
  EXPECT_EQ(loc->nics, (std::vector<std::string>{"mlx5_0", "mlx5_1"}));
  EXPECT_EQ(AffinityJson(*loc), json::parse(kCheckJson)["affinity"]);
}

TEST(NodeLocalityTest, PcieKeepsKnownValuesAndNullsUnknownOnes) {
  auto loc = LocalityFromCheckJson(kCheckJson);
  ASSERT_TRUE(loc.ok());
  const json pcie = PcieJson(*loc);
  ASSERT_EQ(pcie.size(), 2u);
  EXPECT_EQ(pcie[0]["bdf"], "0000:44:00.0");
  EXPECT_EQ(pcie[0]["role"], "gpu");
  EXPECT_EQ(pcie[0]["for"], "GPU0");
  EXPECT_EQ(pcie[0]["present"], true);
  EXPECT_DOUBLE_EQ(pcie[0]["current_speed_gts"].get<double>(), 16.0);
  EXPECT_EQ(pcie[0]["current_width"], 8);
  EXPECT_EQ(pcie[0]["max_width"], 16);
  EXPECT_EQ(pcie[1]["present"], false);
  EXPECT_TRUE(pcie[1]["current_speed_gts"].is_null());
  EXPECT_TRUE(pcie[1]["max_width"].is_null());
}

TEST(NodeLocalityTest, MatrixWithMissingCellsAndUnknownClassesOmitsThem) {
  auto loc = LocalityFromCheckJson(R"({"affinity": [
      {"gpu": "GPU0", "nic": "mlx5_0", "class": "PHB"},
      {"gpu": "GPU1", "nic": "mlx5_1", "class": "NV12"},
      {"gpu": "GPU1", "nic": "mlx5_2", "class": "SYS"},
      {"gpu": 3, "nic": "mlx5_0", "class": "SYS"}, "junk"]})");
  ASSERT_TRUE(loc.ok());
  EXPECT_EQ(AffinityJson(*loc), json::parse(R"([{"gpu": "GPU0", "nic": "mlx5_0", "class": "PHB"},
      {"gpu": "GPU1", "nic": "mlx5_2", "class": "SYS"}])"));
  EXPECT_TRUE(PcieJson(*loc).empty());
}

TEST(NodeLocalityTest, GarbageIsAnErrorNotAnEmptyNode) {
  EXPECT_EQ(LocalityFromCheckJson("").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(LocalityFromCheckJson("{not json").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(LocalityFromCheckJson("[]").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(LocalityFromCheckJson(R"({"node": "n1"})").status().code(),
            StatusCode::kInvalidArgument);
}

TEST(NodeLocalityTest, FleetKeepsLatestParsableReport) {
  FakeClock clock;
  metrics::Registry reg;
  FleetState fleet(clock, reg, {});
  fabricwatch::v1::Hello hello;
  hello.set_node("n1");
  hello.set_session_id(1);
  fleet.OnHello(1, hello);
  ASSERT_FALSE(fleet.Nodes()[0].locality.reported);

  fabricwatch::v1::CheckReport report;
  report.set_json(kCheckJson);
  report.set_exit_code(2);
  fleet.OnCheckReport("n1", report);
  NodeView n = fleet.Nodes()[0];
  EXPECT_EQ(n.health, "critical");
  EXPECT_TRUE(n.locality.reported);
  EXPECT_EQ(n.locality.pcie.size(), 2u);

  // A report without a document (the agent could not check) updates health but keeps the last
  // known topology: it does not change because one check failed.
  fabricwatch::v1::CheckReport empty;
  empty.set_exit_code(3);
  fleet.OnCheckReport("n1", empty);
  n = fleet.Nodes()[0];
  EXPECT_EQ(n.health, "unknown");
  EXPECT_EQ(n.locality.pcie.size(), 2u);
}

}  // namespace
}  // namespace fw::aggregator
