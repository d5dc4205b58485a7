// The real daemons under a stand-in service manager: with $NOTIFY_SOCKET set they send READY=1
// only once their listeners accept, from their main PID (what NotifyAccess=main requires),
// WATCHDOG=1 while $WATCHDOG_USEC asks for it, and STOPPING=1 on SIGTERM before a clean exit.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "common/http/http_client.h"
#include "tests/integration/process.h"

namespace fw {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

struct Notification {
  std::string text;
  pid_t sender = 0;
};

// The service manager's end: a datagram socket with SO_PASSCRED, so each message carries the
// sender's PID as systemd sees it.
class NotifySocket {
 public:
  explicit NotifySocket(std::string path) : path_(std::move(path)) {
    fd_ = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::strncpy(a.sun_path, path_.c_str(), sizeof a.sun_path - 1);
    int one = 1;
    ok_ = fd_ >= 0 && bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
          setsockopt(fd_, SOL_SOCKET, SO_PASSCRED, &one, sizeof one) == 0;
  }
  ~NotifySocket() {
    if (fd_ >= 0) close(fd_);
  }
  bool ok() const { return ok_; }
  const std::string& path() const { return path_; }

  std::optional<Notification> Receive(milliseconds timeout) {
    timeval tv{.tv_sec = static_cast<time_t>(timeout.count() / 1000),
               .tv_usec = static_cast<suseconds_t>(timeout.count() % 1000 * 1000)};
    setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    char buf[4096];
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(ucred))];
    iovec iov{.iov_base = buf, .iov_len = sizeof buf};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    ssize_t n = recvmsg(fd_, &msg, 0);
    if (n < 0) return std::nullopt;
    Notification out{std::string(buf, static_cast<size_t>(n)), 0};
    for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
      if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_CREDENTIALS) {
        ucred cred;
        std::memcpy(&cred, CMSG_DATA(c), sizeof cred);
        out.sender = cred.pid;
      }
    }
    return out;
  }

  // The next message that is not a watchdog ping.
  std::optional<Notification> ReceiveState(milliseconds timeout) {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      auto left =
          std::chrono::duration_cast<milliseconds>(deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return std::nullopt;
      auto n = Receive(left);
      if (!n || n->text != "WATCHDOG=1") return n;
    }
  }

 private:
  std::string path_;
  int fd_ = -1;
  bool ok_ = false;
};

bool TcpAccepts(int port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bool ok = fd >= 0 && connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  if (fd >= 0) close(fd);
  return ok;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// Starts `argv` with NOTIFY_SOCKET (and WATCHDOG_USEC when `watchdog_usec` is set) in its
// environment only.
std::unique_ptr<testing::Process> StartNotified(const NotifySocket& sock,
                                                std::vector<std::string> argv,
                                                const std::string& log,
                                                const char* watchdog_usec = nullptr) {
  setenv("NOTIFY_SOCKET", sock.path().c_str(), 1);
  if (watchdog_usec != nullptr) setenv("WATCHDOG_USEC", watchdog_usec, 1);
  auto p = std::make_unique<testing::Process>(std::move(argv), log);
  unsetenv("NOTIFY_SOCKET");
  unsetenv("WATCHDOG_USEC");
  return p;
}

int ExitCode(int status) { return WIFEXITED(status) ? WEXITSTATUS(status) : -1; }

// Expects STOPPING=1 from `p` after SIGTERM, then exit status 0.
void ExpectCleanStop(NotifySocket& sock, testing::Process& p, const std::string& log) {
  p.Signal(SIGTERM);
  auto stopping = sock.ReceiveState(seconds(10));
  ASSERT_TRUE(stopping.has_value()) << "no STOPPING=1 after SIGTERM; log:\n" << ReadFile(log);
  EXPECT_EQ(stopping->text.rfind("STOPPING=1\n", 0), 0u) << stopping->text;
  EXPECT_EQ(stopping->sender, p.pid());
  EXPECT_EQ(ExitCode(p.Wait(seconds(15))), 0) << ReadFile(log);
}

TEST(ReadinessTest, AggregatorIsReadyOnlyWhenBothListenersAccept) {
  testing::TempDir dir;
  NotifySocket sock(dir.path() + "/notify");
  ASSERT_TRUE(sock.ok()) << std::strerror(errno);
  const std::string log = dir.path() + "/aggregator.log", ports = dir.path() + "/ports.json";
  auto p =
      StartNotified(sock,
                    {FW_AGGREGATOR_BIN, "--insecure", "--grpc-listen", "127.0.0.1:0", "--http-listen",
                     "127.0.0.1:0", "--state-dir", dir.path() + "/state", "--port-file", ports},
                    log);
  auto ready = sock.ReceiveState(seconds(30));
  ASSERT_TRUE(ready.has_value()) << "no READY=1; log:\n" << ReadFile(log);
  // Checked at once, before any retry could hide a premature READY=1.
  const int grpc = testing::ReadPort(ports, "grpc_port"),
            http = testing::ReadPort(ports, "http_port");
  ASSERT_GT(grpc, 0);
  ASSERT_GT(http, 0);
  EXPECT_TRUE(TcpAccepts(grpc));
  auto readyz = http::Get("127.0.0.1:" + std::to_string(http), "/readyz", 2000);
  ASSERT_TRUE(readyz.ok()) << readyz.status().ToString();
  EXPECT_EQ(readyz->status, 200);
  EXPECT_EQ(ready->text.rfind("READY=1\nSTATUS=serving: gRPC port " + std::to_string(grpc), 0), 0u)
      << ready->text;
  EXPECT_EQ(ready->sender, p->pid()) << "NotifyAccess=main would drop this message";
  ExpectCleanStop(sock, *p, log);
}

TEST(ReadinessTest, AgentIsReadyOnlyWhenItsListenersAccept) {
  testing::TempDir dir;
  NotifySocket sock(dir.path() + "/notify");
  ASSERT_TRUE(sock.ok()) << std::strerror(errno);
  const std::string log = dir.path() + "/agent.log", ports = dir.path() + "/ports.json";
  const std::string data = FW_TESTDATA;
  // No aggregator listens on port 1: readiness must not wait for the uplink, which reconnects
  // in the background for as long as the agent runs.
  auto p =
      StartNotified(sock,
                    {FW_AGENT_BIN, "--insecure", "--aggregator", "127.0.0.1:1", "--node-name", "n1",
                     "--http-listen", "127.0.0.1:0", "--probe-address", "127.0.0.1", "--probe-port",
                     "0", "--hwloc-xml", data + "/hwloc/psmgmt-topo.jrc0386.xml", "--sysfs-root",
                     data + "/sysfs/gpud-h100", "--port-file", ports},
                    log);
  auto ready = sock.ReceiveState(seconds(30));
  ASSERT_TRUE(ready.has_value()) << "no READY=1; log:\n" << ReadFile(log);
  const int http = testing::ReadPort(ports, "http_port");
  ASSERT_GT(http, 0);
  auto healthz = http::Get("127.0.0.1:" + std::to_string(http), "/healthz", 2000);
  ASSERT_TRUE(healthz.ok()) << healthz.status().ToString();
  EXPECT_EQ(healthz->status, 200);
  EXPECT_EQ(ready->text, "READY=1\nSTATUS=serving: HTTP port " + std::to_string(http));
  EXPECT_EQ(ready->sender, p->pid());
  ExpectCleanStop(sock, *p, log);
}

TEST(ReadinessTest, AggregatorPingsTheWatchdogWhileHealthy) {
  testing::TempDir dir;
  NotifySocket sock(dir.path() + "/notify");
  ASSERT_TRUE(sock.ok());
  const std::string log = dir.path() + "/aggregator.log";
  // 400 ms asks for a ping every 100 ms, each after a /healthz round trip.
  auto p = StartNotified(
      sock,
      {FW_AGGREGATOR_BIN, "--insecure", "--grpc-listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0"},
      log, "400000");
  auto ready = sock.Receive(seconds(30));
  ASSERT_TRUE(ready.has_value()) << ReadFile(log);
  ASSERT_EQ(ready->text.rfind("READY=1\n", 0), 0u) << ready->text;
  int pings = 0;
  auto start = std::chrono::steady_clock::now();
  while (pings < 5) {
    auto n = sock.Receive(seconds(2));
    ASSERT_TRUE(n.has_value()) << "watchdog pings stopped after " << pings << "; log:\n"
                               << ReadFile(log);
    EXPECT_EQ(n->text, "WATCHDOG=1");
    EXPECT_EQ(n->sender, p->pid());
    ++pings;
  }
  // Five pings at 100 ms spacing: well under the 2 s it would take if they were late.
  EXPECT_LT(std::chrono::steady_clock::now() - start, seconds(2));
  ExpectCleanStop(sock, *p, log);
}

TEST(ReadinessTest, FailedStartNeverSignalsReady) {
  testing::TempDir dir;
  NotifySocket sock(dir.path() + "/notify");
  ASSERT_TRUE(sock.ok());
  const std::string log = dir.path() + "/aggregator.log";
  auto p = StartNotified(sock,
                         {FW_AGGREGATOR_BIN, "--insecure", "--grpc-listen", "127.0.0.1:0",
                          "--http-listen", "127.0.0.1:0", "--fabric-map",
                          dir.path() + "/missing.yaml"},
                         log);
  EXPECT_EQ(ExitCode(p->Wait(seconds(15))), 3) << ReadFile(log);
  EXPECT_FALSE(sock.Receive(milliseconds(200)).has_value()) << "READY=1 before a failed start";
}

}  // namespace
}  // namespace fw
