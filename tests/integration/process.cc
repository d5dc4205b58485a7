// Child-process helpers for integration tests.
#include "tests/integration/process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

namespace fw::testing {

Process::Process(std::vector<std::string> argv, const std::string& log_path) {
  std::vector<char*> args;
  for (auto& a : argv) args.push_back(a.data());
  args.push_back(nullptr);
  pid_ = fork();
  if (pid_ < 0) {
    std::perror("fork");
    std::abort();
  }
  if (pid_ == 0) {
    // The child dies with the test runner instead of outliving it.
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    int fd = open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd >= 0) {
      dup2(fd, 1);
      dup2(fd, 2);
      close(fd);
    }
    // Die with the test runner rather than leak.
    execv(args[0], args.data());
    _exit(127);
  }
}

Process::~Process() {
  if (pid_ > 0 && status_ == -1) {
    kill(pid_, SIGKILL);
    waitpid(pid_, &status_, 0);
  }
}

void Process::Signal(int sig) {
  if (pid_ > 0 && status_ == -1) kill(pid_, sig);
}

int Process::Wait(std::chrono::milliseconds timeout) {
  if (status_ != -1) return status_;
  if (pid_ <= 0) return -1;
  // Polls at least once, so a zero timeout (running()) still reaps a child that has exited.
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    int st = 0;
    const pid_t r = waitpid(pid_, &st, WNOHANG);
    if (r == pid_) {
      status_ = st;
      return st;
    }
    if (r < 0 && errno != EINTR) {
      std::fprintf(stderr, "waitpid(%d): %s\n", static_cast<int>(pid_), std::strerror(errno));
      return -1;
    }
    if (std::chrono::steady_clock::now() >= deadline) return -1;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

int Process::Stop(std::chrono::milliseconds grace) {
  Signal(SIGTERM);
  int st = Wait(grace);
  if (st == -1) {
    Signal(SIGKILL);
    st = Wait(std::chrono::seconds(5));
  }
  return st;
}

bool Process::running() { return Wait(std::chrono::milliseconds(0)) == -1; }

bool WaitUntil(const std::function<bool()>& cond, std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (cond()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return cond();
}

int ReadPort(const std::string& path, const std::string& key) {
  std::ifstream in(path);
  if (!in) return -1;
  std::stringstream ss;
  ss << in.rdbuf();
  auto j = nlohmann::json::parse(ss.str(), nullptr, false);
  if (j.is_discarded() || !j.contains(key)) return -1;
  return j[key].get<int>();
}

TempDir::TempDir() {
  std::string tmpl = (std::filesystem::temp_directory_path() / "fwtest.XXXXXX").string();
  char* p = mkdtemp(tmpl.data());
  if (p == nullptr) {
    // Never fall back to a shared directory: the destructor removes path_ recursively.
    std::perror("mkdtemp");
    std::abort();
  }
  path_ = p;
}

TempDir::~TempDir() {
  std::error_code ec;
  if (!path_.empty() && std::getenv("FW_KEEP_TEMP") == nullptr) {
    std::filesystem::remove_all(path_, ec);
  }
}

}  // namespace fw::testing
