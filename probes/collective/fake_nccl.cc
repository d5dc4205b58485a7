// The fake NCCL/CUDA runtime for tests (see fake_nccl.h).
#include "probes/collective/fake_nccl.h"

#include <cstring>

namespace fw::collective::testing {
namespace {

FakeNcclState g;
uintptr_t g_next_handle = 1;

template <typename T>
T NewHandle() {
  return reinterpret_cast<T>(g_next_handle++);
}

}  // namespace

FakeNcclState& ResetFakeNccl() {
  g = FakeNcclState{};
  return g;
}

NcclApi FakeNcclApi() {
  using namespace nccl_abi;
  NcclApi a;
  a.GetVersion = [](int* v) -> int {
    *v = g.version;
    return kNcclSuccess;
  };
  a.GetUniqueId = [](ncclUniqueId* id) -> int {
    std::memset(id->internal, 0x5a, sizeof(id->internal));
    return kNcclSuccess;
  };
  a.CommInitRankConfig = [](ncclComm_t* comm, int, ncclUniqueId, int,
                            ncclConfigV21400* cfg) -> int {
    if (cfg->magic != 0xcafebeef || cfg->blocking != 0) return 4;  // ncclInvalidArgument
    *comm = NewHandle<ncclComm_t>();
    ++g.comms_created;
    return kNcclInProgress;
  };
  a.CommGetAsyncError = [](ncclComm_t, int* e) -> int {
    *e = g.init_hangs ? kNcclInProgress : (g.enqueued ? g.async_error : kNcclSuccess);
    return kNcclSuccess;
  };
  a.CommFinalize = [](ncclComm_t) -> int {
    ++g.comms_finalized;
    return kNcclInProgress;
  };
  a.CommDestroy = [](ncclComm_t) -> int {
    ++g.comms_destroyed;
    return kNcclSuccess;
  };
  a.CommAbort = [](ncclComm_t) -> int {
    ++g.comms_aborted;
    return kNcclSuccess;
  };
  a.GroupStart = []() -> int { return kNcclSuccess; };
  a.GroupEnd = []() -> int {
    // Every rank of the group is local in these tests: compute the collective now.
    for (const auto& p : g.pending) {
      auto* out = static_cast<int32_t*>(p.recv);
      if (p.all_reduce) {
        for (size_t j = 0; j < p.count; ++j) {
          int32_t sum = 0;
          for (const auto& q : g.pending) sum += static_cast<const int32_t*>(q.send)[j];
          out[j] = sum;
        }
      } else {
        for (size_t r = 0; r < g.pending.size(); ++r) {
          std::memcpy(out + r * p.count, g.pending[r].send, p.count * 4);
        }
      }
    }
    g.pending.clear();
    return kNcclSuccess;
  };
  a.AllReduce = [](const void* s, void* r, size_t n, int, int, ncclComm_t, cudaStream_t) -> int {
    if (g.collective_result != kNcclSuccess) return g.collective_result;
    g.pending.push_back({true, s, r, n});
    g.enqueued = true;
    ++g.collectives;
    return kNcclSuccess;
  };
  a.AllGather = [](const void* s, void* r, size_t n, int, ncclComm_t, cudaStream_t) -> int {
    if (g.collective_result != kNcclSuccess) return g.collective_result;
    g.pending.push_back({false, s, r, n});
    g.enqueued = true;
    ++g.collectives;
    return kNcclSuccess;
  };
  a.GetErrorString = [](int) -> const char* { return "fake nccl error"; };
  a.GetDeviceCount = [](int* n) -> int {
    *n = g.device_count_error == 0 ? g.devices : 0;
    return g.device_count_error;
  };
  a.SetDevice = [](int) -> int { return kCudaSuccess; };
  a.DeviceGetStreamPriorityRange = [](int* least, int* greatest) -> int {
    *least = 0;
    *greatest = -5;
    return kCudaSuccess;
  };
  a.StreamCreateWithPriority = [](cudaStream_t* s, unsigned int, int prio) -> int {
    *s = NewHandle<cudaStream_t>();
    g.last_stream_priority = prio;
    ++g.streams;
    return kCudaSuccess;
  };
  a.StreamDestroy = [](cudaStream_t) -> int {
    ++g.streams_destroyed;
    return kCudaSuccess;
  };
  a.Malloc = [](void** p, size_t n) -> int {
    if (g.malloc_error) return g.malloc_error;
    std::vector<uint8_t> mem(n + 1);
    *p = mem.data();
    g.memory.emplace(*p, std::move(mem));
    ++g.mallocs;
    return kCudaSuccess;
  };
  a.Free = [](void* p) -> int {
    g.memory.erase(p);
    ++g.frees;
    return kCudaSuccess;
  };
  a.Memset = [](void* p, int v, size_t n) -> int {
    std::memset(p, v, n);
    return kCudaSuccess;
  };
  a.Memcpy = [](void* d, const void* s, size_t n, int) -> int {
    std::memcpy(d, s, n);
    return kCudaSuccess;
  };
  a.EventCreate = [](cudaEvent_t* e) -> int {
    *e = NewHandle<cudaEvent_t>();
    ++g.events;
    return kCudaSuccess;
  };
  a.EventRecord = [](cudaEvent_t e, cudaStream_t) -> int {
    // A start is recorded before the collective, a stop after it: op_ms apart.
    g.event_ms[reinterpret_cast<uintptr_t>(e)] = g.enqueued ? g.now_ms + g.op_ms : g.now_ms;
    return kCudaSuccess;
  };
  a.EventQuery = [](cudaEvent_t) -> int {
    return g.collective_hangs ? kCudaErrorNotReady : kCudaSuccess;
  };
  a.EventElapsedTime = [](float* ms, cudaEvent_t s, cudaEvent_t e) -> int {
    *ms = static_cast<float>(g.event_ms[reinterpret_cast<uintptr_t>(e)] -
                             g.event_ms[reinterpret_cast<uintptr_t>(s)]);
    g.enqueued = false;
    g.now_ms += 10;
    return kCudaSuccess;
  };
  a.EventDestroy = [](cudaEvent_t) -> int {
    ++g.events_destroyed;
    return kCudaSuccess;
  };
  a.CudaGetErrorString = [](int e) -> const char* {
    return e == kCudaErrorInsufficientDriver ? "CUDA driver version is insufficient for CUDA "
                                               "runtime version"
                                             : "fake cuda error";
  };
  return a;
}

}  // namespace fw::collective::testing
