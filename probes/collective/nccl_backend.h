// The NCCL backend of the collective probe: one rank per local GPU in a grouped, non-blocking
// init; the ncclUniqueId travels through the KvStore seam; each operation is timed with CUDA events
// on a dedicated low-priority stream. Every failure is a status, never a crash: a library that is
// absent, a driver that is missing, run-time errors (counted, communicators torn down) and hung
// collectives (aborted with ncclCommAbort after the operation's timeout).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "probes/collective/collective.h"
#include "probes/collective/kv_store.h"
#include "probes/collective/nccl_api.h"

namespace fw::collective {

// What this node can do with NCCL, for the inventory and /metrics.
enum class NcclState {
  kUnavailable,  // libnccl.so.2 or the CUDA runtime is absent, or lacks an entry point
  kNoDriver,     // libraries present, no usable driver (CUDA error 35, insufficient driver)
  kNoDevice,     // a driver, but no GPU (CUDA error 100) or zero devices
  kError,        // another CUDA error while counting devices
  kReady,
};

std::string_view NcclStateName(NcclState state);  // unavailable, no_driver, no_device, error, ready

struct NcclAvailability {
  NcclState state = NcclState::kUnavailable;
  int nccl_version = 0;  // ncclGetVersion(), e.g. 22809
  int devices = 0;
  int cuda_error = 0;  // the cudaGetDeviceCount error, when there was one
  std::string detail;
  // "nccl: unavailable (...)", "nccl: no driver (CUDA error 35: ...)", "nccl: ready (NCCL 2.28.9,
  // 8 GPUs)".
  std::string ToString() const;
};

// Asks the library for its version and the runtime for its device count. Touches no GPU memory.
NcclAvailability CheckNccl(const NcclApi& api);

// Loads the libraries (NcclLibrary::Load) and checks them; `library` receives the handle when the
// load succeeded (even when no driver is present), so the caller can keep it.
NcclAvailability LoadAndCheckNccl(const NcclLibraryOptions& options,
                                  std::unique_ptr<NcclLibrary>* library = nullptr);

// Failure counts, owned by the caller (the agent exports them). Thread-safe.
struct NcclCounters {
  std::atomic<uint64_t> operations{0};  // collectives completed
  std::atomic<uint64_t> cuda_errors{0};
  std::atomic<uint64_t> nccl_errors{0};
  std::atomic<uint64_t> timeouts{0};  // collectives or inits aborted after their timeout
  std::atomic<uint64_t> aborts{0};    // communicators torn down with ncclCommAbort
};

struct NcclOptions {
  // Local CUDA devices, one rank each: global ranks group.rank .. group.rank + devices.size() - 1.
  std::vector<int> devices;
  std::chrono::milliseconds rendezvous_timeout{30000};  // id exchange and communicator init
  std::chrono::microseconds poll_interval{50};          // how often a wait looks at the GPU
};

// Rendezvous (the member holding rank 0 publishes the ncclUniqueId under the group's prefix; the
// others read it) and a grouped non-blocking init of one communicator per local device. `api`
// and `counters` must outlive the communicator.
StatusOr<std::unique_ptr<Communicator>> ConnectNccl(const NcclApi& api, const GroupSpec& group,
                                                    KvStore& kv, const NcclOptions& options,
                                                    NcclCounters& counters);

}  // namespace fw::collective
