// libgrpc's timer threads and resolver executor stopped, its timers ticked on the agent's
// EventEngine thread (grpc_threads.h). Each test runs in a process of its own (gtest discovery),
// since the switches are process-wide.
#include "daemon/agent/grpc_threads.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <string>
#include <thread>

#include "daemon/agent/event_engine.h"
#include "fabricwatch.grpc.pb.h"

namespace fw::agent {
namespace {

using namespace std::chrono_literals;

// Thread names (comm, 15 characters at most) of this process, with counts.
std::map<std::string, int> ThreadNames() {
  std::map<std::string, int> names;
  DIR* dir = opendir("/proc/self/task");
  while (dirent* e = dir != nullptr ? readdir(dir) : nullptr) {
    if (e->d_name[0] == '.') continue;
    std::ifstream comm(std::string("/proc/self/task/") + e->d_name + "/comm");
    std::string name;
    if (std::getline(comm, name)) ++names[name];
  }
  if (dir != nullptr) closedir(dir);
  return names;
}

int Count(const std::map<std::string, int>& names, const std::string& name) {
  auto it = names.find(name);
  return it == names.end() ? 0 : it->second;
}

// A thread that gRPC has just started names itself from the thread, a moment later: waits up to
// 2 s for `name` to count at least `n`.
std::map<std::string, int> ThreadNamesOnceCounted(const std::string& name, int n) {
  auto names = ThreadNames();
  for (int i = 0; i < 200 && Count(names, name) < n; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    names = ThreadNames();
  }
  return names;
}

std::string Listing(const std::map<std::string, int>& names) {
  std::string out;
  for (const auto& [name, n] : names) out += name + " x" + std::to_string(n) + "; ";
  return out;
}

// A TCP listener on 127.0.0.1 that accepts (in the kernel's backlog) and never answers: a gRPC
// call to it waits for the HTTP/2 handshake until its deadline.
struct SilentListener {
  SilentListener() {
    fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(a);
    if (fd < 0 || bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 || listen(fd, 4) != 0 ||
        getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
      port = 0;
      return;
    }
    port = ntohs(a.sin_port);
  }
  ~SilentListener() {
    if (fd >= 0) close(fd);
  }
  int fd = -1;
  int port = 0;
};

TEST(GrpcThreads, StoppedAndTheCallDeadlineTimerFiresOnTheEngineThread) {
  UseOneThreadEventEngine();
  ASSERT_TRUE(StopGrpcOwnThreads());
  // The default executor's thread was started again (SetThreadingDefault(true)).
  auto names = ThreadNamesOnceCounted("default-executo", 1);
  EXPECT_EQ(Count(names, "grpc_global_tim"), 0) << Listing(names);
  EXPECT_EQ(Count(names, "resolver-execut"), 0) << Listing(names);
  EXPECT_EQ(Count(names, "default-executo"), 1) << Listing(names);
  // No engine yet: one made now would not tick (RunPeriodicallyOnEngineThread is read when an
  // engine is made), which is why the agent's main() calls it before the first channel.
  EXPECT_EQ(Count(names, "fw-grpc-ee"), 0) << Listing(names);
  RunPeriodicallyOnEngineThread(TickGrpcTimers, 100ms);

  SilentListener server;
  ASSERT_GT(server.port, 0);
  auto channel = grpc::CreateChannel("127.0.0.1:" + std::to_string(server.port),
                                     grpc::InsecureChannelCredentials());
  auto stub = fabricwatch::v1::Aggregator::NewStub(channel);
  grpc::ClientContext ctx;
  const auto start = std::chrono::steady_clock::now();
  ctx.set_deadline(std::chrono::system_clock::now() + 300ms);
  grpc::CompletionQueue cq;
  fabricwatch::v1::QualifyRequest request;
  fabricwatch::v1::QualifyReport reply;
  grpc::Status status;
  auto call = stub->AsyncQualify(&ctx, request, &cq);
  call->Finish(&reply, &status, reinterpret_cast<void*>(1));
  // The deadline is an iomgr timer: only the tick fires it. Without the tick the call would wait
  // for the handshake forever; 10 s turns that into a failure instead of a hang.
  void* tag = nullptr;
  bool ok = false;
  const auto got = cq.AsyncNext(&tag, &ok, std::chrono::system_clock::now() + 10s);
  const auto elapsed = std::chrono::steady_clock::now() - start;
  if (got != grpc::CompletionQueue::GOT_EVENT) {
    ctx.TryCancel();
    ADD_FAILURE() << "the 300 ms deadline did not fire within 10 s";
    cq.Next(&tag, &ok);
  } else {
    EXPECT_EQ(status.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED) << status.error_message();
    EXPECT_GE(elapsed, 300ms);
    // A timer fires at most one tick period late; the rest is scheduling slack on a loaded host.
    EXPECT_LT(elapsed, 3s);
  }
  names = ThreadNames();
  EXPECT_EQ(Count(names, "fw-grpc-ee"), 1) << Listing(names);
  EXPECT_EQ(Count(names, "grpc_global_tim"), 0) << Listing(names);
  EXPECT_EQ(Count(names, "resolver-execut"), 0) << Listing(names);
  cq.Shutdown();
  while (cq.Next(&tag, &ok)) {
  }
}

// A name, not an address: c-ares (libgrpc's default resolver) resolves it without the resolver
// executor's thread. The call then connects to the silent listener and ends at its deadline
// (a failed resolution would end it at once, UNAVAILABLE).
TEST(GrpcThreads, ANameResolvesWithoutTheResolverExecutor) {
  UseOneThreadEventEngine();
  ASSERT_TRUE(StopGrpcOwnThreads());
  RunPeriodicallyOnEngineThread(TickGrpcTimers, 100ms);
  SilentListener server;
  ASSERT_GT(server.port, 0);
  auto stub = fabricwatch::v1::Aggregator::NewStub(grpc::CreateChannel(
      "localhost:" + std::to_string(server.port), grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + 1s);
  fabricwatch::v1::QualifyReport reply;
  const grpc::Status status = stub->Qualify(&ctx, fabricwatch::v1::QualifyRequest(), &reply);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED) << status.error_message();
  pollfd pending{server.fd, POLLIN, 0};
  const int accepted =
      poll(&pending, 1, 0) == 1 ? accept4(server.fd, nullptr, nullptr, SOCK_CLOEXEC) : -1;
  EXPECT_GE(accepted, 0) << "the call never connected to localhost:" << server.port;
  if (accepted >= 0) close(accepted);
  const auto names = ThreadNames();
  EXPECT_EQ(Count(names, "resolver-execut"), 0) << Listing(names);
  EXPECT_EQ(Count(names, "grpc_global_tim"), 0) << Listing(names);
}

TEST(GrpcThreads, EnvironmentSwitchKeepsGrpcsOwnThreads) {
  setenv("FW_GRPC_OWN_THREADS", "1", 1);
  EXPECT_FALSE(StopGrpcOwnThreads());
  ThreadNamesOnceCounted("grpc_global_tim", 1);
  ThreadNamesOnceCounted("default-executo", 1);
  const auto names = ThreadNamesOnceCounted("resolver-execut", 1);
  EXPECT_GE(Count(names, "grpc_global_tim"), 1) << Listing(names);
  EXPECT_EQ(Count(names, "resolver-execut"), 1) << Listing(names);
  EXPECT_EQ(Count(names, "default-executo"), 1) << Listing(names);
}

}  // namespace
}  // namespace fw::agent
