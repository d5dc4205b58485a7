// ServiceNotifier against real bound AF_UNIX datagram sockets (path and abstract), and the
// watchdog loop's pings.
#include "common/sd_notify.h"

#include <gtest/gtest.h>
#include <pthread.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <optional>
#include <random>
#include <thread>

#include "common/testing/temp_dir.h"

namespace fw {
namespace {

// A bound datagram socket standing in for the service manager's notification socket.
class NotifyListener {
 public:
  // `name` as $NOTIFY_SOCKET holds it: "/path" or "@abstract".
  explicit NotifyListener(std::string name) : name_(std::move(name)) {
    fd_ = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    EXPECT_GE(fd_, 0) << std::strerror(errno);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::memcpy(a.sun_path, name_.data(), name_.size());
    socklen_t len = offsetof(sockaddr_un, sun_path) + name_.size();
    if (name_[0] == '@') {
      a.sun_path[0] = '\0';
    } else {
      len += 1;
    }
    EXPECT_EQ(bind(fd_, reinterpret_cast<sockaddr*>(&a), len), 0) << std::strerror(errno);
    timeval tv{.tv_sec = 2, .tv_usec = 0};
    EXPECT_EQ(setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv), 0);
  }
  ~NotifyListener() {
    close(fd_);
    if (name_[0] == '/') unlink(name_.c_str());
  }
  const std::string& name() const { return name_; }

  // The next datagram, or nullopt after `timeout_ms` without one.
  std::optional<std::string> Receive(int timeout_ms = 2000) {
    timeval tv{.tv_sec = timeout_ms / 1000, .tv_usec = (timeout_ms % 1000) * 1000};
    setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    char buf[4096];
    ssize_t n = recv(fd_, buf, sizeof buf, 0);
    if (n < 0) return std::nullopt;
    return std::string(buf, static_cast<size_t>(n));
  }

 private:
  std::string name_;
  int fd_ = -1;
};

std::string UniqueName() {
  std::random_device rd;
  return "fw-sd-notify-test-" + std::to_string(getpid()) + "-" + std::to_string(rd());
}

using TempDir = ::fw::testing::TempDir;

TEST(ServiceNotifierTest, SendsToPathSocket) {
  TempDir dir;
  NotifyListener listener(dir.path() + "/notify");
  ServiceNotifier n(listener.name());
  ASSERT_TRUE(n.enabled());
  Status st = n.Notify("READY=1\nSTATUS=serving");
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(listener.Receive(), "READY=1\nSTATUS=serving");
}

TEST(ServiceNotifierTest, SendsToAbstractSocket) {
  NotifyListener listener("@" + UniqueName());
  ServiceNotifier n(listener.name());
  Status st = n.Notify("STOPPING=1");
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(listener.Receive(), "STOPPING=1");
  // The abstract name must not have been turned into a file.
  EXPECT_FALSE(std::filesystem::exists(listener.name()));
}

TEST(ServiceNotifierTest, ReadsNotifySocketFromEnvironment) {
  TempDir dir;
  NotifyListener listener(dir.path() + "/env-notify");
  ASSERT_EQ(setenv("NOTIFY_SOCKET", listener.name().c_str(), 1), 0);
  ServiceNotifier n;
  unsetenv("NOTIFY_SOCKET");
  ASSERT_TRUE(n.NotifyOrLog("READY=1"));
  EXPECT_EQ(listener.Receive(), "READY=1");
}

TEST(ServiceNotifierTest, UnsetSocketIsASuccessfulNoOp) {
  unsetenv("NOTIFY_SOCKET");
  ServiceNotifier from_env;
  EXPECT_FALSE(from_env.enabled());
  EXPECT_TRUE(from_env.Notify("READY=1").ok());
  EXPECT_TRUE(from_env.NotifyOrLog("READY=1"));
}

TEST(ServiceNotifierTest, RejectsMalformedNames) {
  EXPECT_EQ(ServiceNotifier("relative/notify").Notify("READY=1").code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(ServiceNotifier("@").Notify("READY=1").code(), StatusCode::kInvalidArgument);
  // sun_path holds 108 bytes: a 108-byte path leaves no room for its NUL, a 108-byte abstract
  // name fits exactly.
  EXPECT_EQ(ServiceNotifier("/" + std::string(107, 'x')).Notify("READY=1").code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(ServiceNotifier("@" + std::string(108, 'x')).Notify("READY=1").code(),
            StatusCode::kInvalidArgument);
}

TEST(ServiceNotifierTest, LongestAbstractNameIsDelivered) {
  std::string name = UniqueName();
  name += std::string(107 - name.size(), 'y');
  NotifyListener listener("@" + name);
  Status st = ServiceNotifier(listener.name()).Notify("READY=1");
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(listener.Receive(), "READY=1");
}

TEST(ServiceNotifierTest, MissingListenerIsUnavailableAndLoggedOnce) {
  TempDir dir;
  ServiceNotifier n(dir.path() + "/nobody-listens");
  Status st = n.Notify("READY=1");
  EXPECT_EQ(st.code(), StatusCode::kUnavailable);
  EXPECT_NE(st.message().find("nobody-listens"), std::string::npos) << st.message();
  EXPECT_FALSE(n.NotifyOrLog("WATCHDOG=1"));
  EXPECT_FALSE(n.NotifyOrLog("WATCHDOG=1"));  // still reported as failed, logged only once
}

TEST(WatchdogIntervalTest, FollowsWatchdogUsecAndPid) {
  unsetenv("WATCHDOG_PID");
  unsetenv("WATCHDOG_USEC");
  EXPECT_EQ(WatchdogInterval().count(), 0);
  setenv("WATCHDOG_USEC", "30000000", 1);
  EXPECT_EQ(WatchdogInterval(), std::chrono::seconds(30));
  setenv("WATCHDOG_PID", std::to_string(getpid()).c_str(), 1);
  EXPECT_EQ(WatchdogInterval(), std::chrono::seconds(30));
  // Meant for another process (a parent that exec'd us without clearing it): not ours.
  setenv("WATCHDOG_PID", std::to_string(getpid() + 1).c_str(), 1);
  EXPECT_EQ(WatchdogInterval().count(), 0);
  unsetenv("WATCHDOG_PID");
  for (const char* bad : {"0", "-5", "30s", ""}) {
    setenv("WATCHDOG_USEC", bad, 1);
    EXPECT_EQ(WatchdogInterval().count(), 0) << bad;
  }
  unsetenv("WATCHDOG_USEC");
}

// Runs `body` (a signal wait) on its own thread, which alone receives SIGTERM.
class SignalWaitThread {
 public:
  explicit SignalWaitThread(std::function<int()> body) {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    pthread_sigmask(SIG_BLOCK, &set, nullptr);  // inherited by the thread below
    thread_ = std::thread([body = std::move(body), this] { signal_ = body(); });
  }
  // Sends SIGTERM to the thread and returns the signal its body reported.
  int Terminate() {
    pthread_kill(thread_.native_handle(), SIGTERM);
    thread_.join();
    return signal_;
  }

 private:
  std::thread thread_;
  std::atomic<int> signal_{0};
};

// WaitForTerminationWithWatchdog(n, period, alive) on its own thread.
class WatchdogLoop : public SignalWaitThread {
 public:
  WatchdogLoop(const ServiceNotifier& n, std::chrono::microseconds period,
               std::function<bool()> alive)
      : SignalWaitThread([&n, period, alive = std::move(alive)] {
          return WaitForTerminationWithWatchdog(n, period, alive);
        }) {}
};

TEST(WatchdogLoopTest, PingsWhileAliveAndReturnsTheSignal) {
  NotifyListener listener("@" + UniqueName());
  ServiceNotifier n(listener.name());
  std::atomic<int> checks{0};
  WatchdogLoop loop(n, std::chrono::milliseconds(200), [&] {
    ++checks;
    return true;
  });
  // A 200 ms period pings every 50 ms; three pings arrive well within a second.
  for (int i = 0; i < 3; ++i) EXPECT_EQ(listener.Receive(1000), "WATCHDOG=1") << i;
  EXPECT_EQ(loop.Terminate(), SIGTERM);
  EXPECT_GE(checks.load(), 3);
}

TEST(WatchdogLoopTest, WithholdsPingsWhileNotAlive) {
  NotifyListener listener("@" + UniqueName());
  ServiceNotifier n(listener.name());
  std::atomic<bool> healthy{false};
  std::atomic<int> checks{0};
  WatchdogLoop loop(n, std::chrono::milliseconds(200), [&] {
    ++checks;
    return healthy.load();
  });
  EXPECT_EQ(listener.Receive(400), std::nullopt);  // about 8 failed checks, no ping
  EXPECT_GE(checks.load(), 4);
  healthy = true;
  EXPECT_EQ(listener.Receive(1000), "WATCHDOG=1");
  EXPECT_EQ(loop.Terminate(), SIGTERM);
}

TEST(WatchdogLoopTest, NoWatchdogJustWaitsForTheSignal) {
  NotifyListener listener("@" + UniqueName());
  ServiceNotifier n(listener.name());
  std::atomic<int> checks{0};
  WatchdogLoop loop(n, std::chrono::microseconds(0), [&] {
    ++checks;
    return true;
  });
  EXPECT_EQ(listener.Receive(300), std::nullopt);
  EXPECT_EQ(loop.Terminate(), SIGTERM);
  EXPECT_EQ(checks.load(), 0);
}

// The agent's report loop rides on this wait (ServiceWork): it runs when due, at once when its
// eventfd is written, beside the watchdog pings, and SIGTERM still ends the wait.
TEST(WatchdogLoopTest, RunsTheWorkWhenDueAndWhenWokenBesideThePings) {
  NotifyListener listener("@" + UniqueName());
  ServiceNotifier n(listener.name());
  const int wake = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  ASSERT_GE(wake, 0);
  std::atomic<int> runs{0};
  std::atomic<bool> soon{true};  // due again in 20 ms, else in an hour (only a wake runs it)
  ServiceWork work{[&] {
                     ++runs;
                     return std::chrono::steady_clock::now() +
                            (soon ? std::chrono::milliseconds(20) : std::chrono::hours(1));
                   },
                   wake};
  SignalWaitThread loop([&] {
    return WaitForTerminationWithWatchdog(
        n, std::chrono::milliseconds(200), [] { return true; }, &work);
  });
  EXPECT_EQ(listener.Receive(1000), "WATCHDOG=1");
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (runs < 5 && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_GE(runs.load(), 5) << "work due every 20 ms";
  soon = false;
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // the last 20 ms run is over
  const int before = runs;
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_EQ(runs.load(), before) << "not due, not woken";
  EXPECT_EQ(listener.Receive(1000), "WATCHDOG=1") << "pings go on between the runs";
  ASSERT_EQ(eventfd_write(wake, 1), 0);
  const auto woken = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (runs == before && std::chrono::steady_clock::now() < woken) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_EQ(runs.load(), before + 1) << "one run per wake";
  EXPECT_EQ(loop.Terminate(), SIGTERM);
  close(wake);
}

TEST(RunAsNotifyServiceTest, ReadyThenWatchdogThenStopping) {
  NotifyListener listener("@" + UniqueName());
  ASSERT_EQ(setenv("NOTIFY_SOCKET", listener.name().c_str(), 1), 0);
  ASSERT_EQ(setenv("WATCHDOG_USEC", "400000", 1), 0);
  std::atomic<int> timeout_seen{0};
  SignalWaitThread service([&] {
    return RunAsNotifyService("serving: test", [&](int timeout_ms) {
      timeout_seen = timeout_ms;
      return true;
    });
  });
  EXPECT_EQ(listener.Receive(), "READY=1\nSTATUS=serving: test");
  EXPECT_EQ(listener.Receive(), "WATCHDOG=1");
  EXPECT_EQ(listener.Receive(), "WATCHDOG=1");
  EXPECT_EQ(service.Terminate(), SIGTERM);
  unsetenv("NOTIFY_SOCKET");
  unsetenv("WATCHDOG_USEC");
  // The last ping may still be queued ahead of STOPPING=1.
  std::optional<std::string> last;
  do {
    last = listener.Receive(1000);
  } while (last == "WATCHDOG=1");
  EXPECT_EQ(last, "STOPPING=1\nSTATUS=shutting down");
  // An eighth of 400 ms is 50 ms, raised to the 100 ms floor.
  EXPECT_EQ(timeout_seen.load(), 100);
}

TEST(SelfDialAddressTest, KeepsTheHostAndUsesTheBoundPort) {
  EXPECT_EQ(SelfDialAddress("0.0.0.0:9751", 9751), "0.0.0.0:9751");
  EXPECT_EQ(SelfDialAddress("127.0.0.1:0", 40123), "127.0.0.1:40123");
  EXPECT_EQ(SelfDialAddress("node01:9752", 9752), "node01:9752");
  EXPECT_EQ(SelfDialAddress(":9752", 9752), ":9752");
}

}  // namespace
}  // namespace fw
