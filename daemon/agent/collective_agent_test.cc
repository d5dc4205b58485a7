// The agent's collective runner end to end in one process: three runners (nodes a, b, c) whose
// uplinks are wired to the aggregator's KvService, running a Gloo all-reduce on loopback through
// the real rendezvous; refusals; and an NCCL job on a node without a driver.
#include "daemon/agent/collective_agent.h"

#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <thread>
#include <vector>

#include "daemon/aggregator/collective/kv_service.h"
#include "probes/collective/fake_nccl.h"

namespace fw::agent {
namespace {

namespace v1 = fabricwatch::v1;
using aggregator::collective::KvService;

// Stands in for the aggregator's session handling: KvRequests go to the KvService, replies back to
// the runner of the node they are for; results are collected.
struct FakeAggregator {
  KvService kv;
  std::map<std::string, CollectiveRunner*> runners;
  std::mutex mu;
  std::condition_variable cv;
  std::map<std::string, v1::CollectiveResult> results;  // by node

  AgentSendFn SendFor(const std::string& node) {
    return [this, node](v1::AgentMessage m) {
      if (m.has_kv_request()) {
        auto out = kv.Handle(node, m.kv_request().key(), m.kv_request().value(), 0);
        for (const auto& d : out) {
          v1::KvReply r;
          r.set_key(d.key);
          r.set_value(d.value);
          r.set_found(d.found);
          runners.at(d.node)->OnKvReply(r);
        }
      } else if (m.has_collective_result()) {
        std::lock_guard lock(mu);
        results[node] = m.collective_result();
        cv.notify_all();
      }
    };
  }
  bool WaitResults(size_t n) {
    std::unique_lock lock(mu);
    return cv.wait_for(lock, std::chrono::seconds(30), [&] { return results.size() >= n; });
  }
};

v1::CollectiveJob Job(const std::string& id, std::vector<std::string> members,
                      const std::string& backend = "gloo") {
  v1::CollectiveJob j;
  j.set_job_id(id);
  j.set_backend(backend);
  for (auto& m : members) j.add_members(m);
  j.set_bytes(256 << 10);
  j.set_iterations(5);
  return j;
}

// One runner per node, wired to `agg`, each with its own registry; `api`: a fake NCCL (and no
// NVML) for them.
std::vector<std::unique_ptr<CollectiveRunner>> Runners(
    FakeAggregator& agg, std::vector<std::unique_ptr<metrics::Registry>>& registries,
    const std::vector<std::string>& nodes, const collective::NcclApi* api = nullptr) {
  std::vector<std::unique_ptr<CollectiveRunner>> runners;
  for (const std::string& node : nodes) {
    CollectiveRunnerOptions o;
    o.node = node;
    o.nccl_api_for_test = api;
    if (api != nullptr) {
      o.nvml_loader = [] {
        return StatusOr<std::unique_ptr<collective::NvmlApi>>(
            Status::Unavailable("no nvml in this test"));
      };
    }
    registries.push_back(std::make_unique<metrics::Registry>());
    runners.push_back(std::make_unique<CollectiveRunner>(o, agg.SendFor(node), *registries.back()));
    agg.runners[node] = runners.back().get();
  }
  return runners;
}

TEST(CollectiveRunner, GlooAllReduceThroughTheAggregatorKvService) {
  FakeAggregator agg;
  metrics::Registry registries[3];  // one agent each
  std::vector<std::unique_ptr<CollectiveRunner>> runners;
  for (const std::string node : {"a", "b", "c"}) {
    CollectiveRunnerOptions o;
    o.node = node;
    o.rendezvous_timeout = std::chrono::seconds(10);
    runners.push_back(
        std::make_unique<CollectiveRunner>(o, agg.SendFor(node), registries[runners.size()]));
    agg.runners[node] = runners.back().get();
  }
  agg.kv.OpenGroup("job-1", {"a", "b", "c"}, INT64_MAX);
  for (auto& r : runners) r->Start();
  for (auto& r : runners) r->OnJob(Job("job-1", {"a", "b", "c"}));
  ASSERT_TRUE(agg.WaitResults(3));
  for (const auto& [node, r] : agg.results) {
    EXPECT_EQ(r.error(), "") << node;
    EXPECT_EQ(r.job_id(), "job-1");
    EXPECT_GT(r.bus_bandwidth_bps(), 1e6) << node;  // bits/s
    EXPECT_GT(r.latency_s(), 0);
    // Each rank's arrival and exit per measured iteration, on its own clock from its first arrival.
    EXPECT_EQ(r.op(), "all_reduce");
    EXPECT_EQ(r.group_ranks(), 3u);
    ASSERT_EQ(r.rank_times_size(), 1) << node;
    EXPECT_EQ(r.rank_times(0).rank(), r.rank());
    ASSERT_EQ(r.rank_times(0).arrive_ns_size(), 5);
    ASSERT_EQ(r.rank_times(0).exit_ns_size(), 5);
    EXPECT_EQ(r.rank_times(0).arrive_ns(0), 0);
    for (int i = 0; i < 5; ++i) {
      EXPECT_LT(r.rank_times(0).arrive_ns(i), r.rank_times(0).exit_ns(i));
    }
  }
  EXPECT_GT(agg.kv.counters().sets, 0u);
  EXPECT_EQ(agg.kv.counters().refused_not_member, 0u);
  for (auto& r : runners) r->Stop();
}

TEST(CollectiveRunner, NcclAcrossTwoAgentsSharesTheUniqueIdThroughTheAggregator) {
  // Two agents (nodes a and b) on the fake NCCL, a with 2 GPU ranks and b with 1: the unique id
  // travels through the aggregator's KvService, the three communicators form one group, and the
  // all-gather's output verifies on every rank. The job's op and timeout are honoured.
  collective::testing::FakeNcclState& fake = collective::testing::ResetFakeNccl();
  fake.devices = 2;
  const collective::NcclApi api = collective::testing::FakeNcclApi();
  FakeAggregator agg;
  std::vector<std::unique_ptr<metrics::Registry>> registries;
  auto runners = Runners(agg, registries, {"a", "b"}, &api);
  agg.kv.OpenGroup("job-n", {"a", "b"}, INT64_MAX);
  v1::CollectiveJob job = Job("job-n", {"a", "b"}, "nccl");
  job.add_member_gpus(2);
  job.add_member_gpus(1);
  job.set_op("all_gather");
  job.set_timeout_s(5);
  for (auto& r : runners) r->Start();
  for (auto& r : runners) r->OnJob(job);
  ASSERT_TRUE(agg.WaitResults(2));
  for (auto& r : runners) r->Stop();
  const v1::CollectiveResult& a = agg.results["a"];
  const v1::CollectiveResult& b = agg.results["b"];
  EXPECT_EQ(a.error(), "");
  EXPECT_EQ(b.error(), "");
  EXPECT_EQ(a.op(), "all_gather");
  EXPECT_EQ(a.group_ranks(), 3u);
  EXPECT_EQ(b.group_ranks(), 3u);
  ASSERT_EQ(a.rank_times_size(), 2);  // ranks 0 and 1
  ASSERT_EQ(b.rank_times_size(), 1);  // rank 2
  EXPECT_EQ(a.rank_times(1).rank(), 1u);
  EXPECT_EQ(b.rank_times(0).rank(), 2u);
  EXPECT_GT(b.bus_bandwidth_bps(), 0);
  EXPECT_EQ(fake.comms_created, 3);
  EXPECT_EQ(fake.unique_ids, 1);  // one id, made by rank 0's member, read by the other
  EXPECT_EQ(fake.comms_aborted, 0);
  EXPECT_GT(agg.kv.counters().sets, 0u);

  // A job that asks more GPUs of a node than it has fails there with a clear error.
  agg.results.clear();
  runners.clear();
  std::vector<std::unique_ptr<metrics::Registry>> lone_registries;
  auto lone = Runners(agg, lone_registries, {"b"}, &api);
  lone[0]->Start();
  v1::CollectiveJob big = Job("job-m", {"a", "b"}, "nccl");
  big.add_member_gpus(1);
  big.add_member_gpus(3);
  lone[0]->OnJob(big);
  ASSERT_TRUE(agg.WaitResults(1));
  lone[0]->Stop();
  EXPECT_EQ(agg.results["b"].error(), "nccl: the job asks for 3 GPUs on this node, 2 present");
}

TEST(CollectiveRunner, GlooHonoursTheJobsOpAndRefusesAnUnknownOne) {
  FakeAggregator agg;
  std::vector<std::unique_ptr<metrics::Registry>> registries;
  auto runners = Runners(agg, registries, {"a", "b"});
  agg.kv.OpenGroup("job-g", {"a", "b"}, INT64_MAX);
  v1::CollectiveJob job = Job("job-g", {"a", "b"});
  job.set_op("all_gather");
  job.set_timeout_s(5);
  for (auto& r : runners) r->Start();
  for (auto& r : runners) r->OnJob(job);
  ASSERT_TRUE(agg.WaitResults(2));
  for (const auto& [node, r] : agg.results) {
    EXPECT_EQ(r.error(), "") << node;
    EXPECT_EQ(r.op(), "all_gather") << node;
  }
  agg.results.clear();
  job.set_job_id("job-h");
  job.set_op("broadcast");
  runners[0]->OnJob(job);
  ASSERT_TRUE(agg.WaitResults(1));
  EXPECT_EQ(agg.results["a"].error(),
            "INVALID_ARGUMENT: unknown op 'broadcast' (all_reduce | all_gather)");
  for (auto& r : runners) r->Stop();
}

// Nice values of this process's threads named `name` (from /proc/self/task).
std::vector<int> NiceOfThreads(const std::string& name) {
  std::vector<int> out;
  for (const auto& task : std::filesystem::directory_iterator("/proc/self/task")) {
    std::ifstream comm(task.path() / "comm");
    std::string n;
    std::getline(comm, n);
    if (n != name) continue;
    const id_t tid = static_cast<id_t>(std::stol(task.path().filename().string()));
    errno = 0;
    const int nice = getpriority(PRIO_PROCESS, tid);
    if (errno == 0) out.push_back(nice);
  }
  return out;
}

TEST(CollectiveRunner, RunsAtALowerPriority) {
  // Two members, one a late rank (50 ms before each iteration), so the job runs long enough to
  // look at the runner threads while they work.
  FakeAggregator agg;
  metrics::Registry registries[2];
  std::vector<std::unique_ptr<CollectiveRunner>> runners;
  for (const std::string node : {"a", "b"}) {
    CollectiveRunnerOptions o;
    o.node = node;
    o.test_delay = std::chrono::milliseconds(node == "b" ? 50 : 0);
    runners.push_back(
        std::make_unique<CollectiveRunner>(o, agg.SendFor(node), registries[runners.size()]));
    agg.runners[node] = runners.back().get();
  }
  agg.kv.OpenGroup("job-p", {"a", "b"}, INT64_MAX);
  for (auto& r : runners) r->Start();
  for (auto& r : runners) r->OnJob(Job("job-p", {"a", "b"}));
  std::vector<int> nice;
  for (int i = 0; i < 200 && nice.size() < 3; ++i) {
    nice = NiceOfThreads("fw-collective");
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ASSERT_TRUE(agg.WaitResults(2));
  for (auto& r : runners) r->Stop();
  // The runner threads and the Gloo threads they started (which inherit their name and nice).
  ASSERT_GE(nice.size(), 2u);
  for (int n : nice) EXPECT_EQ(n, kCollectiveNice);
  EXPECT_EQ(agg.results["a"].error(), "");
}

// One agent, node a, on the fake NCCL with `devices` GPUs.
struct FakeNcclAgent {
  explicit FakeNcclAgent(int devices) : fake(collective::testing::ResetFakeNccl()) {
    fake.devices = devices;
    runners = Runners(agg, registries, {"a"}, &api);
  }
  collective::testing::FakeNcclState& fake;
  const collective::NcclApi api = collective::testing::FakeNcclApi();
  FakeAggregator agg;
  std::vector<std::unique_ptr<metrics::Registry>> registries;
  std::vector<std::unique_ptr<CollectiveRunner>> runners;
};

TEST(CollectiveRunner, CheckNcclAnnouncesTheStateForTheHello) {
  FakeNcclAgent a(4);
  auto& runners = a.runners;
  auto& agg = a.agg;
  EXPECT_EQ(runners[0]->capability().nccl_state(), "");  // not checked yet
  runners[0]->CheckNccl();
  EXPECT_EQ(runners[0]->capability().nccl_state(), "ready");
  EXPECT_EQ(runners[0]->capability().nccl_gpus(), 4u);
  EXPECT_EQ(runners[0]->capability().nccl_status(), "nccl: ready (NCCL 2.28.9, 4 GPUs)");
  EXPECT_NE(a.registries[0]->RenderToString().find(
                "fabricwatch_collective_nccl_state{state=\"ready\"} 1"),
            std::string::npos);
  // A hidden library: unavailable, no GPUs offered.
  metrics::Registry registry;
  CollectiveRunnerOptions o;
  o.node = "b";
  o.nccl.nccl_library = "/nonexistent/libnccl.so.2";
  CollectiveRunner hidden(o, agg.SendFor("b"), registry);
  hidden.CheckNccl();
  EXPECT_EQ(hidden.capability().nccl_state(), "unavailable");
  EXPECT_EQ(hidden.capability().nccl_gpus(), 0u);
  EXPECT_EQ(hidden.capability().nccl_status().rfind("nccl: unavailable", 0), 0u);
}

TEST(CollectiveRunner, NcclJobOfOneNodeRunsOnTheDevicesItNames) {
  FakeNcclAgent a(4);
  auto& runners = a.runners;
  auto& agg = a.agg;
  runners[0]->Start();
  v1::CollectiveJob pair = Job("job-d", {"a"}, "nccl");
  pair.add_devices(1);
  pair.add_devices(3);
  runners[0]->OnJob(pair);
  ASSERT_TRUE(agg.WaitResults(1));
  EXPECT_EQ(agg.results["a"].error(), "");
  EXPECT_EQ(agg.results["a"].group_ranks(), 2u);
  EXPECT_EQ(a.fake.comms_created, 2);
  for (const std::vector<uint32_t>& bad : {std::vector<uint32_t>{2, 2}, {4}}) {
    agg.results.clear();
    v1::CollectiveJob j = Job("job-e", {"a"}, "nccl");
    for (uint32_t d : bad) j.add_devices(d);
    runners[0]->OnJob(j);
    ASSERT_TRUE(agg.WaitResults(1));
    EXPECT_EQ(agg.results["a"].error().rfind("nccl: the job asks for GPU", 0), 0u)
        << agg.results["a"].error();
  }
  runners[0]->Stop();
}

TEST(CollectiveRunner, NonMemberAndRefusedRendezvousFailCleanly) {
  FakeAggregator agg;
  metrics::Registry registry;
  CollectiveRunnerOptions o;
  o.node = "z";
  o.rendezvous_timeout = std::chrono::milliseconds(500);
  CollectiveRunner runner(o, agg.SendFor("z"), registry);
  agg.runners["z"] = &runner;
  runner.Start();
  runner.OnJob(Job("job-2", {"a", "b"}));  // z is not listed
  ASSERT_TRUE(agg.WaitResults(1));
  EXPECT_NE(agg.results["z"].error().find("not a member"), std::string::npos);
  agg.results.clear();
  runner.OnJob(Job("job-3", {"z", "y"}));  // the group was never opened: the KvService refuses
  ASSERT_TRUE(agg.WaitResults(1));
  EXPECT_NE(agg.results["z"].error().find("refused"), std::string::npos)
      << agg.results["z"].error();
  runner.Stop();
}

TEST(CollectiveRunner, NcclJobWithoutADriverReportsTheState) {
  FakeAggregator agg;
  metrics::Registry registry;
  CollectiveRunnerOptions o;
  o.node = "g";
  CollectiveRunner runner(o, agg.SendFor("g"), registry);
  agg.runners["g"] = &runner;
  runner.Start();
  runner.OnJob(Job("job-4", {"g"}, "nccl"));
  ASSERT_TRUE(agg.WaitResults(1));
  const std::string err = agg.results["g"].error();
  EXPECT_EQ(err.rfind("nccl: ", 0), 0u) << err;  // unavailable here or no driver: never a crash
  EXPECT_EQ(runner.nccl_status(), err);
  runner.Stop();
}

// Captures the default logger's info lines for the test's life.
class LogCapture {
 public:
  LogCapture() : previous_(spdlog::default_logger()) {
    auto capture = std::make_shared<spdlog::logger>(
        "capture", std::make_shared<spdlog::sinks::ostream_sink_mt>(log_));
    capture->set_level(spdlog::level::info);
    spdlog::set_default_logger(capture);
  }
  ~LogCapture() { spdlog::set_default_logger(previous_); }
  std::string text() const { return log_.str(); }

 private:
  std::ostringstream log_;
  std::shared_ptr<spdlog::logger> previous_;
};

// Node "g" with the NCCL library hidden.
CollectiveRunnerOptions HiddenNcclOptions() {
  CollectiveRunnerOptions o;
  o.node = "g";
  o.nccl.nccl_library = "/nonexistent/libnccl.so.2";
  return o;
}

TEST(CollectiveRunner, WithoutTheDriverFilesNcclIsNotLoadedAndEachJobLooksAgain) {
  LogCapture log;
  FakeAggregator agg;
  metrics::Registry registry;
  CollectiveRunnerOptions o = HiddenNcclOptions();
  const std::string driver =
      ::testing::TempDir() + "/fw-collective-driver-" + std::to_string(getpid());
  std::remove(driver.c_str());
  o.nvidia_driver_files = {"/nonexistent/nvidiactl", driver};
  CollectiveRunner runner(o, agg.SendFor("g"), registry);
  agg.runners["g"] = &runner;
  runner.Start();
  for (const char* id : {"job-d1", "job-d2"}) {
    agg.results.clear();
    runner.OnJob(Job(id, {"g"}, "nccl"));
    ASSERT_TRUE(agg.WaitResults(1));
    EXPECT_EQ(agg.results["g"].error(),
              "nccl: no driver (no NVIDIA driver (none of /nonexistent/nvidiactl, " + driver +
                  " exists); NCCL not loaded)");
  }
  EXPECT_NE(
      registry.RenderToString().find("fabricwatch_collective_nccl_state{state=\"no_driver\"} 1"),
      std::string::npos);
  // The driver appears: the next job loads the libraries (absent here: unavailable).
  { std::ofstream(driver) << "NVRM version: test\n"; }
  agg.results.clear();
  runner.OnJob(Job("job-d3", {"g"}, "nccl"));
  ASSERT_TRUE(agg.WaitResults(1));
  EXPECT_EQ(agg.results["g"].error().rfind("nccl: unavailable", 0), 0u) << agg.results["g"].error();
  runner.Stop();
  // Only the job after the driver appeared tried to load the libraries.
  const std::string text = log.text();
  const size_t first = text.find("library absent");
  EXPECT_NE(first, std::string::npos) << text;
  EXPECT_EQ(text.find("library absent", first + 1), std::string::npos) << text;
  std::remove(driver.c_str());
}

TEST(CollectiveRunner, NcclLibrariesAreLoadedOnceAndTheStatusIsKept) {
  // A hidden library: every NCCL job answers "unavailable", but the load (and its log line) happens
  // on the first job only.
  LogCapture log;
  FakeAggregator agg;
  metrics::Registry registry;
  CollectiveRunnerOptions o = HiddenNcclOptions();
  CollectiveRunner runner(o, agg.SendFor("g"), registry);
  agg.runners["g"] = &runner;
  runner.Start();
  std::vector<std::string> errors;
  for (const char* id : {"job-5", "job-6", "job-7"}) {
    agg.results.clear();
    runner.OnJob(Job(id, {"g"}, "nccl"));
    ASSERT_TRUE(agg.WaitResults(1));
    errors.push_back(agg.results["g"].error());
  }
  runner.Stop();
  for (const std::string& e : errors) {
    EXPECT_EQ(e.rfind("nccl: unavailable", 0), 0u) << e;
    EXPECT_EQ(e, errors[0]);
  }
  const std::string text = log.text();
  size_t loads = 0;
  for (size_t at = text.find("library absent"); at != std::string::npos;
       at = text.find("library absent", at + 1)) {
    ++loads;
  }
  EXPECT_EQ(loads, 1u) << text;
  const std::string metrics = registry.RenderToString();
  EXPECT_NE(metrics.find("fabricwatch_collective_nccl_state{state=\"unavailable\"} 1"),
            std::string::npos)
      << metrics;
}

TEST(CollectiveRunner, BusyGpusSkipTheNcclProbeWithAReasonAndACounter) {
  FakeAggregator agg;
  metrics::Registry registry;
  CollectiveRunnerOptions o;
  o.node = "g";
  o.nccl.nccl_library = "/nonexistent/libnccl.so.2";
  collective::FakeNvml* fake = nullptr;
  o.nvml_loader = [&fake]() -> StatusOr<std::unique_ptr<collective::NvmlApi>> {
    auto nvml = std::make_unique<collective::FakeNvml>(std::vector<collective::FakeNvml::Gpu>{
        {.utilization = 0}, {.utilization = 90, .processes = 1}});
    fake = nvml.get();
    return std::unique_ptr<collective::NvmlApi>(std::move(nvml));
  };
  CollectiveRunner runner(o, agg.SendFor("g"), registry);
  agg.runners["g"] = &runner;
  runner.Start();
  runner.OnJob(Job("job-8", {"g"}, "nccl"));
  ASSERT_TRUE(agg.WaitResults(1));
  EXPECT_EQ(agg.results["g"].error(), "skipped: GPUs busy: gpu1 (utilization 90%, 1 processes)");
  // The GPUs go idle: the probe goes on (and here meets the missing NCCL library).
  agg.results.clear();
  fake->gpus()[1] = {};
  runner.OnJob(Job("job-9", {"g"}, "nccl"));
  ASSERT_TRUE(agg.WaitResults(1));
  EXPECT_EQ(agg.results["g"].error().rfind("nccl: unavailable", 0), 0u) << agg.results["g"].error();
  runner.Stop();
  const std::string text = registry.RenderToString();
  EXPECT_NE(text.find("fabricwatch_collective_runs_total{backend=\"nccl\",outcome=\"skipped\"} 1"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("fabricwatch_collective_runs_total{backend=\"nccl\",outcome=\"failed\"} 1"),
            std::string::npos)
      << text;
}

}  // namespace
}  // namespace fw::agent
