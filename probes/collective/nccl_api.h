// The NCCL and CUDA runtime seam: the few entry points the NCCL probe calls, as function pointers
// filled by dlopen/dlsym (NcclLibrary) or by a test's fake. The agent has no link-time CUDA
// dependency and runs unchanged on nodes without GPUs.
//
// The types below restate the public ABI of nccl.h (NCCL >= 2.14) and cuda_runtime_api.h; only
// what the probe uses is declared, so the build needs neither header.
#pragma once

#include <climits>
#include <cstddef>
#include <memory>
#include <string>

#include "common/status.h"

namespace fw::collective::nccl_abi {

using ncclComm_t = struct ncclComm*;
using ncclResult_t = int;
inline constexpr ncclResult_t kNcclSuccess = 0;
inline constexpr ncclResult_t kNcclInProgress = 7;  // non-blocking communicators
using ncclDataType_t = int;
inline constexpr ncclDataType_t kNcclInt32 = 2;
using ncclRedOp_t = int;
inline constexpr ncclRedOp_t kNcclSum = 0;
struct ncclUniqueId {
  char internal[128];
};

// The ncclConfig_t layout of NCCL 2.14 (version 21400). NCCL reads a config by its size and
// version field, so this prefix stays valid with newer libraries; unset fields keep NCCL's
// defaults.
struct ncclConfigV21400 {
  size_t size = sizeof(ncclConfigV21400);
  unsigned int magic = 0xcafebeef;
  unsigned int version = 21400;
  int blocking = INT_MIN;
  int cgaClusterSize = INT_MIN;
  int minCTAs = INT_MIN;
  int maxCTAs = INT_MIN;
  const char* netName = nullptr;
};

using cudaError_t = int;
inline constexpr cudaError_t kCudaSuccess = 0;
inline constexpr cudaError_t kCudaErrorInsufficientDriver = 35;
inline constexpr cudaError_t kCudaErrorNoDevice = 100;
inline constexpr cudaError_t kCudaErrorNotReady = 600;
using cudaStream_t = struct CUstream_st*;
using cudaEvent_t = struct CUevent_st*;
inline constexpr unsigned int kCudaStreamNonBlocking = 0x01;
inline constexpr int kCudaMemcpyDeviceToHost = 2;

}  // namespace fw::collective::nccl_abi

namespace fw::collective {

// Every entry point the probe uses. A real NcclLibrary fills all of them; a fake may leave none
// null either (the backend calls them without checking).
struct NcclApi {
  using R = nccl_abi::ncclResult_t;
  using C = nccl_abi::cudaError_t;
  // NCCL
  R (*GetVersion)(int* version) = nullptr;
  R (*GetUniqueId)(nccl_abi::ncclUniqueId* id) = nullptr;
  using CommInitRankConfigFn = R (*)(nccl_abi::ncclComm_t*, int nranks, nccl_abi::ncclUniqueId,
                                     int rank, nccl_abi::ncclConfigV21400*);
  CommInitRankConfigFn CommInitRankConfig = nullptr;
  R (*CommGetAsyncError)(nccl_abi::ncclComm_t comm, R* async_error) = nullptr;
  R (*CommFinalize)(nccl_abi::ncclComm_t comm) = nullptr;
  R (*CommDestroy)(nccl_abi::ncclComm_t comm) = nullptr;
  R (*CommAbort)(nccl_abi::ncclComm_t comm) = nullptr;
  R (*GroupStart)() = nullptr;
  R (*GroupEnd)() = nullptr;
  using AllReduceFn = R (*)(const void* send, void* recv, size_t count, nccl_abi::ncclDataType_t,
                            nccl_abi::ncclRedOp_t, nccl_abi::ncclComm_t, nccl_abi::cudaStream_t);
  AllReduceFn AllReduce = nullptr;
  using AllGatherFn = R (*)(const void* send, void* recv, size_t send_count,
                            nccl_abi::ncclDataType_t, nccl_abi::ncclComm_t, nccl_abi::cudaStream_t);
  AllGatherFn AllGather = nullptr;
  const char* (*GetErrorString)(R result) = nullptr;
  // CUDA runtime
  C (*GetDeviceCount)(int* count) = nullptr;
  C (*SetDevice)(int device) = nullptr;
  C (*DeviceGetStreamPriorityRange)(int* least, int* greatest) = nullptr;
  using StreamCreateWithPriorityFn = C (*)(nccl_abi::cudaStream_t*, unsigned int flags,
                                           int priority);
  StreamCreateWithPriorityFn StreamCreateWithPriority = nullptr;
  C (*StreamDestroy)(nccl_abi::cudaStream_t stream) = nullptr;
  C (*Malloc)(void** ptr, size_t bytes) = nullptr;
  C (*Free)(void* ptr) = nullptr;
  C (*Memset)(void* ptr, int value, size_t bytes) = nullptr;
  C (*Memcpy)(void* dst, const void* src, size_t bytes, int kind) = nullptr;
  C (*EventCreate)(nccl_abi::cudaEvent_t* event) = nullptr;
  C (*EventRecord)(nccl_abi::cudaEvent_t event, nccl_abi::cudaStream_t stream) = nullptr;
  C (*EventQuery)(nccl_abi::cudaEvent_t event) = nullptr;
  using EventElapsedTimeFn = C (*)(float* ms, nccl_abi::cudaEvent_t start,
                                   nccl_abi::cudaEvent_t end);
  EventElapsedTimeFn EventElapsedTime = nullptr;
  C (*EventDestroy)(nccl_abi::cudaEvent_t event) = nullptr;
  const char* (*CudaGetErrorString)(C error) = nullptr;
};

struct NcclLibraryOptions {
  // dlopen names or paths, tried in order; the first that opens wins.
  std::string nccl_library = "libnccl.so.2";
  std::string cudart_libraries = "libcudart.so.13,libcudart.so.12,libcudart.so.11.0,libcudart.so";
};

// The dlopen'd libraries. They stay mapped for the life of the process: NCCL and the CUDA runtime
// register process-exit handlers and threads that must not outlive their code.
class NcclLibrary {
 public:
  NcclLibrary() = default;  // empty; use Load()
  // NotFound naming the library and dlerror() when a library is absent; FailedPrecondition naming
  // the symbol when one lacks an entry point. Logs what it opened or why not.
  static StatusOr<std::unique_ptr<NcclLibrary>> Load(const NcclLibraryOptions& options = {});
  const NcclApi& api() const { return api_; }
  const std::string& nccl_path() const { return nccl_path_; }
  const std::string& cudart_path() const { return cudart_path_; }

 private:
  NcclApi api_;
  std::string nccl_path_;
  std::string cudart_path_;
};

}  // namespace fw::collective
