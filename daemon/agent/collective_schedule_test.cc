// The aggregator's own scheduler drives the agents' collective runners in one process: each agent
// checks NCCL (a fake library of 2 GPUs, or a missing one), announces the state in its Hello, the
// aggregator admits the Hellos (FleetState), places the nodes on a two-leaf map and its
// CollectiveStage starts the group it chose. Every member announced NCCL ready: one NCCL job of
// 2 GPU ranks per member, its unique id through the stage's key-value service, the result in the
// stage's counters and /metrics. A member without NCCL: the same group runs Gloo.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "common/clock.h"
#include "daemon/agent/collective_agent.h"
#include "daemon/aggregator/collective/collective_stage.h"
#include "daemon/aggregator/ingest/fleet_state.h"
#include "daemon/aggregator/plan/fabric_map.h"
#include "probes/collective/fake_nccl.h"

namespace fw::agent {
namespace {

namespace v1 = fabricwatch::v1;
namespace agg = aggregator::collective;

// Two leaves under one spine: a and b on leaf1, c on leaf2.
std::string MapYaml() {
  std::string yaml = "routing: ecmp\nswitches:\n  - {name: spine1, tier: spine}\n";
  std::string links = "links:\n", hosts = "hosts:\n";
  for (const std::string leaf : {"leaf1", "leaf2"}) {
    yaml += "  - {name: " + leaf + ", tier: leaf}\n";
    links += "  - {a: " + leaf + ", b: spine1}\n";
  }
  int i = 0;
  for (const auto& [node, leaf] : {std::pair{"a", "leaf1"}, {"b", "leaf1"}, {"c", "leaf2"}}) {
    hosts += std::string("  - {node: ") + node + ", nic: eth0, address: 198.18.0." +
             std::to_string(++i) + ", switch: " + leaf + "}\n";
  }
  return yaml + links + hosts;
}

// An aggregator (fleet state, fabric map, collective stage) and one collective runner per node,
// their messages passed directly both ways (the gRPC stream's part).
class Fleet {
 public:
  // `nccl`: the nodes whose runner finds the fake NCCL; the others find no library.
  Fleet(const std::vector<std::string>& nodes, const std::vector<std::string>& nccl)
      : api_(collective::testing::FakeNcclApi()),
        fleet_(RealClock::Get(), aggregator_registry_, {}),
        stage_(Config(), aggregator_registry_, [this](agg::Outbound out) { Deliver(out); }) {
    auto map = aggregator::FabricMap::Parse(MapYaml());
    EXPECT_TRUE(map.ok()) << map.status().message();
    map_ = std::make_unique<aggregator::FabricMap>(std::move(*map));
    uint64_t conn = 0;
    for (const std::string& node : nodes) {
      CollectiveRunnerOptions o;
      o.node = node;
      const bool with_nccl = std::find(nccl.begin(), nccl.end(), node) != nccl.end();
      if (with_nccl) {
        o.nccl_api_for_test = &api_;
      } else {
        o.nccl.nccl_library = "/nonexistent/libnccl.so.2";
      }
      o.nvml_loader = [] {
        return StatusOr<std::unique_ptr<collective::NvmlApi>>(Status::Unavailable("no nvml here"));
      };
      registries_.push_back(std::make_unique<metrics::Registry>());
      auto runner = std::make_unique<CollectiveRunner>(
          o,
          [this, node](v1::AgentMessage m) {
            if (m.has_kv_request()) {
              stage_.OnKvRequest(node, m.kv_request(), RealClock::Get().MonotonicNanos());
            } else if (m.has_collective_result()) {
              stage_.OnResult(node, m.collective_result());
            }
          },
          *registries_.back());
      // As the agent does where its inventory lists GPUs: check NCCL, then say so in the Hello.
      runner->CheckNccl();
      v1::Hello hello;
      hello.set_node(node);
      hello.set_session_id(100 + conn);
      hello.mutable_inventory()->add_gpus()->set_bus_id("0000:01:00.0");
      hello.mutable_inventory()->add_gpus()->set_bus_id("0000:02:00.0");
      *hello.mutable_collective() = runner->capability();
      EXPECT_TRUE(fleet_.Admit(++conn, hello).admitted);
      runners_[node] = std::move(runner);
    }
    for (auto& [node, r] : runners_) r->Start();
  }
  ~Fleet() {
    for (auto& [node, r] : runners_) r->Stop();
  }

  // One scheduling tick of the aggregator (as its tick thread does).
  void Tick() {
    stage_.Tick([this] { return agg::CollectiveNodesOf(fleet_.Nodes(), map_.get()); },
                RealClock::Get().MonotonicNanos());
  }
  // Waits (30 s at most) for the stage to complete one job, and expects it to have succeeded with
  // its busbw in /metrics under `group_kind`. Returns the /metrics text.
  std::string ExpectOneRunOf(const std::string& group_kind) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    std::string metrics = aggregator_registry_.RenderToString();
    while (metrics.find("fabricwatch_collective_group_runs_total 1") == std::string::npos &&
           std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      metrics = aggregator_registry_.RenderToString();
    }
    EXPECT_NE(metrics.find("fabricwatch_collective_group_runs_total 1"), std::string::npos)
        << metrics;
    EXPECT_NE(metrics.find("fabricwatch_collective_group_failures_total 0"), std::string::npos)
        << metrics;
    EXPECT_NE(metrics.find("fabricwatch_collective_busbw_gbps{group_kind=\"" + group_kind + "\"}"),
              std::string::npos)
        << metrics;
    return metrics;
  }
  std::string Capability(const std::string& node) {
    return runners_.at(node)->capability().nccl_status();
  }
  // The CollectiveJobs the stage sent, by node.
  std::map<std::string, v1::CollectiveJob> jobs() {
    std::lock_guard lock(mu_);
    return jobs_;
  }

 private:
  static agg::OrchestratorConfig Config() {
    agg::OrchestratorConfig c;
    c.schedule.interval_ns = 1000'000'000'000;  // one round in the test
    c.schedule.intra_node = false;
    c.schedule.rail_groups = false;  // the rotating group: all three nodes, across both leaves
    c.schedule.op_timeout_s = 10;
    return c;
  }
  void Deliver(const agg::Outbound& out) {
    for (const auto& [node, m] : out) {
      CollectiveRunner& r = *runners_.at(node);
      if (m.has_collective_job()) {
        {
          std::lock_guard lock(mu_);
          jobs_[node] = m.collective_job();
        }
        r.OnJob(m.collective_job());
      } else if (m.has_kv_reply()) {
        r.OnKvReply(m.kv_reply());
      }
    }
  }

  const collective::NcclApi api_;
  metrics::Registry aggregator_registry_;
  aggregator::FleetState fleet_;
  std::unique_ptr<aggregator::FabricMap> map_;
  agg::CollectiveStage stage_;
  std::vector<std::unique_ptr<metrics::Registry>> registries_;
  std::map<std::string, std::unique_ptr<CollectiveRunner>> runners_;
  std::mutex mu_;
  std::map<std::string, v1::CollectiveJob> jobs_;
};

TEST(CollectiveSchedule, AggregatorStartsNcclAcrossNodesThatAnnouncedIt) {
  collective::testing::FakeNcclState& fake = collective::testing::ResetFakeNccl();
  fake.devices = 2;
  Fleet f({"a", "b", "c"}, {"a", "b", "c"});
  EXPECT_EQ(f.Capability("a"), "nccl: ready (NCCL 2.28.9, 2 GPUs)");
  f.Tick();
  const auto jobs = f.jobs();
  ASSERT_EQ(jobs.size(), 3u);
  for (const auto& [node, j] : jobs) {
    EXPECT_EQ(j.backend(), "nccl") << node;
    ASSERT_EQ(j.member_gpus_size(), 3) << node;
    for (const uint32_t g : j.member_gpus()) EXPECT_EQ(g, 2u);
  }
  const std::string metrics = f.ExpectOneRunOf("nccl_rotating");
  EXPECT_EQ(metrics.find("group_kind=\"rotating\""), std::string::npos) << metrics;
  EXPECT_EQ(fake.comms_created, 6);  // 3 members x 2 GPU ranks, one communicator group
  EXPECT_EQ(fake.unique_ids, 1);     // made by rank 0's member, read by the others via the stage
  EXPECT_EQ(fake.comms_aborted, 0);
}

TEST(CollectiveSchedule, AMemberWithoutNcclMakesTheGroupGloo) {
  collective::testing::FakeNcclState& fake = collective::testing::ResetFakeNccl();
  fake.devices = 2;
  Fleet f({"a", "b", "c"}, {"a", "b"});
  EXPECT_EQ(f.Capability("c").rfind("nccl: unavailable", 0), 0u) << f.Capability("c");
  f.Tick();
  const auto jobs = f.jobs();
  ASSERT_EQ(jobs.size(), 3u);
  for (const auto& [node, j] : jobs) {
    EXPECT_EQ(j.backend(), "gloo") << node;
    EXPECT_EQ(j.member_gpus_size(), 0) << node;
  }
  f.ExpectOneRunOf("rotating");
  EXPECT_EQ(fake.comms_created, 0);
}

}  // namespace
}  // namespace fw::agent
