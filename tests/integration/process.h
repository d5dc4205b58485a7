// Child processes for integration tests: spawn, signal and reap by PID, never by name.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <string>
#include <vector>

namespace fw::testing {

class Process {
 public:
  // Starts `argv[0]` with the given arguments; stdout and stderr go to `log_path` (appended).
  Process(std::vector<std::string> argv, const std::string& log_path);
  ~Process();  // SIGKILLs and reaps the child if it still runs
  Process(const Process&) = delete;
  Process& operator=(const Process&) = delete;

  pid_t pid() const { return pid_; }
  void Signal(int sig);
  // Waits up to `timeout` for the child to exit; returns its exit status or -1 on timeout.
  int Wait(std::chrono::milliseconds timeout);
  // SIGTERM, wait up to `grace`, then SIGKILL.
  int Stop(std::chrono::milliseconds grace = std::chrono::seconds(10));
  // Whether the child has not exited yet; reaps it (and keeps its status) when it has.
  bool running();
  // The child's wait status once reaped (see Wait), -1 while it runs.
  int status() const { return status_; }

 private:
  pid_t pid_ = -1;
  int status_ = -1;
};

// Polls `cond` every 100 ms until it holds or `timeout` passes.
bool WaitUntil(const std::function<bool()>& cond, std::chrono::milliseconds timeout);

// Reads a port file written by --port-file; -1 when absent or unreadable.
int ReadPort(const std::string& path, const std::string& key);

// A fresh temporary directory, removed by the destructor.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace fw::testing
