// Daemon start-up plumbing.
#include "common/daemon_util.h"

#include <pthread.h>

#include <CLI/CLI.hpp>

#include <cstdio>
#include <stdexcept>

namespace fw {

bool LoadConfigFromArgs(const ConfigBinding& binding, int argc, char** argv,
                        const char* program) {
  std::string path = FindConfigFlag(argc, argv);
  if (path.empty()) return true;
  Status st = binding.LoadFile(path);
  if (st.ok()) return true;
  std::fprintf(stderr, "%s: %s\n", program, st.message().c_str());
  return false;
}

std::function<void(const std::string&)> DurationSetter(Seconds* out) {
  return [out](const std::string& v) {
    auto d = ParseDurationSeconds(v);
    if (!d.ok()) throw CLI::ValidationError(d.status().message());
    out->value = *d;
  };
}

namespace {
sigset_t TerminationSet() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  return set;
}
}  // namespace

void BlockTerminationSignals() {
  sigset_t set = TerminationSet();
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  std::signal(SIGPIPE, SIG_IGN);
}

int WaitForTerminationSignal() {
  sigset_t set = TerminationSet();
  int sig = 0;
  sigwait(&set, &sig);
  return sig;
}

bool WritePortFile(const std::string& path, const std::string& json) {
  std::string tmp = path + ".tmp";
  FILE* f = std::fopen(tmp.c_str(), "w");
  if (f == nullptr) return false;
  bool ok = std::fputs(json.c_str(), f) >= 0;
  ok = (std::fclose(f) == 0) && ok;
  return ok && std::rename(tmp.c_str(), path.c_str()) == 0;
}

}  // namespace fw
