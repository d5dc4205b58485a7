// The Gloo backend as a module: libfabricwatch-gloo.so holds gloo_backend.cc and links libgloo (and
// through it hiredis, ibverbs and libnl), and the agent dlopen()s it when its first Gloo job
// arrives. An agent that never runs a Gloo collective maps none of those libraries.
//
// The module and the agent are built from one tree and pass C++ objects (GroupSpec, KvStore,
// GlooOptions, Status, the Communicator) across the seam, so both must come from the same build:
// the entry point carries kGlooModuleAbi and a layout fingerprint, and a module that does not
// match is refused. The module is never unloaded (the Communicators it made point into it).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "probes/collective/gloo_backend.h"

namespace fw::collective {

inline constexpr char kGlooModuleFile[] = "libfabricwatch-gloo.so";
// Overrides the folder the module is loaded from (common/private_lib.h has the default order).
inline constexpr char kGlooModuleDirEnv[] = "FW_GLOO_MODULE_DIR";
// Bumped whenever a type that crosses the seam changes meaning without changing size.
inline constexpr uint32_t kGlooModuleAbi = 1;

// Sizes of what crosses the seam, so that a module from another build is caught when they differ.
inline constexpr uint64_t GlooModuleLayout() {
  return (sizeof(GroupSpec) << 48) ^ (sizeof(GlooOptions) << 32) ^ (sizeof(Status) << 16) ^
         (sizeof(StatusOr<std::unique_ptr<Communicator>>) << 8) ^ sizeof(KvStore);
}

using GlooConnectFn = StatusOr<std::unique_ptr<Communicator>> (*)(const GroupSpec& group,
                                                                   KvStore& kv,
                                                                   const GlooOptions& options);

// What the module's one exported symbol, kGlooModuleEntry, returns.
struct GlooModuleV1 {
  uint32_t abi = 0;
  uint64_t layout = 0;
  GlooConnectFn connect = nullptr;
};
inline constexpr char kGlooModuleEntry[] = "fw_gloo_module_v1";

struct LoadedGlooModule {
  GlooConnectFn connect = nullptr;
  std::string path;  // the file it was loaded from
};

// Loads kGlooModuleFile from the first of `dirs` that has a loadable, matching one. Unavailable naming every folder tried and why when none does. A module that loaded
// but does not match stays mapped (dlclose of a C++ library is not worth its risks).
StatusOr<LoadedGlooModule> LoadGlooModule(const std::vector<std::string>& dirs);

// ConnectGloo (gloo_backend.h) through the module, loaded on the first call from
// PrivateLibraryDirs(kGlooModuleDirEnv, <this build's module folder>). A failed load is tried again
// on the next call. Thread-safe.
StatusOr<std::unique_ptr<Communicator>> ConnectGlooModule(const GroupSpec& group, KvStore& kv,
                                                          const GlooOptions& options);

// The file the module was loaded from; empty before the first successful load.
std::string GlooModulePath();

}  // namespace fw::collective
