// The agent's one-thread EventEngine: closures and timers in order, cancellation, and gRPC using it
// in place of its own engine threads.
#include "daemon/agent/event_engine.h"

#include <dirent.h>
#include <grpcpp/alarm.h>
#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>
#include <gtest/gtest.h>

#include <atomic>
#include <fstream>
#include <future>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

namespace fw::agent {
namespace {

using namespace std::chrono_literals;

std::set<std::string> ThreadNames() {
  std::set<std::string> names;
  DIR* dir = opendir("/proc/self/task");
  while (dirent* e = dir != nullptr ? readdir(dir) : nullptr) {
    if (e->d_name[0] == '.') continue;
    std::ifstream comm(std::string("/proc/self/task/") + e->d_name + "/comm");
    std::string name;
    std::getline(comm, name);
    names.insert(name);
  }
  if (dir != nullptr) closedir(dir);
  return names;
}

TEST(OneThreadEventEngine, RunsClosuresAndTimersByDeadlineAndCancels) {
  auto engine = MakeOneThreadEventEngine();
  std::mutex mu;
  std::vector<std::string> order;
  auto note = [&](std::string what) {
    std::lock_guard<std::mutex> lock(mu);
    order.push_back(std::move(what));
  };
  std::promise<bool> worker;
  engine->Run([&] { worker.set_value(engine->IsWorkerThread()); });
  EXPECT_TRUE(worker.get_future().get());
  EXPECT_FALSE(engine->IsWorkerThread());

  std::promise<void> last;
  engine->RunAfter(120ms, [&] {
    note("120ms");
    last.set_value();
  });
  engine->RunAfter(20ms, [&] { note("20ms"); });
  auto cancelled = engine->RunAfter(60ms, [&] { note("cancelled"); });
  engine->Run([&] { note("now"); });
  EXPECT_TRUE(engine->Cancel(cancelled));
  EXPECT_FALSE(engine->Cancel(cancelled));
  const auto start = std::chrono::steady_clock::now();
  last.get_future().wait();
  EXPECT_GE(std::chrono::steady_clock::now() - start, 100ms);
  std::lock_guard<std::mutex> lock(mu);
  EXPECT_EQ(order, (std::vector<std::string>{"now", "20ms", "120ms"}));
}

std::atomic<int> g_ticks{0};

TEST(OneThreadEventEngine, RunsThePeriodicTickWhenIdle) {
  RunPeriodicallyOnEngineThread([] { ++g_ticks; }, 50ms);
  auto engine = MakeOneThreadEventEngine();
  std::this_thread::sleep_for(600ms);
  const int idle_ticks = g_ticks.load();
  // One tick per 50 ms while nothing else runs: 12 in 600 ms, fewer on a loaded host.
  EXPECT_GE(idle_ticks, 3);
  EXPECT_LE(idle_ticks, 13);
  // Busy with a closure every 10 ms, the thread ticks from half a period on: at most 2 per 50 ms.
  g_ticks = 0;
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < 30; ++i) {
    engine->Run([] {});
    std::this_thread::sleep_for(10ms);
  }
  const auto busy_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                           std::chrono::steady_clock::now() - start)
                           .count();
  EXPECT_GE(g_ticks.load(), 1);
  EXPECT_LE(g_ticks.load(), busy_ms / 25 + 1);
}

TEST(OneThreadEventEngine, GrpcRunsOnItWithoutItsOwnEngineThreads) {
  UseOneThreadEventEngine();
  // A channel makes libgrpc create its default EventEngine; an alarm runs a timer on it.
  auto channel = grpc::CreateChannel("127.0.0.1:1", grpc::InsecureChannelCredentials());
  channel->GetState(true);
  grpc::CompletionQueue cq;
  grpc::Alarm alarm;
  alarm.Set(&cq, std::chrono::system_clock::now() + 20ms, reinterpret_cast<void*>(1));
  void* tag = nullptr;
  bool ok = false;
  ASSERT_TRUE(cq.Next(&tag, &ok));
  EXPECT_TRUE(ok);
  EXPECT_EQ(tag, reinterpret_cast<void*>(1));
  const auto names = ThreadNames();
  EXPECT_EQ(names.count("event_engine"), 0u);
  EXPECT_EQ(names.count("timer_manager"), 0u);
  EXPECT_EQ(names.count("fw-grpc-ee"), 1u);
  cq.Shutdown();
  while (cq.Next(&tag, &ok)) {
  }
}

}  // namespace
}  // namespace fw::agent
