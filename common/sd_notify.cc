// sd_notify(3) over a plain AF_UNIX datagram socket, and a signal wait that feeds the watchdog.
#include "common/sd_notify.h"

#include <poll.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "common/log.h"

namespace fw {
namespace {

std::string EnvOrEmpty(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? std::string() : std::string(v);
}

struct UnixAddress {
  sockaddr_un addr{};
  socklen_t len = 0;
};

// "/path" names a socket file; "@name" an abstract socket, whose sun_path starts with a NUL and
// whose length counts only the bytes of the name (no terminator), as the kernel expects.
StatusOr<UnixAddress> ParseNotifySocket(const std::string& name) {
  UnixAddress a;
  a.addr.sun_family = AF_UNIX;
  if (name.size() < 2 || (name[0] != '/' && name[0] != '@')) {
    return Status::InvalidArgument("NOTIFY_SOCKET=" + name +
                                   ": expected an absolute path or an @abstract name");
  }
  const bool abstract = name[0] == '@';
  // A path needs room for its terminating NUL; an abstract name does not.
  const size_t limit = sizeof(a.addr.sun_path) - (abstract ? 0 : 1);
  if (name.size() > limit) {
    return Status::InvalidArgument("NOTIFY_SOCKET=" + name + ": longer than sockaddr_un allows (" +
                                   std::to_string(limit) + " bytes)");
  }
  std::memcpy(a.addr.sun_path, name.data(), name.size());
  if (abstract) a.addr.sun_path[0] = '\0';
  a.len =
      static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + name.size() + (abstract ? 0 : 1));
  return a;
}

std::string Errno(const char* what, int err) {
  return std::string(what) + ": " + std::strerror(err);
}

}  // namespace

ServiceNotifier::ServiceNotifier() : ServiceNotifier(EnvOrEmpty("NOTIFY_SOCKET")) {}

ServiceNotifier::ServiceNotifier(std::string socket_name) : socket_name_(std::move(socket_name)) {}

Status ServiceNotifier::Notify(std::string_view state) const {
  if (!enabled()) return Status::Ok();
  StatusOr<UnixAddress> addr = ParseNotifySocket(socket_name_);
  if (!addr.ok()) return addr.status();
  int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return Status::Unavailable(Errno("socket(AF_UNIX, SOCK_DGRAM)", errno));
  ssize_t n;
  do {
    n = sendto(fd, state.data(), state.size(), MSG_NOSIGNAL,
               reinterpret_cast<const sockaddr*>(&addr->addr), addr->len);
  } while (n < 0 && errno == EINTR);
  const int send_errno = errno;
  // A close() failure on a datagram socket loses nothing already sent; it is still reported.
  const bool closed = close(fd) == 0;
  const int close_errno = errno;
  if (n < 0) {
    return Status::Unavailable(
        Errno(("send to NOTIFY_SOCKET=" + socket_name_).c_str(), send_errno));
  }
  if (static_cast<size_t>(n) != state.size()) {
    return Status::Unavailable("send to NOTIFY_SOCKET=" + socket_name_ + ": sent " +
                               std::to_string(n) + " of " + std::to_string(state.size()) +
                               " bytes");
  }
  if (!closed) return Status::Unavailable(Errno("close(notify socket)", close_errno));
  return Status::Ok();
}

bool ServiceNotifier::NotifyOrLog(std::string_view state) const {
  Status st = Notify(state);
  if (st.ok()) return true;
  if (!failure_logged_.exchange(true)) {
    spdlog::warn("msg=\"cannot notify the service manager (logged once)\" state={} error={}",
                 LogQuote(state), LogQuote(st.message()));
  }
  return false;
}

std::chrono::microseconds WatchdogInterval() {
  const std::string usec = EnvOrEmpty("WATCHDOG_USEC");
  if (usec.empty()) return std::chrono::microseconds(0);
  const std::string pid = EnvOrEmpty("WATCHDOG_PID");
  if (!pid.empty()) {
    char* end = nullptr;
    errno = 0;
    long long p = std::strtoll(pid.c_str(), &end, 10);
    if (errno != 0 || *end != '\0' || p != static_cast<long long>(getpid())) {
      return std::chrono::microseconds(0);
    }
  }
  char* end = nullptr;
  errno = 0;
  unsigned long long v = std::strtoull(usec.c_str(), &end, 10);
  if (errno != 0 || *end != '\0' || v == 0 || usec[0] == '-') return std::chrono::microseconds(0);
  return std::chrono::microseconds(static_cast<int64_t>(v));
}

int WaitForTerminationWithWatchdog(const ServiceNotifier& notifier,
                                   std::chrono::microseconds watchdog,
                                   const std::function<bool()>& alive, const ServiceWork* work) {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  if (watchdog.count() <= 0 && work == nullptr) {
    int sig = 0;
    while (sigwait(&set, &sig) != 0) {
    }
    return sig;
  }
  // With work, the wait also watches the work's wake fd, so the signals come through a signalfd.
  // Without one (out of descriptors) a signal is seen at the next work or watchdog time.
  int sfd = -1;
  if (work != nullptr) {
    sfd = signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
    if (sfd < 0) {
      spdlog::warn("msg=\"signalfd failed; SIGTERM is seen at the next periodic wakeup\" error={}",
                   LogQuote(std::strerror(errno)));
    }
  }
  struct CloseFd {
    int fd;
    ~CloseFd() {
      if (fd >= 0) close(fd);
    }
  } close_sfd{sfd};
  using Clock = std::chrono::steady_clock;
  const auto step = std::chrono::duration_cast<Clock::duration>(watchdog) / 4;
  // The first ping goes out at once: READY=1 has just been sent.
  auto next = watchdog.count() > 0 ? Clock::now() : Clock::time_point::max();
  auto next_work = work != nullptr ? Clock::now() : Clock::time_point::max();
  bool was_alive = true;
  for (;;) {
    const auto now = Clock::now();
    if (now >= next) {
      const bool ok = alive();
      if (ok) notifier.NotifyOrLog("WATCHDOG=1");
      if (ok != was_alive) {
        // Logged on each change only, so a hang costs one line, not one per check.
        if (ok) {
          spdlog::info("msg=\"liveness check passes again; watchdog pings resumed\"");
        } else {
          spdlog::error("msg=\"liveness check failed; withholding watchdog pings\"");
        }
        was_alive = ok;
      }
      next += step;
      if (next <= Clock::now()) next = Clock::now() + step;  // alive() overran: don't burst
      continue;
    }
    if (now >= next_work) {
      next_work = work->run();
      continue;
    }
    const auto wait =
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::min(next, next_work) - now);
    if (work == nullptr) {
      timespec ts{};
      ts.tv_sec = static_cast<time_t>(wait.count() / 1'000'000'000);
      ts.tv_nsec = static_cast<long>(wait.count() % 1'000'000'000);
      int sig = sigtimedwait(&set, nullptr, &ts);
      if (sig > 0) return sig;
      // EAGAIN: the period elapsed; EINTR: another signal's handler ran. Both loop.
      continue;
    }
    pollfd fds[2] = {{sfd, POLLIN, 0}, {work->wake_fd, POLLIN, 0}};  // poll skips fd -1
    // Rounded up, so that the work is not called a moment early and the wait spun.
    const int64_t ms = std::min<int64_t>((wait.count() + 999'999) / 1'000'000, 3'600'000);
    if (poll(fds, 2, static_cast<int>(ms)) < 0 && errno != EINTR) {
      spdlog::error("msg=\"poll failed in the service loop\" error={}",
                    LogQuote(std::strerror(errno)));
      std::this_thread::sleep_for(std::chrono::milliseconds(ms));  // no spin on a broken poll
    }
    if (sfd >= 0 && (fds[0].revents & POLLIN) != 0) {
      signalfd_siginfo si{};
      if (read(sfd, &si, sizeof si) == static_cast<ssize_t>(sizeof si)) {
        return static_cast<int>(si.ssi_signo);
      }
    } else if (sfd < 0) {
      timespec zero{};
      int sig = sigtimedwait(&set, nullptr, &zero);
      if (sig > 0) return sig;
    }
    if ((fds[1].revents & POLLIN) != 0) {
      uint64_t wakes = 0;
      if (read(work->wake_fd, &wakes, sizeof wakes) < 0) {
        // EAGAIN: another read took it first; the work runs now either way.
      }
      next_work = Clock::now();
    }
  }
}

int RunAsNotifyService(std::string_view status, const std::function<bool(int timeout_ms)>& alive,
                       const ServiceWork* work) {
  // Both read the environment before anything is sent, so what they see is what we started with.
  ServiceNotifier notifier;
  const std::chrono::microseconds watchdog = WatchdogInterval();
  notifier.NotifyOrLog("READY=1\nSTATUS=" + std::string(status));
  const int check_ms = static_cast<int>(std::clamp<int64_t>(watchdog.count() / 8000, 100, 5000));
  const int sig = WaitForTerminationWithWatchdog(
      notifier, watchdog, [&] { return alive(check_ms); }, work);
  notifier.NotifyOrLog("STOPPING=1\nSTATUS=shutting down");
  return sig;
}

std::string SelfDialAddress(const std::string& listen, int bound_port) {
  const size_t colon = listen.rfind(':');
  return (colon == std::string::npos ? std::string() : listen.substr(0, colon)) + ":" +
         std::to_string(bound_port);
}

}  // namespace fw
