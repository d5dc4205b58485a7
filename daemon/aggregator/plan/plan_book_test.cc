// The plans as agents get them: each carries its responder's allow list (the addresses of the
// nodes whose plans name it), and a list that changes alone still gives the plan a new version.
#include "daemon/aggregator/plan/plan_book.h"
#include "daemon/aggregator/plan/escalation.h"
#include "daemon/aggregator/plan/testing/leaf_spine.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <iterator>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "common/testing/temp_dir.h"
#include "exporter/registry.h"

namespace fw::aggregator {
namespace {

AgentInfo Agent(const std::string& name, const std::string& address) {
  AgentInfo a;
  a.node = name;
  a.endpoints.push_back({address, 9753, ""});
  return a;
}

class PlanBookTest : public ::testing::Test {
 protected:
  PlanBookTest() : book_(PlannerConfig{}, nullptr, clock_, registry_) {
    EXPECT_TRUE(book_.Start(dir_.path()).ok());
  }
  // A membership change, then a re-plan once the fleet has settled.
  void Replan(const std::vector<AgentInfo>& live) {
    book_.NoteMembershipChange();
    clock_.Advance(std::chrono::seconds(60));
    ASSERT_TRUE(book_.MaybeReplan(clock_.MonotonicNanos(), [&] { return live; }));
  }
  std::set<std::string> Allowed(const std::string& node) {
    auto plan = book_.PlanFor(node);
    EXPECT_TRUE(plan.has_value()) << node;
    if (!plan) return {};
    return {plan->allowed_probers().begin(), plan->allowed_probers().end()};
  }

  fw::testing::TempDir dir_{"fw-planbook"};
  FakeClock clock_;
  metrics::Registry registry_;
  PlanBook book_;
};

TEST_F(PlanBookTest, EachPlanCarriesTheAddressesOfItsProbers) {
  // A full mesh of three (no fabric map): everyone probes everyone else.
  Replan({Agent("a", "10.0.0.1"), Agent("b", "10.0.0.2"), Agent("c", "10.0.0.3")});
  EXPECT_EQ(Allowed("a"), (std::set<std::string>{"10.0.0.2", "10.0.0.3"}));
  EXPECT_EQ(Allowed("c"), (std::set<std::string>{"10.0.0.1", "10.0.0.2"}));
  const uint64_t v1 = book_.PlanFor("a")->version();
  EXPECT_GT(v1, 0u);
  EXPECT_FALSE(book_.PlanFor("unknown").has_value());
  // Report pacing: a small fleet reports every second, a large one every 2 s (docs/uplink.md).
  EXPECT_EQ(book_.PlanFor("a")->report_interval_ms(), 1000u);
  EXPECT_EQ(ReportIntervalMs(kLargeFleetNodes - 1), 1000u);
  EXPECT_EQ(ReportIntervalMs(kLargeFleetNodes), 2000u);

  // The same fleet again: nothing changed, no new version.
  Replan({Agent("a", "10.0.0.1"), Agent("b", "10.0.0.2"), Agent("c", "10.0.0.3")});
  EXPECT_EQ(book_.PlanFor("a")->version(), v1);

  // b moves to another address: a's peers are the same nodes, but its list changed, so a's plan
  // gets a new version (an agent ignores a plan whose version is not newer than its own).
  Replan({Agent("a", "10.0.0.1"), Agent("b", "10.0.9.2"), Agent("c", "10.0.0.3")});
  EXPECT_EQ(Allowed("a"), (std::set<std::string>{"10.0.9.2", "10.0.0.3"}));
  EXPECT_GT(book_.PlanFor("a")->version(), v1);
}

// An escalation overlay's short probe timeout reaches both ends' entries toward each other on the
// wire (PlannedPeer.timeout_ms); every other entry keeps 0 (the agent's default), and so do the
// escalated ones once the overlay ends.
TEST_F(PlanBookTest, AnEscalatedPairsEntriesCarryTheOverlaysProbeTimeout) {
  const std::vector<AgentInfo> live = {Agent("a", "10.0.0.1"), Agent("b", "10.0.0.2"),
                                       Agent("c", "10.0.0.3")};
  Replan(live);
  auto timeouts = [&](const std::string& node) {
    std::map<std::string, uint32_t> out;
    const auto plan = book_.PlanFor(node);
    EXPECT_TRUE(plan.has_value()) << node;
    if (!plan) return out;
    for (const fabricwatch::v1::PlannedPeer& p : plan->peers()) out[p.node()] = p.timeout_ms();
    return out;
  };
  EXPECT_EQ(timeouts("a"), (std::map<std::string, uint32_t>{{"b", 0}, {"c", 0}}));
  PlanOverlay o{"escalation:a~b", {"a", "b"}, 10, 1};
  o.probe_timeout_ms = 250;
  book_.SetOverlay(o);
  clock_.Advance(std::chrono::seconds(60));
  ASSERT_TRUE(book_.MaybeReplan(clock_.MonotonicNanos(), [&] { return live; }));
  EXPECT_EQ(timeouts("a"), (std::map<std::string, uint32_t>{{"b", 250}, {"c", 0}}));
  EXPECT_EQ(timeouts("b"), (std::map<std::string, uint32_t>{{"a", 250}, {"c", 0}}));
  EXPECT_EQ(timeouts("c"), (std::map<std::string, uint32_t>{{"a", 0}, {"b", 0}}));
  EXPECT_EQ(book_.PlanFor("a")->probe_timeout_ms(), 0u);  // the plan-wide one: the agent's
  book_.ClearOverlay(o.id);
  clock_.Advance(std::chrono::seconds(60));
  ASSERT_TRUE(book_.MaybeReplan(clock_.MonotonicNanos(), [&] { return live; }));
  EXPECT_EQ(timeouts("a"), (std::map<std::string, uint32_t>{{"b", 0}, {"c", 0}}));
}

// Overlay changes alone re-plan within a quarter second of each other (an escalation lead started
// between ticks reaches its agents in the pass that started it), at least kPartialSpacingNs
// (200 ms) apart on a fleet whose partial re-plan costs little.
TEST_F(PlanBookTest, OverlayChangesReplanWithinAQuarterSecondOfEachOther) {
  const std::vector<AgentInfo> live = {Agent("a", "10.0.0.1"), Agent("b", "10.0.0.2"),
                                       Agent("c", "10.0.0.3")};
  Replan(live);
  auto rate = [&](const std::string& node) {
    double out = 0;
    const auto plan = book_.PlanFor(node);
    EXPECT_TRUE(plan.has_value()) << node;
    if (!plan) return out;
    for (const fabricwatch::v1::PlannedPeer& p : plan->peers()) out = std::max(out, p.rate_pps());
    return out;
  };
  const PlanOverlay o{"escalation:a~b", {"a", "b"}, 30, 1};
  book_.SetOverlay(o);
  clock_.Advance(std::chrono::milliseconds(250));
  ASSERT_TRUE(book_.MaybeReplan(clock_.MonotonicNanos(), [&] { return live; }));
  EXPECT_DOUBLE_EQ(rate("a"), 30);
  book_.ClearOverlay(o.id);
  clock_.Advance(std::chrono::milliseconds(250));
  ASSERT_TRUE(book_.MaybeReplan(clock_.MonotonicNanos(), [&] { return live; }));
  EXPECT_DOUBLE_EQ(rate("a"), 1);
  book_.SetOverlay(o);
  clock_.Advance(std::chrono::milliseconds(100));
  EXPECT_FALSE(book_.MaybeReplan(clock_.MonotonicNanos(), [&] { return live; }));
  clock_.Advance(std::chrono::milliseconds(100));
  EXPECT_TRUE(book_.MaybeReplan(clock_.MonotonicNanos(), [&] { return live; }));
  EXPECT_DOUBLE_EQ(rate("b"), 30);
}

// An escalation that raises some flows of a pair puts them on the wire (PlannedPeer.raised_flows,
// with the rate of the others in unraised_rate_pps); the other direction, none of whose flows
// crossed, stays as planned; every plan is plain again once the overlay ends.
TEST_F(PlanBookTest, AnEscalationOfSomeFlowsListsThemOnTheWire) {
  const std::vector<AgentInfo> live = {Agent("a", "10.0.0.1"), Agent("b", "10.0.0.2"),
                                       Agent("c", "10.0.0.3")};
  Replan(live);
  auto entry = [&](const std::string& node, const std::string& peer) {
    fabricwatch::v1::PlannedPeer out;
    const auto plan = book_.PlanFor(node);
    EXPECT_TRUE(plan.has_value()) << node;
    if (!plan) return out;
    for (const fabricwatch::v1::PlannedPeer& p : plan->peers()) {
      if (p.node() == peer) out = p;
    }
    return out;
  };
  const double base = entry("a", "b").rate_pps();
  ASSERT_GT(base, 0);
  ASSERT_EQ(entry("a", "b").src_ports_size(), 4);  // the map-less mesh's flows
  PlanOverlay o{"escalation:a~b", {"a", "b"}, 10 * base, 1};
  o.flow_sets = {FlowBit(0) | FlowBit(3), 0};
  book_.SetOverlay(o);
  clock_.Advance(std::chrono::seconds(60));
  ASSERT_TRUE(book_.MaybeReplan(clock_.MonotonicNanos(), [&] { return live; }));
  const fabricwatch::v1::PlannedPeer ab = entry("a", "b");
  EXPECT_EQ(std::vector<uint32_t>(ab.raised_flows().begin(), ab.raised_flows().end()),
            (std::vector<uint32_t>{0, 3}));
  EXPECT_DOUBLE_EQ(ab.rate_pps(), 10 * base);
  EXPECT_DOUBLE_EQ(ab.unraised_rate_pps(), base);
  EXPECT_EQ(entry("b", "a").raised_flows_size(), 0);
  EXPECT_DOUBLE_EQ(entry("b", "a").rate_pps(), base);
  EXPECT_EQ(entry("a", "c").raised_flows_size(), 0);
  EXPECT_DOUBLE_EQ(entry("a", "c").rate_pps(), base);
  book_.ClearOverlay(o.id);
  clock_.Advance(std::chrono::seconds(60));
  ASSERT_TRUE(book_.MaybeReplan(clock_.MonotonicNanos(), [&] { return live; }));
  EXPECT_EQ(entry("a", "b").raised_flows_size(), 0);
  EXPECT_DOUBLE_EQ(entry("a", "b").rate_pps(), base);
}

// The same escalation overlay with other flows (a second element escalating other flows of the
// pair, or one of two ending) changes only PlannedPeer.raised_flows: the sender's plan gets a new
// version with the new list, so its agent applies it; the other member's plan stays as it was.
TEST_F(PlanBookTest, AChangeOfTheRaisedFlowsAloneIsANewPlan) {
  const std::vector<AgentInfo> live = {Agent("a", "10.0.0.1"), Agent("b", "10.0.0.2")};
  Replan(live);
  const double base = book_.PlanFor("a")->peers(0).rate_pps();
  PlanOverlay o{"escalation:a~b", {"a", "b"}, 10 * base, 1};
  o.flow_sets = {FlowBit(1), 0};
  auto apply = [&](uint64_t a_flows) {
    o.flow_sets[0] = a_flows;
    book_.SetOverlay(o);
    clock_.Advance(std::chrono::seconds(60));
    EXPECT_TRUE(book_.MaybeReplan(clock_.MonotonicNanos(), [&] { return live; }));
    const auto a = book_.PlanFor("a");
    const auto b = book_.PlanFor("b");
    EXPECT_TRUE(a && b);
    return std::pair{*a, *b};
  };
  const auto [a1, b1] = apply(FlowBit(1));
  const auto [a2, b2] = apply(FlowBit(1) | FlowBit(2));
  EXPECT_GT(a2.version(), a1.version());
  ASSERT_EQ(a2.peers_size(), 1);
  EXPECT_EQ(
      std::vector<uint32_t>(a2.peers(0).raised_flows().begin(), a2.peers(0).raised_flows().end()),
      (std::vector<uint32_t>{1, 2}));
  EXPECT_EQ(b2.version(), b1.version());
}

// A qualification round's bursts reach the sender's plan on the wire (ProbePlan.bursts) with the
// receiver's responder address, and leave it when the overlay ends.
TEST_F(PlanBookTest, OverlayBurstsReachTheSendersPlan) {
  const std::vector<AgentInfo> live = {Agent("a", "10.0.0.1"), Agent("b", "10.0.0.2"),
                                       Agent("c", "10.0.0.3")};
  Replan(live);
  PlanOverlay o;
  o.id = "q1";
  o.bursts.push_back({"a", "b", 2u << 20, 0x10001, 3.0});
  o.bursts.push_back({"c", "gone", 0, 0x10001, 3.0});  // a receiver without an agent: left out
  book_.SetOverlay(o);
  clock_.Advance(std::chrono::seconds(60));
  ASSERT_TRUE(book_.MaybeReplan(clock_.MonotonicNanos(), [&] { return live; }));
  auto a = book_.PlanFor("a");
  ASSERT_TRUE(a.has_value());
  ASSERT_EQ(a->bursts_size(), 1);
  const fabricwatch::v1::BurstRequest& b = a->bursts(0);
  EXPECT_EQ(b.node(), "b");
  EXPECT_EQ(b.address(), "10.0.0.2");
  EXPECT_EQ(b.port(), 9753u);
  EXPECT_EQ(b.bytes(), 2u << 20);
  EXPECT_EQ(b.round(), 0x10001u);
  EXPECT_DOUBLE_EQ(b.timeout_s(), 3.0);
  EXPECT_EQ(book_.PlanFor("b")->bursts_size(), 0);
  EXPECT_EQ(book_.PlanFor("c")->bursts_size(), 0);
  EXPECT_TRUE(Allowed("b").contains("10.0.0.1"));

  const uint64_t with = a->version();
  book_.ClearOverlay("q1");
  clock_.Advance(std::chrono::seconds(60));
  ASSERT_TRUE(book_.MaybeReplan(clock_.MonotonicNanos(), [&] { return live; }));
  EXPECT_EQ(book_.PlanFor("a")->bursts_size(), 0);
  EXPECT_GT(book_.PlanFor("a")->version(), with);
}


using testing::LeafSpine;

// A plan book of its own over `map` and `live`, fully re-planned with `overlays` set.
struct FreshBook {
  FreshBook(std::shared_ptr<const FabricMap> map, const std::vector<AgentInfo>& live,
            const std::vector<PlanOverlay>& overlays)
      : book(PlannerConfig{}, std::move(map), clock, registry) {
    EXPECT_TRUE(book.Start(dir.path()).ok());
    for (const PlanOverlay& o : overlays) book.SetOverlay(o);
    book.NoteMembershipChange();
    clock.Advance(std::chrono::seconds(60));
    EXPECT_TRUE(book.MaybeReplan(clock.MonotonicNanos(), [&] { return live; }));
  }
  fw::testing::TempDir dir{"fw-planbook-fresh"};
  FakeClock clock;
  metrics::Registry registry;
  PlanBook book;
};

// Every node's plan as an agent gets it, without the version.
std::map<std::string, std::string> Wire(const PlanBook& book, const std::vector<AgentInfo>& live) {
  std::map<std::string, std::string> out;
  for (const AgentInfo& a : live) {
    auto plan = book.PlanFor(a.node);
    if (!plan) continue;
    plan->clear_version();
    out[a.node] = plan->DebugString();
  }
  return out;
}

// An escalation or a qualification changes the plans of the nodes it names and the allow lists
// of the nodes those plans name, nothing else: with the live set unchanged, the re-plan covers only
// those nodes, and every plan and list reads exactly as a full re-plan with the same overlays.
TEST(PlanBookPartialTest, OverlayChangesReplanOnlyTheirNodesAndReadAsAFullReplan) {
  const auto map = LeafSpine(2, 6, 4);
  std::vector<AgentInfo> live;
  for (const HostNic& h : map->host_nics()) live.push_back(Agent(h.node, h.address));
  FreshBook book(map, live, {});
  EXPECT_EQ(book.book.last_replan_nodes(), live.size());
  const uint64_t base_version = book.book.PlanFor("n6-4")->version();

  PlanOverlay escalation;
  escalation.id = "escalation:link:leaf1-spine1";
  escalation.nodes = {"n1-1", "n3-2"};
  escalation.rate_pps = 10;
  escalation.flows = 4;
  escalation.trace_id = 77;
  PlanOverlay qualification;
  qualification.id = "q1";
  qualification.nodes = {"n2-1", "n2-2", "n4-3"};
  qualification.rate_pps = 5;
  qualification.bursts.push_back({"n5-1", "n5-2", 1u << 20, 0x10001, 3.0});
  const std::vector<std::vector<PlanOverlay>> steps = {
      {escalation}, {escalation, qualification}, {qualification}, {}};
  std::vector<PlanOverlay> now;
  for (const auto& step : steps) {
    for (const PlanOverlay& o : now) {
      if (std::none_of(step.begin(), step.end(), [&](const PlanOverlay& x) { return x.id == o.id; })) {
        book.book.ClearOverlay(o.id);
      }
    }
    for (const PlanOverlay& o : step) {
      if (std::none_of(now.begin(), now.end(), [&](const PlanOverlay& x) { return x.id == o.id; })) {
        book.book.SetOverlay(o);
      }
    }
    now = step;
    book.clock.Advance(std::chrono::seconds(60));
    ASSERT_TRUE(book.book.MaybeReplan(book.clock.MonotonicNanos(), [&] { return live; }));
    EXPECT_LE(book.book.last_replan_nodes(), 5u);
    FreshBook full(map, live, step);
    EXPECT_EQ(Wire(book.book, live), Wire(full.book, live)) << "step with " << step.size();
  }
  // A node no overlay ever named kept its plan and version throughout.
  EXPECT_EQ(book.book.PlanFor("n6-4")->version(), base_version);
  EXPECT_GT(book.book.PlanFor("n1-1")->version(), base_version);

  // A membership change re-plans the whole fleet again.
  live.pop_back();
  book.book.NoteMembershipChange();
  book.clock.Advance(std::chrono::seconds(60));
  ASSERT_TRUE(book.book.MaybeReplan(book.clock.MonotonicNanos(), [&] { return live; }));
  EXPECT_EQ(book.book.last_replan_nodes(), live.size());
  FreshBook full(map, live, {});
  EXPECT_EQ(Wire(book.book, live), Wire(full.book, live));
}

// The same on two rails (every node has a NIC on a leaf of each), with the overlays an escalation
// and a qualification make: NIC pairs and flow sets, pairs that were not peers (their entries are
// added, so allow lists change), a burst, an overlay replaced by one with other flows. After each
// partial re-plan every plan and allow list reads exactly as a full re-plan's, and exactly the
// nodes whose plan or list changed got a new version (and are sent).
TEST(PlanBookPartialTest, TwoRailsOverlaysReadAsAFullReplanAndBumpOnlyWhatChanged) {
  constexpr int kSpines = 3, kLeaves = 5, kHosts = 4;
  std::string y = "routing: ecmp\nswitches:\n";
  for (int s = 1; s <= kSpines; ++s)
    y += "  - {name: spine" + std::to_string(s) + ", tier: spine}\n";
  for (int r = 0; r < 2; ++r) {
    for (int l = 1; l <= kLeaves; ++l) {
      y += "  - {name: r" + std::to_string(r) + "leaf" + std::to_string(l) + ", tier: leaf}\n";
    }
  }
  y += "links:\n";
  for (int r = 0; r < 2; ++r) {
    for (int l = 1; l <= kLeaves; ++l) {
      for (int s = 1; s <= kSpines; ++s) {
        y += "  - {a: r" + std::to_string(r) + "leaf" + std::to_string(l) + ", b: spine" +
             std::to_string(s) + "}\n";
      }
    }
  }
  y += "hosts:\n";
  std::vector<AgentInfo> live;
  for (int l = 1; l <= kLeaves; ++l) {
    for (int h = 1; h <= kHosts; ++h) {
      AgentInfo a;
      a.node = "n" + std::to_string(l) + "-" + std::to_string(h);
      for (int r = 0; r < 2; ++r) {
        const std::string nic = "eth" + std::to_string(r);
        const std::string addr =
            "10." + std::to_string(r) + "." + std::to_string(l) + "." + std::to_string(h);
        y += "  - {node: " + a.node + ", nic: " + nic + ", address: " + addr + ", switch: r" +
             std::to_string(r) + "leaf" + std::to_string(l) + "}\n";
        a.endpoints.push_back({addr, 9753, nic});
      }
      live.push_back(std::move(a));
    }
  }
  auto parsed = FabricMap::Parse(y);
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  const auto map = std::make_shared<const FabricMap>(std::move(parsed).value());
  FreshBook book(map, live, {});

  auto escalation = [](const std::string& a, const std::string& b, const std::string& nic,
                       uint64_t a_flows, uint64_t trace_id) {
    PlanOverlay o;
    o.id = "escalation:" + a + "~" + b + "/" + nic + "~" + nic;
    o.nodes = {a, b};
    o.nics = {nic, nic};
    o.rate_pps = 10;
    o.flows = 1;
    o.probe_timeout_ms = 250;
    o.trace_id = trace_id;
    o.flow_sets = {a_flows, 0};
    return o;
  };
  PlanOverlay qualification;
  qualification.id = "q1";
  qualification.nodes = {"n1-1", "n4-2", "n5-3"};
  qualification.rate_pps = 5;
  qualification.bursts.push_back({"n2-4", "n5-1", 1u << 20, 0x10001, 3.0});
  qualification.bursts.push_back({"n3-3", "n3-2", 1u << 20, 0x10001, 3.0, /*rdma_rc=*/true});
  const PlanOverlay e1 = escalation("n1-2", "n3-4", "eth0", FlowBit(0), 11);
  const PlanOverlay e2 = escalation("n2-1", "n5-4", "eth1", kAllFlows, 12);
  const PlanOverlay e1_wider = escalation("n1-2", "n3-4", "eth0", FlowBit(0) | FlowBit(5), 13);
  const PlanOverlay e3 = escalation("n4-4", "n4-1", "eth1", FlowBit(0), 14);
  const std::vector<std::vector<PlanOverlay>> steps = {{e1},
                                                       {e1, e2},
                                                       {e1_wider, e2, qualification},
                                                       {e2, qualification, e3},
                                                       {e3},
                                                       {},
                                                       {qualification},
                                                       {}};

  auto versions = [&] {
    std::map<std::string, uint64_t> out;
    for (const AgentInfo& a : live) {
      auto plan = book.book.PlanFor(a.node);
      if (plan) out[a.node] = plan->version();
    }
    return out;
  };
  std::vector<PlanOverlay> now;
  size_t bumped_total = 0;
  for (size_t k = 0; k < steps.size(); ++k) {
    const auto& step = steps[k];
    const auto wire_before = Wire(book.book, live);
    const auto versions_before = versions();
    std::set<std::string> named;  // the nodes of the overlays set or cleared
    auto name = [&](const PlanOverlay& o) {
      named.insert(o.nodes.begin(), o.nodes.end());
      for (const OverlayBurst& b : o.bursts) named.insert({b.src, b.dst});
    };
    for (const PlanOverlay& o : now) {
      if (std::none_of(step.begin(), step.end(),
                       [&](const PlanOverlay& x) { return x.id == o.id; })) {
        book.book.ClearOverlay(o.id);
        name(o);
      }
    }
    for (const PlanOverlay& o : step) {
      book.book.SetOverlay(o);
      name(o);
    }
    now = step;
    book.clock.Advance(std::chrono::seconds(60));
    ASSERT_TRUE(book.book.MaybeReplan(book.clock.MonotonicNanos(), [&] { return live; }));
    EXPECT_LE(book.book.last_replan_nodes(), named.size()) << "step " << k;
    FreshBook full(map, live, step);
    const auto wire = Wire(book.book, live);
    EXPECT_EQ(wire, Wire(full.book, live)) << "step " << k;
    const auto versions_after = versions();
    for (const auto& [node, text] : wire) {
      const bool changed = wire_before.at(node) != text;
      EXPECT_EQ(versions_after.at(node) != versions_before.at(node), changed)
          << "step " << k << ": " << node;
      bumped_total += changed;
    }
  }
  EXPECT_GT(bumped_total, 10u);
}
}  // namespace
}  // namespace fw::aggregator

namespace fw::aggregator {
namespace {

// Every NIC on the wire (issue 16): a map with two rails of one leaf each; each UDP peer names the
// NIC that probes (src_nic, whose socket the agent sends from) and the NIC it probes (dst_nic, at
// `address`), both on one rail; the receiver admits both of the prober's NIC addresses.
TEST(PlanBookRailsTest, UdpPeersNameBothNics) {
  auto m = FabricMap::Parse(
      "routing: ecmp\nswitches:\n  - {name: leaf1, tier: leaf}\n  - {name: r2leaf1, tier: leaf}\n"
      "hosts:\n"
      "  - {node: n1, nic: eth0, address: 198.18.1.2, switch: leaf1}\n"
      "  - {node: n1, nic: eth1, address: 198.19.1.2, switch: r2leaf1}\n"
      "  - {node: n2, nic: eth0, address: 198.18.1.3, switch: leaf1}\n"
      "  - {node: n2, nic: eth1, address: 198.19.1.3, switch: r2leaf1}\n");
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  fw::testing::TempDir dir{"fw-planbook-rails"};
  FakeClock clock;
  metrics::Registry registry;
  PlanBook book(PlannerConfig{}, std::make_shared<const FabricMap>(std::move(m).value()), clock,
                registry);
  ASSERT_TRUE(book.Start(dir.path()).ok());
  std::vector<AgentInfo> live(2);
  for (int i = 0; i < 2; ++i) {
    live[i].node = "n" + std::to_string(i + 1);
    live[i].endpoints = {{"198.18.1." + std::to_string(i + 2), 9753, "eth0"},
                         {"198.19.1." + std::to_string(i + 2), 9753, "eth1"}};
  }
  book.NoteMembershipChange();
  clock.Advance(std::chrono::seconds(60));
  ASSERT_TRUE(book.MaybeReplan(clock.MonotonicNanos(), [&] { return live; }));
  auto plan = book.PlanFor("n1");
  ASSERT_TRUE(plan.has_value());
  std::set<std::tuple<std::string, std::string, std::string>> udp;
  for (const fabricwatch::v1::PlannedPeer& p : plan->peers()) {
    if (p.transport() != fabricwatch::v1::TRANSPORT_UDP) continue;
    udp.emplace(p.src_nic(), p.dst_nic(), p.address());
  }
  EXPECT_EQ(udp, (std::set<std::tuple<std::string, std::string, std::string>>{
                     {"eth0", "eth0", "198.18.1.3"}, {"eth1", "eth1", "198.19.1.3"}}));
  // n2 admits both of n1's NIC addresses.
  auto n2 = book.PlanFor("n2");
  ASSERT_TRUE(n2.has_value());
  EXPECT_EQ(std::set<std::string>(n2->allowed_probers().begin(), n2->allowed_probers().end()),
            (std::set<std::string>{"198.18.1.2", "198.19.1.2"}));
}

// Flow ids are per entry (NIC pair), and so are the escalated flow sets, end to end on the wire.
// A leaf-per-host fabric (n1's two NICs on leaf1, n2's on leaf2, 4 spines) with 4 flows per
// representative: n1 probes n2 from both its NICs. An escalation of a leaf1 link names, per
// NIC pair, the flows that crossed it (ids that differ under ECMP): each entry lists exactly its
// own on the wire, no other entry of the node pair is raised, the budget prices what the entries
// raise, and n1's plan asks once for n2's traces.
TEST(PlanBookRailsTest, EachNicPairOfAnEscalatedPairListsItsOwnFlowsOnTheWire) {
  std::string y = "routing: ecmp\nswitches:\n";
  for (const char* sw : {"leaf1", "leaf2"}) y += std::string("  - {name: ") + sw + ", tier: leaf}\n";
  for (int s = 1; s <= 4; ++s) y += "  - {name: spine" + std::to_string(s) + ", tier: spine}\n";
  y += "links:\n";
  for (int l = 1; l <= 2; ++l) {
    for (int s = 1; s <= 4; ++s) {
      y += "  - {a: leaf" + std::to_string(l) + ", b: spine" + std::to_string(s) + "}\n";
    }
  }
  y += "hosts:\n";
  std::vector<AgentInfo> live(2);
  for (int h = 1; h <= 2; ++h) {
    live[h - 1].node = "n" + std::to_string(h);
    for (int n = 0; n < 2; ++n) {
      const std::string addr = "198.18." + std::to_string(h) + "." + std::to_string(n + 2);
      y += "  - {node: n" + std::to_string(h) + ", nic: eth" + std::to_string(n) +
           ", address: " + addr + ", switch: leaf" + std::to_string(h) + "}\n";
      live[h - 1].endpoints.push_back({addr, 9753, "eth" + std::to_string(n)});
    }
  }
  auto m = FabricMap::Parse(y);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  fw::testing::TempDir dir{"fw-planbook-nicflows"};
  FakeClock clock;
  metrics::Registry registry;
  PlannerConfig config;
  config.max_flows_per_pair = 4;  // several representatives between the two hosts
  PlanBook book(config, std::make_shared<const FabricMap>(std::move(m).value()), clock, registry);
  ASSERT_TRUE(book.Start(dir.path()).ok());
  book.NoteMembershipChange();
  clock.Advance(std::chrono::seconds(60));
  ASSERT_TRUE(book.MaybeReplan(clock.MonotonicNanos(), [&] { return live; }));
  // n1's UDP entries toward n2, by NIC pair.
  auto entries = [&] {
    std::map<std::pair<std::string, std::string>, fabricwatch::v1::PlannedPeer> out;
    const auto plan = book.PlanFor("n1");
    EXPECT_TRUE(plan.has_value());
    if (!plan) return out;
    for (const fabricwatch::v1::PlannedPeer& p : plan->peers()) {
      if (p.transport() == fabricwatch::v1::TRANSPORT_UDP && p.node() == "n2") {
        out[{p.src_nic(), p.dst_nic()}] = p;
      }
    }
    return out;
  };
  const auto before = entries();
  ASSERT_GE(before.size(), 2u);
  auto first = before.begin();
  auto second = std::next(first);
  ASSERT_GE(first->second.src_ports_size(), 4);
  ASSERT_GE(second->second.src_ports_size(), 4);
  const double base = first->second.rate_pps();
  ASSERT_GT(base, 0);

  // The two NIC pairs' crossing flows: 0 and 2 of the first, 1 and 3 of the second.
  EscalationRequest r;
  r.element = "link:leaf1~spine1";
  r.priority = 10;
  for (const auto& [nics, ids] :
       {std::pair{first->first, FlowBit(0) | FlowBit(2)}, std::pair{second->first, FlowBit(1) | FlowBit(3)}}) {
    EscalationPair p;
    p.a = "n1";
    p.b = "n2";
    p.flows = 4;
    p.a_nic = nics.first;
    p.b_nic = nics.second;
    p.a_flows = ids;
    p.b_flows = 0;
    r.pairs.push_back(p);
  }
  EscalationBudget budget;
  ASSERT_TRUE(budget.Update(0, {r}, 10000, base));
  EXPECT_DOUBLE_EQ(budget.stats().extra_pps, 4 * base * (budget.config().rate_factor - 1));
  const double budget_before = book.PlanFor("n1")->budget().packets_per_s();
  for (PlanOverlay& o : budget.Overlays()) book.SetOverlay(std::move(o));
  clock.Advance(std::chrono::seconds(60));
  ASSERT_TRUE(book.MaybeReplan(clock.MonotonicNanos(), [&] { return live; }));
  const auto after = entries();
  ASSERT_EQ(after.size(), before.size());
  std::map<std::pair<std::string, std::string>, std::vector<uint32_t>> raised;
  double extra = 0;  // the probes/s the entries add
  for (const auto& [nics, p] : after) {
    extra += p.raised_flows_size() * (p.rate_pps() - p.unraised_rate_pps());
    if (p.raised_flows_size() == 0) {
      EXPECT_DOUBLE_EQ(p.rate_pps(), base) << nics.first << "~" << nics.second;
      continue;
    }
    raised[nics] = {p.raised_flows().begin(), p.raised_flows().end()};
    EXPECT_DOUBLE_EQ(p.rate_pps(), budget.config().rate_factor * base);
    EXPECT_DOUBLE_EQ(p.unraised_rate_pps(), base);
  }
  EXPECT_EQ(raised, (std::map<std::pair<std::string, std::string>, std::vector<uint32_t>>{
                        {first->first, {0, 2}}, {second->first, {1, 3}}}));
  const auto plan = book.PlanFor("n1");
  ASSERT_TRUE(plan.has_value());
  EXPECT_NEAR(extra, budget.stats().extra_pps, 1e-9);
  EXPECT_NEAR(plan->budget().packets_per_s() - budget_before, budget.stats().extra_pps, 1e-6);
  EXPECT_EQ(plan->trace_requests_size(), 1);
}

}  // namespace
}  // namespace fw::aggregator
