// The agent's RDMA runner: unavailable without RDMA, results in batches with a fake device.
#include "probes/rdma/rdma_runner.h"

#include <gtest/gtest.h>

#include <condition_variable>

#include "probes/rdma/fake_verbs.h"

namespace fw::rdma {
namespace {

TEST(RdmaRunner, NoRdmaStackLeavesItUnavailableAndStartsNothing) {
  int batches = 0;
  RdmaRunner r(FakeFabric::MakeNoRdmaStack(), RealClock::Get(), {},
               [&](std::vector<RdmaProbeResult>&&) { ++batches; });
  Status st = r.Start();
  EXPECT_EQ(st.code(), StatusCode::kUnavailable);
  RdmaState s = r.state();
  EXPECT_FALSE(s.available);
  EXPECT_NE(s.detail.find("errno 38"), std::string::npos) << s.detail;
  EXPECT_EQ(r.stats(), nullptr);
  r.SetTargets({});  // harmless
  r.Stop();
  EXPECT_EQ(batches, 0);
}

TEST(RdmaRunner, ProbesOnItsThreadAndHandsOverBatches) {
  FakeFabric fabric(RealClock::Get());
  for (uint16_t lid : {1, 2}) {
    FakeDeviceConfig d;
    d.name = "mlx5_" + std::to_string(lid);
    FakePortConfig p;
    p.lid = lid;
    d.ports = {p};
    fabric.AddDevice(d);
  }
  std::mutex mu;
  std::condition_variable cv;
  std::vector<RdmaProbeResult> got;
  auto sink = [&](std::vector<RdmaProbeResult>&& b) {
    std::lock_guard<std::mutex> l(mu);
    got.insert(got.end(), b.begin(), b.end());
    cv.notify_all();
  };
  RdmaRunnerOptions o;
  o.batch_interval_s = 0.05;
  RdmaRunner a(fabric.MakeVerbs({"mlx5_1"}), RealClock::Get(), o, sink);
  RdmaRunner b(fabric.MakeVerbs({"mlx5_2"}), RealClock::Get(), o, [](auto&&) {});
  ASSERT_TRUE(a.Start().ok());
  ASSERT_TRUE(b.Start().ok());
  ASSERT_TRUE(a.state().available);
  ASSERT_EQ(b.state().endpoints.size(), 1u);
  UdTarget t;
  t.peer = "node-b";
  t.remote = b.state().endpoints.front();
  t.flows = 2;
  t.rate_hz = 200;
  a.SetTargets({t});
  {
    std::unique_lock<std::mutex> l(mu);
    cv.wait_for(l, std::chrono::seconds(5), [&] { return got.size() >= 20; });
  }
  a.Stop();
  b.Stop();
  std::lock_guard<std::mutex> l(mu);
  ASSERT_GE(got.size(), 20u);
  size_t answered = 0;
  for (const auto& r : got) {
    EXPECT_EQ(r.base.PeerName(), "node-b");
    if (!r.base.lost) {
      ++answered;
      EXPECT_GT(r.network_rtt_ns, 0);
    }
  }
  EXPECT_GE(answered, got.size() - 1);
}

}  // namespace
}  // namespace fw::rdma
