// The agent's side of the Gloo module seam (gloo_module.h): dlopen, dlsym, and the checks.
#include "probes/collective/gloo_module.h"

#include <dlfcn.h>
#include <spdlog/spdlog.h>

#include "common/mutex.h"
#include "common/private_lib.h"

namespace fw::collective {
namespace {

struct Loaded {
  Mutex mu;
  GlooConnectFn connect FW_GUARDED_BY(mu) = nullptr;
  std::string path FW_GUARDED_BY(mu);
};

Loaded& State() {
  static Loaded* loaded = new Loaded;  // never destroyed: jobs may run during exit
  return *loaded;
}

}  // namespace

StatusOr<LoadedGlooModule> LoadGlooModule(const std::vector<std::string>& dirs) {
  std::string tried;
  for (const std::string& dir : dirs) {
    const std::string path = dir + "/" + kGlooModuleFile;
    // RTLD_LOCAL: libgloo's symbols stay out of the agent's global scope.
    void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) {
      const char* err = dlerror();
      tried += " " + path + " (" + (err ? err : "dlopen failed") + ")";
      continue;
    }
    using EntryFn = const GlooModuleV1* (*)();
    auto entry = reinterpret_cast<EntryFn>(dlsym(handle, kGlooModuleEntry));
    const GlooModuleV1* module = entry != nullptr ? entry() : nullptr;
    if (module == nullptr || module->connect == nullptr) {
      tried += " " + path + " (no " + kGlooModuleEntry + ")";
    } else if (module->abi != kGlooModuleAbi || module->layout != GlooModuleLayout()) {
      tried += " " + path + " (from another build: abi " + std::to_string(module->abi) +
               ", this agent's " + std::to_string(kGlooModuleAbi) + ")";
    } else {
      SPDLOG_INFO("component=collective backend=gloo msg=\"module loaded\" path={}", path);
      return LoadedGlooModule{module->connect, path};
    }
  }
#ifndef FW_HAVE_GLOO_MODULE
  tried += " (this build has no Gloo module: libgloo-dev was missing)";
#endif
  return Status::Unavailable("gloo: cannot load " + std::string(kGlooModuleFile) + "; tried:" +
                             tried);
}

StatusOr<std::unique_ptr<Communicator>> ConnectGlooModule(const GroupSpec& group, KvStore& kv,
                                                          const GlooOptions& options) {
  GlooConnectFn connect = nullptr;
  {
    Loaded& s = State();
    MutexLock lock(s.mu);
    if (s.connect == nullptr) {
      auto loaded = LoadGlooModule(PrivateLibraryDirs(kGlooModuleDirEnv, FW_GLOO_MODULE_BUILD_DIR));
      if (!loaded.ok()) {
        SPDLOG_WARN("component=collective backend=gloo msg=\"no module\" error=\"{}\"",
                    loaded.status().message());
        return loaded.status();
      }
      s.connect = loaded->connect;
      s.path = loaded->path;
    }
    connect = s.connect;
  }
  return connect(group, kv, options);
}

std::string GlooModulePath() {
  Loaded& s = State();
  MutexLock lock(s.mu);
  return s.path;
}

}  // namespace fw::collective
