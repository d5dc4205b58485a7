// The fake NCCL/CUDA runtime for tests (see fake_nccl.h).
#include "probes/collective/fake_nccl.h"

#include <cstring>
#include <mutex>

namespace fw::collective::testing {
namespace {

FakeNcclState g;
uintptr_t g_next_handle = 1;
std::recursive_mutex g_mu;  // every fake call holds it

uintptr_t H(const void* p) { return reinterpret_cast<uintptr_t>(p); }

// Records one rank's part of its group's next collective; computes it when the group is complete.
int Enqueue(FakeNcclState::Part part, nccl_abi::ncclComm_t comm, nccl_abi::cudaStream_t stream) {
  if (g.collective_result != nccl_abi::kNcclSuccess) return g.collective_result;
  auto c = g.comms.find(H(comm));
  if (c == g.comms.end()) return 4;  // ncclInvalidArgument
  const auto key = std::make_pair(c->second.id, c->second.seq++);
  FakeNcclState::Op& op = g.ops[key];
  op.parts[c->second.rank] = part;
  g.stream_op[H(stream)] = key;
  g.stream_enqueued[H(stream)] = true;
  g.enqueued = true;
  ++g.collectives;
  if (static_cast<int>(op.parts.size()) < c->second.nranks) return nccl_abi::kNcclSuccess;
  for (const auto& [rank, p] : op.parts) {
    auto* out = static_cast<int32_t*>(p.recv);
    if (p.all_reduce) {
      for (size_t j = 0; j < p.count; ++j) {
        int32_t sum = 0;
        for (const auto& [r, q] : op.parts) sum += static_cast<const int32_t*>(q.send)[j];
        out[j] = sum;
      }
    } else {
      for (const auto& [r, q] : op.parts) {
        std::memcpy(out + static_cast<size_t>(r) * p.count, q.send, p.count * 4);
      }
    }
  }
  op.done = true;
  return nccl_abi::kNcclSuccess;
}

template <typename T>
T NewHandle() {
  return reinterpret_cast<T>(g_next_handle++);
}

}  // namespace

FakeNcclState& ResetFakeNccl() {
  std::lock_guard<std::recursive_mutex> lock(g_mu);
  g = FakeNcclState{};
  return g;
}

NcclApi FakeNcclApi() {
  using namespace nccl_abi;
  NcclApi a;
  a.GetVersion = [](int* v) -> int {
    std::lock_guard<std::recursive_mutex> lock(g_mu);
    *v = g.version;
    return kNcclSuccess;
  };
  a.GetUniqueId = [](ncclUniqueId* id) -> int {
    std::lock_guard<std::recursive_mutex> lock(g_mu);
    std::memset(id->internal, 0x5a, sizeof(id->internal));
    const int n = ++g.unique_ids;
    std::memcpy(id->internal, &n, sizeof(n));
    return kNcclSuccess;
  };
  a.CommInitRankConfig = [](ncclComm_t* comm, int nranks, ncclUniqueId id, int rank,
                            ncclConfigV21400* cfg) -> int {
    std::lock_guard<std::recursive_mutex> lock(g_mu);
    if (cfg->magic != 0xcafebeef || cfg->blocking != 0) return 4;  // ncclInvalidArgument
    if (rank < 0 || rank >= nranks) return 4;
    *comm = NewHandle<ncclComm_t>();
    g.comms[H(*comm)] = {std::string(id.internal, sizeof(id.internal)), nranks, rank, 0};
    ++g.comms_created;
    return kNcclInProgress;
  };
  a.CommGetAsyncError = [](ncclComm_t, int* e) -> int {
    std::lock_guard<std::recursive_mutex> lock(g_mu);
    *e = g.init_hangs ? kNcclInProgress : (g.enqueued ? g.async_error : kNcclSuccess);
    return kNcclSuccess;
  };
  a.CommFinalize = [](ncclComm_t) -> int {
    std::lock_guard<std::recursive_mutex> lock(g_mu);
    ++g.comms_finalized;
    return kNcclInProgress;
  };
  a.CommDestroy = [](ncclComm_t) -> int {
    std::lock_guard<std::recursive_mutex> lock(g_mu);
    ++g.comms_destroyed;
    return kNcclSuccess;
  };
  a.CommAbort = [](ncclComm_t) -> int {
    std::lock_guard<std::recursive_mutex> lock(g_mu);
    ++g.comms_aborted;
    return kNcclSuccess;
  };
  a.GroupStart = []() -> int { return kNcclSuccess; };
  a.GroupEnd = []() -> int { return kNcclSuccess; };  // collectives complete in Enqueue
  a.AllReduce = [](const void* s, void* r, size_t n, int, int, ncclComm_t c,
                   cudaStream_t st) -> int {
    std::lock_guard<std::recursive_mutex> lock(g_mu);
    return Enqueue({true, s, r, n}, c, st);
  };
  a.AllGather = [](const void* s, void* r, size_t n, int, ncclComm_t c, cudaStream_t st) -> int {
    std::lock_guard<std::recursive_mutex> lock(g_mu);
    return Enqueue({false, s, r, n}, c, st);
  };
  a.GetErrorString = [](int) -> const char* { return "fake nccl error"; };
  a.GetDeviceCount = [](int* n) -> int {
    std::lock_guard<std::recursive_mutex> lock(g_mu);
    *n = g.device_count_error == 0 ? g.devices : 0;
    return g.device_count_error;
  };
  a.SetDevice = [](int) -> int { return kCudaSuccess; };
  a.DeviceGetStreamPriorityRange = [](int* least, int* greatest) -> int {
    std::lock_guard<std::recursive_mutex> lock(g_mu);
    *least = 0;
    *greatest = -5;
    return kCudaSuccess;
  };
  a.StreamCreateWithPriority = [](cudaStream_t* s, unsigned int, int prio) -> int {
    std::lock_guard<std::recursive_mutex> lock(g_mu);
    *s = NewHandle<cudaStream_t>();
    g.last_stream_priority = prio;
    ++g.streams;
    return kCudaSuccess;
  };
  a.StreamDestroy = [](cudaStream_t) -> int {
    std::lock_guard<std::recursive_mutex> lock(g_mu);
    ++g.streams_destroyed;
    return kCudaSuccess;
  };
  a.Malloc = [](void** p, size_t n) -> int {
    std::lock_guard<std::recursive_mutex> lock(g_mu);
    if (g.malloc_error) return g.malloc_error;
    std::vector<uint8_t> mem(n + 1);
    *p = mem.data();
    g.memory.emplace(*p, std::move(mem));
    ++g.mallocs;
    return kCudaSuccess;
  };
  a.Free = [](void* p) -> int {
    std::lock_guard<std::recursive_mutex> lock(g_mu);
    g.memory.erase(p);
    ++g.frees;
    return kCudaSuccess;
  };
  a.Memset = [](void* p, int v, size_t n) -> int {
    std::lock_guard<std::recursive_mutex> lock(g_mu);
    std::memset(p, v, n);
    return kCudaSuccess;
  };
  a.Memcpy = [](void* d, const void* s, size_t n, int) -> int {
    std::lock_guard<std::recursive_mutex> lock(g_mu);
    std::memcpy(d, s, n);
    return kCudaSuccess;
  };
  a.EventCreate = [](cudaEvent_t* e) -> int {
    std::lock_guard<std::recursive_mutex> lock(g_mu);
    *e = NewHandle<cudaEvent_t>();
    ++g.events;
    return kCudaSuccess;
  };
  a.EventRecord = [](cudaEvent_t e, cudaStream_t st) -> int {
    std::lock_guard<std::recursive_mutex> lock(g_mu);
    // A start is recorded before the collective, a stop after it: op_ms apart.
    g.event_ms[H(e)] = g.stream_enqueued[H(st)] ? g.now_ms + g.op_ms : g.now_ms;
    g.event_stream[H(e)] = H(st);
    return kCudaSuccess;
  };
  a.EventQuery = [](cudaEvent_t e) -> int {
    std::lock_guard<std::recursive_mutex> lock(g_mu);
    if (g.collective_hangs) return kCudaErrorNotReady;
    // Not ready while the stream's last collective waits for ranks of other communicators.
    auto op = g.stream_op.find(g.event_stream[H(e)]);
    if (op != g.stream_op.end() && !g.ops[op->second].done) return kCudaErrorNotReady;
    return kCudaSuccess;
  };
  a.EventElapsedTime = [](float* ms, cudaEvent_t s, cudaEvent_t e) -> int {
    std::lock_guard<std::recursive_mutex> lock(g_mu);
    *ms = static_cast<float>(g.event_ms[H(e)] - g.event_ms[H(s)]);
    g.stream_enqueued[g.event_stream[H(e)]] = false;
    g.enqueued = false;
    g.now_ms += 10;
    return kCudaSuccess;
  };
  a.EventDestroy = [](cudaEvent_t) -> int {
    std::lock_guard<std::recursive_mutex> lock(g_mu);
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
