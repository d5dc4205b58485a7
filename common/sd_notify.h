// The systemd service-manager notification protocol (sd_notify(3)), without libsystemd.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <string>
#include <string_view>

#include "common/status.h"

namespace fw {

// Sends state lines ("READY=1", "STOPPING=1", "WATCHDOG=1", "STATUS=...") as one datagram to the
// AF_UNIX socket named by $NOTIFY_SOCKET: a filesystem path ("/run/systemd/notify") or an abstract
// name ("@name"). When the variable is unset or empty, every call is a no-op that succeeds, so the
// daemons behave the same outside systemd (a terminal, a container, a test).
//
// Thread-safe: Notify() opens a fresh socket per call; the only state is the atomic once-only flag
// for logging failures.
class ServiceNotifier {
 public:
  // Reads $NOTIFY_SOCKET now; later changes to the environment are not seen.
  ServiceNotifier();
  // `socket_name` as $NOTIFY_SOCKET would hold it; "" disables notification.
  explicit ServiceNotifier(std::string socket_name);

  bool enabled() const { return !socket_name_.empty(); }

  // Sends `state` (newline-separated "KEY=VALUE" lines). Fails with kInvalidArgument when the
  // socket name is neither a path nor "@name" or too long for sockaddr_un, and kUnavailable when
  // the datagram cannot be sent in full (no listener, permission, buffer full).
  Status Notify(std::string_view state) const;

  // Notify(), and on failure a warning that is logged once per notifier (a failing watchdog ping
  // repeats every few seconds; one line says it all). Returns whether the message was sent (or
  // notification is disabled).
  bool NotifyOrLog(std::string_view state) const;

 private:
  std::string socket_name_;
  mutable std::atomic<bool> failure_logged_{false};
};

// The watchdog period the service manager asked for: $WATCHDOG_USEC, when set, positive, and
// $WATCHDOG_PID is unset or names this process (sd_watchdog_enabled(3)). Zero when none.
std::chrono::microseconds WatchdogInterval();

// Periodic work that the waiting thread does between its waits (the agent's report loop, so that
// the daemon's main thread is not one more thread that only waits): `run()` does what is due and
// returns when it is next due; `wake_fd` (an eventfd, or -1) becomes readable when `run()` is
// wanted before then, and is read (reset) before `run()` is called.
struct ServiceWork {
  std::function<std::chrono::steady_clock::time_point()> run;
  int wake_fd = -1;
};

// Waits on the calling thread for SIGINT or SIGTERM (which the caller has blocked, see
// BlockTerminationSignals()) and returns the signal. When `watchdog` is positive it wakes every
// quarter period, calls `alive()`, and sends "WATCHDOG=1" only when `alive()` returns true: one or
// two failed checks in a row are tolerated, and a daemon whose serving path stays hung gets no ping
// for a whole period, so the service manager kills and restarts it (WatchdogSec=, Restart=).
// `alive()` runs on the calling thread and should finish well within a quarter period. With
// `work`, it also runs `work->run()` when due or woken (a signal then comes through a signalfd).
int WaitForTerminationWithWatchdog(const ServiceNotifier& notifier,
                                   std::chrono::microseconds watchdog,
                                   const std::function<bool()>& alive,
                                   const ServiceWork* work = nullptr);

// The daemon's life as a Type=notify service, after it has started serving: sends READY=1 with
// "STATUS=<status>", waits for SIGINT/SIGTERM while feeding the watchdog that $WATCHDOG_USEC asks
// for (see WaitForTerminationWithWatchdog), then sends STOPPING=1 and returns the signal.
// `alive(timeout_ms)` must answer within `timeout_ms`: an eighth of the watchdog period, clamped
// to 100..5000 ms. Outside systemd it only waits for the signal.
// With `work`, the waits also run it (see WaitForTerminationWithWatchdog).
int RunAsNotifyService(std::string_view status, const std::function<bool(int timeout_ms)>& alive,
                       const ServiceWork* work = nullptr);

// The address a process dials to reach its own listener: `listen`'s host ("0.0.0.0", "" and
// hostnames stay as they are; the HTTP client maps a wildcard to loopback) with the bound port.
std::string SelfDialAddress(const std::string& listen, int bound_port);

}  // namespace fw
