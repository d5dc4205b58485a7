// One-thread EventEngine for the agent's gRPC (event_engine.h).
#include "daemon/agent/event_engine.h"

#include <pthread.h>

#include <atomic>
#include <chrono>
#include <deque>
#include <map>
#include <optional>
#include <thread>
#include <unordered_map>
#include <utility>

#include "common/mutex.h"

namespace fw::agent {
namespace {

using grpc_event_engine::experimental::EndpointConfig;
using grpc_event_engine::experimental::EventEngine;
using grpc_event_engine::experimental::MemoryAllocator;
using grpc_event_engine::experimental::MemoryAllocatorFactory;

constexpr char kUnsupported[] =
    "the agent's EventEngine runs closures and timers only (daemon/agent/event_engine.h)";

using Clock = std::chrono::steady_clock;
using Task = absl::AnyInvocable<void()>;

// The queue and timers, shared by the engine, its resolvers and its thread, so that the thread can
// finish the closure that dropped the engine's last reference.
struct Core {
  void Post(Task task) {
    {
      MutexLock lock(mu);
      ready.push_back(std::move(task));
    }
    wake.NotifyOne();
  }

  uint64_t Schedule(EventEngine::Duration when, Task task) {
    const Clock::time_point deadline =
        Clock::now() +
        std::chrono::duration_cast<Clock::duration>(std::max(when, EventEngine::Duration(0)));
    uint64_t id;
    bool earliest;
    {
      MutexLock lock(mu);
      id = next_id++;
      timers.emplace(std::make_pair(deadline, id), std::move(task));
      deadline_of.emplace(id, deadline);
      earliest = timers.begin()->first.second == id;
    }
    if (earliest) wake.NotifyOne();
    return id;
  }

  bool Cancel(uint64_t id) {
    MutexLock lock(mu);
    auto it = deadline_of.find(id);
    if (it == deadline_of.end()) return false;  // already run or cancelled
    timers.erase({it->second, it->first});
    deadline_of.erase(it);
    return true;
  }

  void Stop() {
    {
      MutexLock lock(mu);
      stopping = true;
    }
    wake.NotifyAll();
  }

  // The periodic tick when due, then due timers, then posted closures, one at a time, each
  // outside the lock. The tick is due a period after the last one, or half a period after it
  // when the thread is awake for a timer or closure anyway.
  static void Loop(std::shared_ptr<Core> core) {
    pthread_setname_np(pthread_self(), "fw-grpc-ee");
    MutexLock lock(core->mu);
    Clock::time_point last_tick = Clock::now();
    while (!core->stopping) {
      Task task;
      const Clock::time_point now = Clock::now();
      const bool timer_due = !core->timers.empty() && core->timers.begin()->first.first <= now;
      const bool busy = timer_due || !core->ready.empty();
      if (core->tick != nullptr &&
          now - last_tick >= (busy ? core->tick_period / 2 : core->tick_period)) {
        last_tick = now;
        lock.Unlock();
        core->tick();
        lock.Lock();
        continue;
      }
      if (timer_due) {
        auto node = core->timers.extract(core->timers.begin());
        core->deadline_of.erase(node.key().second);
        task = std::move(node.mapped());
      } else if (!core->ready.empty()) {
        task = std::move(core->ready.front());
        core->ready.pop_front();
      } else {
        std::optional<Clock::time_point> until;
        if (!core->timers.empty()) until = core->timers.begin()->first.first;
        if (core->tick != nullptr && (!until || last_tick + core->tick_period < *until)) {
          until = last_tick + core->tick_period;
        }
        if (until) {
          core->wake.WaitUntil(core->mu, *until);
        } else {
          core->wake.Wait(core->mu);
        }
        continue;
      }
      lock.Unlock();
      task();
      task = nullptr;  // its captures are released outside the lock too
      lock.Lock();
    }
  }

  // Set before the thread starts, read only by it.
  void (*tick)() = nullptr;
  Clock::duration tick_period{};

  Mutex mu;
  CondVar wake;
  bool stopping FW_GUARDED_BY(mu) = false;
  std::deque<Task> ready FW_GUARDED_BY(mu);
  std::map<std::pair<Clock::time_point, uint64_t>, Task> timers FW_GUARDED_BY(mu);
  std::unordered_map<uint64_t, Clock::time_point> deadline_of FW_GUARDED_BY(mu);
  uint64_t next_id FW_GUARDED_BY(mu) = 1;
};

// Every lookup answers Unimplemented, from the engine's thread as a real resolver would.
class NoResolver final : public EventEngine::DNSResolver {
 public:
  explicit NoResolver(std::shared_ptr<Core> core) : core_(std::move(core)) {}
  LookupTaskHandle LookupHostname(LookupHostnameCallback cb, absl::string_view, absl::string_view,
                                  EventEngine::Duration) override {
    return Fail(std::move(cb));
  }
  LookupTaskHandle LookupSRV(LookupSRVCallback cb, absl::string_view,
                             EventEngine::Duration) override {
    return Fail(std::move(cb));
  }
  LookupTaskHandle LookupTXT(LookupTXTCallback cb, absl::string_view,
                             EventEngine::Duration) override {
    return Fail(std::move(cb));
  }
  bool CancelLookup(LookupTaskHandle) override { return false; }

 private:
  template <class Callback>
  LookupTaskHandle Fail(Callback cb) {
    core_->Post([cb = std::move(cb)]() mutable { cb(absl::UnimplementedError(kUnsupported)); });
    return LookupTaskHandle{{0, 0}};
  }
  std::shared_ptr<Core> core_;
};

// The periodic work of RunPeriodicallyOnEngineThread, for engines made after it.
std::atomic<void (*)()> g_tick{nullptr};
std::atomic<int64_t> g_tick_period_ms{0};

std::shared_ptr<Core> MakeCore() {
  auto core = std::make_shared<Core>();
  core->tick = g_tick.load();
  core->tick_period = std::chrono::milliseconds(g_tick_period_ms.load());
  return core;
}

class OneThreadEventEngine final : public EventEngine {
 public:
  OneThreadEventEngine() : core_(MakeCore()), thread_(Core::Loop, core_) {}

  ~OneThreadEventEngine() override {
    core_->Stop();
    // gRPC may drop its last reference from a closure: the thread cannot join itself, and it
    // keeps the Core alive until that closure returns.
    if (IsWorkerThread()) {
      thread_.detach();
    } else {
      thread_.join();
    }
  }

  bool IsWorkerThread() override { return std::this_thread::get_id() == thread_.get_id(); }

  void Run(Closure* closure) override {
    core_->Post([closure] { closure->Run(); });
  }
  void Run(absl::AnyInvocable<void()> closure) override { core_->Post(std::move(closure)); }

  TaskHandle RunAfter(Duration when, Closure* closure) override {
    return Handle(core_->Schedule(when, [closure] { closure->Run(); }));
  }
  TaskHandle RunAfter(Duration when, absl::AnyInvocable<void()> closure) override {
    return Handle(core_->Schedule(when, std::move(closure)));
  }

  bool Cancel(TaskHandle handle) override {
    return handle.keys[1] == Tag() && core_->Cancel(static_cast<uint64_t>(handle.keys[0]));
  }

  absl::StatusOr<std::unique_ptr<Listener>> CreateListener(
      Listener::AcceptCallback, absl::AnyInvocable<void(absl::Status)>, const EndpointConfig&,
      std::unique_ptr<MemoryAllocatorFactory>) override {
    return absl::UnimplementedError(kUnsupported);
  }

  ConnectionHandle Connect(OnConnectCallback on_connect, const ResolvedAddress&,
                           const EndpointConfig&, MemoryAllocator, Duration) override {
    core_->Post(
        [cb = std::move(on_connect)]() mutable { cb(absl::UnimplementedError(kUnsupported)); });
    return ConnectionHandle{{0, 0}};
  }
  bool CancelConnect(ConnectionHandle) override { return false; }

  std::unique_ptr<DNSResolver> GetDNSResolver(const DNSResolver::ResolverOptions&) override {
    return std::make_unique<NoResolver>(core_);
  }

 private:
  intptr_t Tag() const { return reinterpret_cast<intptr_t>(this); }
  TaskHandle Handle(uint64_t id) const { return TaskHandle{{static_cast<intptr_t>(id), Tag()}}; }

  std::shared_ptr<Core> core_;
  std::thread thread_;
};

}  // namespace

std::unique_ptr<EventEngine> MakeOneThreadEventEngine() {
  return std::make_unique<OneThreadEventEngine>();
}

void UseOneThreadEventEngine() {
  grpc_event_engine::experimental::SetEventEngineFactory(MakeOneThreadEventEngine);
}

void RunPeriodicallyOnEngineThread(void (*tick)(), std::chrono::milliseconds period) {
  g_tick_period_ms.store(period.count());
  g_tick.store(tick);
}

}  // namespace fw::agent
