// libgrpc's internal thread switches, for the agent (grpc_threads.h).
//
// The switches are exported by libgrpc.so.29 (gRPC 1.51) but declared in no installed header, so
// they are looked up here by their mangled names, with dlsym: a libgrpc without them keeps its
// threads instead of failing to load. The agent links libgrpc.a and exports the four symbols from
// its executable (daemon/agent/CMakeLists.txt), where the same lookup finds them. What they do in gRPC 1.51 (src/core/lib/iomgr/
// timer_manager.cc and executor.cc; gRPC's own fuzzers run this way, with
// grpc_timer_manager_tick() in their loop):
// - grpc_timer_manager_set_threading(false) wakes the timer threads and joins them. Timers are then
//   checked only when someone calls grpc_timer_manager_tick(), which opens an ExecCtx, runs every
//   expired timer's closure on the calling thread and flushes. Nothing else fires iomgr timers:
//   the pollers only wake the timer threads (grpc_kick_poller) when a timer earlier than the known
//   first one is added, and that kick is lost without them. So the tick runs at a fixed period:
//   the next deadline that grpc_timer_check() reports cannot be read without an ExecCtx of our
//   own (an internal class), and a check without one would run due timers without it.
// - grpc_core::Executor::SetThreadingAll(false) joins the default and resolver executors' threads;
//   a closure queued to an executor without threads is appended to the caller's ExecCtx instead
//   and runs on the caller's thread when that ExecCtx flushes. The resolver executor runs only the
//   native DNS resolver's blocking getaddrinfo(). Debian's libgrpc resolves with c-ares by default
//   (asynchronous, on sockets that the uplink's completion-queue polling serves, plus timers), so
//   it is stopped; with GRPC_DNS_RESOLVER=native it keeps its thread, since getaddrinfo() would
//   otherwise block fw-uplink in StartCall (or fw-grpc-ee in a re-resolution timer) for up to
//   resolv.conf's timeout x attempts x nameservers (5 s x 2 x n by default).
// - The default executor is restarted at once (SetThreadingDefault(true)), because one of its
//   closures must not run inline: tcp_posix's backup poller (cover_self / run_poller, a LONG job).
//   A socket write that meets EAGAIN queues it, and it polls, re-queueing itself, until the write
//   completes or the socket fails. Inline it would hold whichever thread wrote (fw-uplink, the
//   timer tick's keepalive ping on fw-grpc-ee, or the main thread's TryCancel in Stop) for as long
//   as the aggregator does not read: up to TCP_USER_TIMEOUT or the keepalive timeout.
#include "daemon/agent/grpc_threads.h"

#include <dlfcn.h>
#include <grpc/grpc.h>
#include <spdlog/spdlog.h>
#include <strings.h>

#include <cstdlib>
#include <cstring>
#include <string>

namespace fw::agent {
namespace {

using SetThreadingFn = void (*)(bool);
using TickFn = void (*)();

// Mangled names in libgrpc.so.29 (gRPC 1.51.1, `nm -D --defined-only`).
constexpr char kTimerSetThreading[] = "_Z32grpc_timer_manager_set_threadingb";  // (bool)
constexpr char kTimerTick[] = "_Z23grpc_timer_manager_tickv";                   // ()
constexpr char kExecutorSetThreadingAll[] = "_ZN9grpc_core8Executor15SetThreadingAllEb";
constexpr char kExecutorSetThreadingDefault[] = "_ZN9grpc_core8Executor19SetThreadingDefaultEb";
// gRPC core's version in 1.51.x, whose code the comment above describes.
constexpr char kCoreVersion[] = "29.";

TickFn g_tick = nullptr;

template <class Fn>
Fn Lookup(const char* name) {
  return reinterpret_cast<Fn>(dlsym(RTLD_DEFAULT, name));
}

}  // namespace

bool StopGrpcOwnThreads() {
  // Held for the process's life: at the last reference gRPC would shut down, and the next
  // grpc_init() would start every thread again.
  grpc_init();
  const char* own = std::getenv("FW_GRPC_OWN_THREADS");
  if (own != nullptr && std::strcmp(own, "1") == 0) {
    spdlog::info(
        "msg=\"gRPC keeps its own timer and executor threads\" reason=FW_GRPC_OWN_THREADS");
    return false;
  }
  const std::string version = grpc_version_string();
  auto set_timer_threading = Lookup<SetThreadingFn>(kTimerSetThreading);
  auto tick = Lookup<TickFn>(kTimerTick);
  auto set_all = Lookup<SetThreadingFn>(kExecutorSetThreadingAll);
  auto set_default = Lookup<SetThreadingFn>(kExecutorSetThreadingDefault);
  if (version.rfind(kCoreVersion, 0) != 0 || set_timer_threading == nullptr || tick == nullptr ||
      set_all == nullptr || set_default == nullptr) {
    spdlog::warn(
        "msg=\"gRPC keeps its own timer and executor threads\" reason=\"libgrpc core {} is not "
        "the 1.51 (core 29) whose internal switches the agent knows\"",
        version);
    return false;
  }
  const char* resolver = std::getenv("GRPC_DNS_RESOLVER");
  const bool native_dns = resolver != nullptr && strcasecmp(resolver, "native") == 0;
  set_timer_threading(false);
  if (!native_dns) {
    set_all(false);
    set_default(true);
  }
  g_tick = tick;
  spdlog::info(
      "msg=\"gRPC timers driven by fw-grpc-ee\" period_ms={} resolver_executor={} "
      "default_executor=kept",
      kGrpcTimerTickPeriod.count(), native_dns ? "kept (GRPC_DNS_RESOLVER=native)" : "stopped");
  return true;
}

void TickGrpcTimers() {
  if (g_tick != nullptr) g_tick();
}

}  // namespace fw::agent
