// Which fabric link the probe mesh names for a bisection that ended between leaves.
#include "daemon/aggregator/collective/mesh_corroboration.h"

#include <gtest/gtest.h>

namespace fw::aggregator::collective {
namespace {

MeshLink Link(std::string a, std::string b, std::string state, double loss = 0) {
  MeshLink l;
  l.id = a + "~" + b;
  l.a = std::move(a);
  l.b = std::move(b);
  l.a_tier = l.a.starts_with("leaf") ? "leaf" : (l.a.starts_with("spine") ? "spine" : "host");
  l.b_tier = l.b.starts_with("leaf") ? "leaf" : (l.b.starts_with("spine") ? "spine" : "host");
  l.state = std::move(state);
  l.loss_ratio = loss;
  return l;
}

std::vector<MeshLink> Fabric() {
  return {Link("leaf1", "spine1", "ok"),           Link("leaf1", "spine2", "ok"),
          Link("leaf2", "spine1", "ok"),           Link("leaf2", "spine2", "unknown"),
          Link("leaf3", "spine1", "ok"),           Link("leaf3", "spine2", "ok"),
          Link("node05", "leaf2", "degraded", 0.2)};
}

TEST(MeshCorroboration, HealthyMeshCorroboratesNothing) {
  const std::vector<MeshLink> links = Fabric();
  EXPECT_EQ(CorroboratingLink(links, "leaf2", ""), nullptr);
  EXPECT_EQ(CorroboratingLink(links, "leaf2", "leaf3"), nullptr);
  EXPECT_EQ(CorroboratingLink({}, "leaf2", ""), nullptr);
}

TEST(MeshCorroboration, HostLinksAndOtherLeavesNeverQualify) {
  std::vector<MeshLink> links = Fabric();
  links[0].state = "down";  // leaf1~spine1: not an uplink of leaf2
  EXPECT_EQ(CorroboratingLink(links, "leaf2", ""), nullptr);  // node05~leaf2 is a host link
  EXPECT_FALSE(IsCandidate(links[6], "leaf2", ""));
  EXPECT_TRUE(IsCandidate(links[2], "leaf2", ""));
  EXPECT_TRUE(IsCandidate(links[4], "leaf2", "leaf3"));
  EXPECT_FALSE(IsCandidate(links[4], "leaf2", ""));
}

TEST(MeshCorroboration, TheDegradedUplinkOfTheLeaf) {
  std::vector<MeshLink> links = Fabric();
  links[3].state = "degraded";  // leaf2~spine2
  const MeshLink* l = CorroboratingLink(links, "leaf2", "");
  ASSERT_NE(l, nullptr);
  EXPECT_EQ(l->id, "leaf2~spine2");
  // Either leaf of a pair.
  l = CorroboratingLink(links, "leaf3", "leaf2");
  ASSERT_NE(l, nullptr);
  EXPECT_EQ(l->id, "leaf2~spine2");
}

TEST(MeshCorroboration, WorstStateThenMostLossWins) {
  std::vector<MeshLink> links = Fabric();
  links[2].state = "congested";  // leaf2~spine1
  links[2].loss_ratio = 0.3;
  links[3].state = "degraded";  // leaf2~spine2: a worse state beats more loss
  links[3].loss_ratio = 0.01;
  EXPECT_EQ(CorroboratingLink(links, "leaf2", "")->id, "leaf2~spine2");
  links[2].state = "degraded";
  EXPECT_EQ(CorroboratingLink(links, "leaf2", "")->id, "leaf2~spine1");
  links[4].state = "down";  // leaf3~spine1, for the pair
  EXPECT_EQ(CorroboratingLink(links, "leaf2", "leaf3")->id, "leaf3~spine1");
}

TEST(MeshCorroboration, EndpointOrderDoesNotMatter) {
  std::vector<MeshLink> links = {Link("spine1", "leaf2", "flapping")};
  ASSERT_NE(CorroboratingLink(links, "leaf2", ""), nullptr);
  EXPECT_EQ(CorroboratingLink(links, "leaf2", "")->id, "spine1~leaf2");
}

}  // namespace
}  // namespace fw::aggregator::collective
