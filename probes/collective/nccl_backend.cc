// NCCL collective probe over the dlopen seam: availability, rendezvous of the unique id, grouped
// non-blocking init, CUDA-event timing, and teardown (finalize and destroy, or abort on error).
#include "probes/collective/nccl_backend.h"

#include <spdlog/spdlog.h>

#include <cstring>
#include <thread>

#include "common/clock.h"

namespace fw::collective {
namespace {

using nccl_abi::cudaError_t;
using nccl_abi::ncclResult_t;
using Deadline = std::chrono::steady_clock::time_point;

std::string VersionString(int v) {
  if (v <= 0) return "unknown";
  return std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." +
         std::to_string(v % 100);
}

std::string CudaText(const NcclApi& api, cudaError_t e) {
  const char* s = api.CudaGetErrorString ? api.CudaGetErrorString(e) : nullptr;
  return "CUDA error " + std::to_string(e) + (s ? std::string(": ") + s : "");
}

std::string NcclText(const NcclApi& api, ncclResult_t r) {
  const char* s = api.GetErrorString ? api.GetErrorString(r) : nullptr;
  return "NCCL error " + std::to_string(r) + (s ? std::string(": ") + s : "");
}

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(const NcclApi& api, GroupSpec group, NcclOptions options, NcclCounters& counters)
      : api_(api), group_(std::move(group)), options_(std::move(options)), counters_(counters) {
    for (int d : options_.devices) locals_.push_back({.device = d});
  }
  ~NcclCommunicator() override { TearDown(); }

  std::string_view backend() const override { return "nccl"; }
  const GroupSpec& group() const override { return group_; }
  std::vector<int> local_ranks() const override {
    std::vector<int> r;
    for (size_t i = 0; i < locals_.size(); ++i) r.push_back(group_.rank + static_cast<int>(i));
    return r;
  }

  // Streams and events per device, then one grouped non-blocking init; waits until every
  // communicator is ready or `deadline` passes (then aborts them).
  Status Init(const nccl_abi::ncclUniqueId& id, Deadline deadline) {
    for (Local& l : locals_) {
      int least = 0, greatest = 0;
      if (Status s = Cuda(api_.SetDevice(l.device), "cudaSetDevice"); !s.ok()) return Fail(s);
      if (Status s = Cuda(api_.DeviceGetStreamPriorityRange(&least, &greatest),
                          "cudaDeviceGetStreamPriorityRange");
          !s.ok()) {
        return Fail(s);
      }
      // The numerically greatest priority is the lowest: a probe yields to a user's kernels.
      if (Status s = Cuda(
              api_.StreamCreateWithPriority(&l.stream, nccl_abi::kCudaStreamNonBlocking, least),
              "cudaStreamCreateWithPriority");
          !s.ok()) {
        return Fail(s);
      }
      if (Status s = Cuda(api_.EventCreate(&l.start), "cudaEventCreate"); !s.ok()) return Fail(s);
      if (Status s = Cuda(api_.EventCreate(&l.stop), "cudaEventCreate"); !s.ok()) return Fail(s);
    }
    nccl_abi::ncclConfigV21400 config;
    config.blocking = 0;
    Status first = Nccl(api_.GroupStart(), "ncclGroupStart");
    if (!first.ok()) return Fail(first);
    for (size_t i = 0; i < locals_.size() && first.ok(); ++i) {
      first = Cuda(api_.SetDevice(locals_[i].device), "cudaSetDevice");
      if (first.ok()) {
        first = Nccl(api_.CommInitRankConfig(&locals_[i].comm, group_.size, id,
                                             group_.rank + static_cast<int>(i), &config),
                     "ncclCommInitRankConfig");
      }
    }
    Status end = Nccl(api_.GroupEnd(), "ncclGroupEnd");  // the group is closed in every case
    if (!first.ok()) return Fail(first);
    if (!end.ok()) return Fail(end);
    return WaitReady(deadline, "communicator init");
  }

  Status Prepare(const OpSpec& op) override {
    if (broken_) return Broken();
    if (op.kind == OpKind::kReduceScatter) {
      return Status::Unimplemented("nccl: the probe runs all_reduce and all_gather");
    }
    FreeBuffers();
    op_ = op;
    const size_t n = static_cast<size_t>(group_.size);
    per_rank_ = static_cast<size_t>(op.bytes / 4 / n);
    const size_t out_bytes = per_rank_ * n * 4;
    const size_t in_bytes = op.kind == OpKind::kAllGather ? per_rank_ * 4 : out_bytes;
    for (size_t i = 0; i < locals_.size(); ++i) {
      Local& l = locals_[i];
      if (Status s = Cuda(api_.SetDevice(l.device), "cudaSetDevice"); !s.ok()) return Fail(s);
      if (Status s = Cuda(api_.Malloc(&l.send, in_bytes), "cudaMalloc"); !s.ok()) return Fail(s);
      if (Status s = Cuda(api_.Malloc(&l.recv, out_bytes), "cudaMalloc"); !s.ok()) return Fail(s);
      if (Status s =
              Cuda(api_.Memset(l.send, FillByte(group_.rank + static_cast<int>(i)), in_bytes),
                   "cudaMemset");
          !s.ok()) {
        return Fail(s);
      }
    }
    return Status::Ok();
  }

  Status RunOnce(std::span<IterationSample> samples) override {
    if (broken_) return Broken();
    if (samples.size() != locals_.size()) return Status::InvalidArgument("nccl: sample count");
    const Deadline deadline = std::chrono::steady_clock::now() + op_.timeout;
    for (size_t i = 0; i < locals_.size(); ++i) {
      samples[i] = {};
      samples[i].arrive_ns = RealClock::Get().MonotonicNanos();
      if (Status s = Cuda(api_.EventRecord(locals_[i].start, locals_[i].stream), "cudaEventRecord");
          !s.ok()) {
        return Fail(s);
      }
    }
    Status first = Nccl(api_.GroupStart(), "ncclGroupStart");
    if (!first.ok()) return Fail(first);
    const size_t count = per_rank_ * static_cast<size_t>(group_.size);
    for (size_t i = 0; i < locals_.size() && first.ok(); ++i) {
      const Local& l = locals_[i];
      first = op_.kind == OpKind::kAllReduce
                  ? Nccl(api_.AllReduce(l.send, l.recv, count, nccl_abi::kNcclInt32,
                                        nccl_abi::kNcclSum, l.comm, l.stream),
                         "ncclAllReduce")
                  : Nccl(api_.AllGather(l.send, l.recv, per_rank_, nccl_abi::kNcclInt32, l.comm,
                                        l.stream),
                         "ncclAllGather");
    }
    Status end = Nccl(api_.GroupEnd(), "ncclGroupEnd");
    if (!first.ok()) return Fail(first);
    if (!end.ok()) return Fail(end);
    if (Status s = WaitReady(deadline, OpKindName(op_.kind)); !s.ok()) return s;
    for (const Local& l : locals_) {
      if (Status s = Cuda(api_.EventRecord(l.stop, l.stream), "cudaEventRecord"); !s.ok()) {
        return Fail(s);
      }
    }
    std::vector<bool> done(locals_.size(), false);
    for (size_t left = locals_.size(); left > 0;) {
      for (size_t i = 0; i < locals_.size(); ++i) {
        if (done[i]) continue;
        const cudaError_t q = api_.EventQuery(locals_[i].stop);
        if (q == nccl_abi::kCudaSuccess) {
          samples[i].exit_ns = RealClock::Get().MonotonicNanos();
          done[i] = true;
          --left;
        } else if (q != nccl_abi::kCudaErrorNotReady) {
          return Fail(Cuda(q, "cudaEventQuery"));
        } else if (Status s = AsyncError(locals_[i].comm); !s.ok()) {
          return Fail(s);
        }
      }
      if (left > 0 && std::chrono::steady_clock::now() > deadline) {
        return TimedOut(OpKindName(op_.kind));
      }
      if (left > 0) std::this_thread::sleep_for(options_.poll_interval);
    }
    for (size_t i = 0; i < locals_.size(); ++i) {
      float ms = 0;
      if (Status s = Cuda(api_.EventElapsedTime(&ms, locals_[i].start, locals_[i].stop),
                          "cudaEventElapsedTime");
          !s.ok()) {
        return Fail(s);
      }
      samples[i].op_seconds = static_cast<double>(ms) * 1e-3;
    }
    counters_.operations.fetch_add(1, std::memory_order_relaxed);
    return Status::Ok();
  }

  Status Verify() override {
    if (broken_) return Broken();
    const size_t n = static_cast<size_t>(group_.size);
    std::vector<uint32_t> host(per_rank_ * n);
    for (size_t i = 0; i < locals_.size(); ++i) {
      if (Status s = Cuda(api_.Memcpy(host.data(), locals_[i].recv, host.size() * 4,
                                      nccl_abi::kCudaMemcpyDeviceToHost),
                          "cudaMemcpy");
          !s.ok()) {
        return Fail(s);
      }
      uint32_t reduced = 0;
      for (size_t r = 0; r < n; ++r) reduced += FillWord(static_cast<int>(r));
      for (size_t j = 0; j < host.size(); ++j) {
        const uint32_t want =
            op_.kind == OpKind::kAllReduce ? reduced : FillWord(static_cast<int>(j / per_rank_));
        if (host[j] != want) {
          return Status::Internal("nccl: " + std::string(OpKindName(op_.kind)) + " on rank " +
                                  std::to_string(group_.rank + static_cast<int>(i)) + ": output[" +
                                  std::to_string(j) + "] is " + std::to_string(host[j]) +
                                  ", expected " + std::to_string(want));
        }
      }
    }
    return Status::Ok();
  }

 private:
  struct Local {
    int device = -1;
    nccl_abi::ncclComm_t comm = nullptr;
    nccl_abi::cudaStream_t stream = nullptr;
    nccl_abi::cudaEvent_t start = nullptr;
    nccl_abi::cudaEvent_t stop = nullptr;
    void* send = nullptr;
    void* recv = nullptr;
  };

  // Each rank's input is one byte value repeated, so an int32 sum or gather has a known result.
  static int FillByte(int rank) { return rank % 251 + 1; }
  static uint32_t FillWord(int rank) { return static_cast<uint32_t>(FillByte(rank)) * 0x01010101u; }

  Status Cuda(cudaError_t e, const char* call) {
    if (e == nccl_abi::kCudaSuccess) return Status::Ok();
    counters_.cuda_errors.fetch_add(1, std::memory_order_relaxed);
    SPDLOG_WARN(
        "component=collective backend=nccl msg=\"CUDA call failed\" call={} group={} "
        "error=\"{}\"",
        call, group_.group_id, CudaText(api_, e));
    return Status::Unavailable(std::string("nccl: ") + call + ": " + CudaText(api_, e));
  }
  // ncclInProgress is success for non-blocking communicators: completion is polled.
  Status Nccl(ncclResult_t r, const char* call) {
    if (r == nccl_abi::kNcclSuccess || r == nccl_abi::kNcclInProgress) return Status::Ok();
    counters_.nccl_errors.fetch_add(1, std::memory_order_relaxed);
    SPDLOG_WARN(
        "component=collective backend=nccl msg=\"NCCL call failed\" call={} group={} "
        "error=\"{}\"",
        call, group_.group_id, NcclText(api_, r));
    return Status::Unavailable(std::string("nccl: ") + call + ": " + NcclText(api_, r));
  }
  Status AsyncError(nccl_abi::ncclComm_t comm) {
    ncclResult_t async = nccl_abi::kNcclSuccess;
    if (Status s = Nccl(api_.CommGetAsyncError(comm, &async), "ncclCommGetAsyncError"); !s.ok()) {
      return s;
    }
    return Nccl(async, "asynchronous error");
  }
  // Polls every communicator until none is in progress; aborts them all on an error or timeout.
  Status WaitReady(Deadline deadline, std::string_view what) {
    for (;;) {
      bool pending = false;
      for (const Local& l : locals_) {
        if (l.comm == nullptr) continue;
        ncclResult_t async = nccl_abi::kNcclSuccess;
        if (Status s = Nccl(api_.CommGetAsyncError(l.comm, &async), "ncclCommGetAsyncError");
            !s.ok()) {
          return Fail(s);
        }
        if (async == nccl_abi::kNcclInProgress) {
          pending = true;
        } else if (Status s = Nccl(async, "asynchronous error"); !s.ok()) {
          return Fail(s);
        }
      }
      if (!pending) return Status::Ok();
      if (std::chrono::steady_clock::now() > deadline) return TimedOut(what);
      std::this_thread::sleep_for(options_.poll_interval);
    }
  }
  Status TimedOut(std::string_view what) {
    counters_.timeouts.fetch_add(1, std::memory_order_relaxed);
    return Fail(Status::Unavailable("nccl: " + std::string(what) + " in group " + group_.group_id +
                                    " did not complete within its timeout; communicators aborted"));
  }
  Status Fail(Status s) {
    broken_ = true;
    error_ = s.message();
    AbortAll();
    return s;
  }
  Status Broken() const {
    return Status::FailedPrecondition("nccl: communicator unusable after an error: " + error_);
  }
  void AbortAll() {
    for (Local& l : locals_) {
      if (l.comm == nullptr) continue;
      const ncclResult_t r = api_.CommAbort(l.comm);
      counters_.aborts.fetch_add(1, std::memory_order_relaxed);
      if (r != nccl_abi::kNcclSuccess) {
        SPDLOG_WARN("component=collective backend=nccl msg=\"ncclCommAbort failed\" error=\"{}\"",
                    NcclText(api_, r));
      }
      l.comm = nullptr;
    }
  }
  void FreeBuffers() {
    for (Local& l : locals_) {
      if (l.send == nullptr && l.recv == nullptr) continue;
      (void)Cuda(api_.SetDevice(l.device), "cudaSetDevice");
      if (l.send) (void)Cuda(api_.Free(l.send), "cudaFree");
      if (l.recv) (void)Cuda(api_.Free(l.recv), "cudaFree");
      l.send = l.recv = nullptr;
    }
  }
  // Healthy communicators are finalized (bounded wait) and destroyed; others were aborted already.
  void TearDown() {
    if (!broken_) {
      bool finalizing = false;
      for (Local& l : locals_) {
        if (l.comm == nullptr) continue;
        if (!Nccl(api_.CommFinalize(l.comm), "ncclCommFinalize").ok()) broken_ = true;
        finalizing = true;
      }
      if (finalizing && !broken_) {
        const Status s = WaitReady(std::chrono::steady_clock::now() + std::chrono::seconds(5),
                                   "communicator finalize");
        (void)s;  // on failure WaitReady aborted them
      }
      for (Local& l : locals_) {
        if (l.comm == nullptr) continue;
        (void)Nccl(api_.CommDestroy(l.comm), "ncclCommDestroy");
        l.comm = nullptr;
      }
    }
    AbortAll();
    FreeBuffers();
    for (Local& l : locals_) {
      if (l.start) (void)Cuda(api_.EventDestroy(l.start), "cudaEventDestroy");
      if (l.stop) (void)Cuda(api_.EventDestroy(l.stop), "cudaEventDestroy");
      if (l.stream) (void)Cuda(api_.StreamDestroy(l.stream), "cudaStreamDestroy");
      l.start = l.stop = nullptr;
      l.stream = nullptr;
    }
  }

  const NcclApi& api_;
  const GroupSpec group_;
  const NcclOptions options_;
  NcclCounters& counters_;
  std::vector<Local> locals_;
  OpSpec op_;
  size_t per_rank_ = 0;
  bool broken_ = false;
  std::string error_;
};

}  // namespace

std::string_view NcclStateName(NcclState state) {
  switch (state) {
    case NcclState::kUnavailable:
      return "unavailable";
    case NcclState::kNoDriver:
      return "no_driver";
    case NcclState::kNoDevice:
      return "no_device";
    case NcclState::kError:
      return "error";
    case NcclState::kReady:
      return "ready";
  }
  return "unknown";
}

std::string NcclAvailability::ToString() const {
  const std::string version = nccl_version > 0 ? "NCCL " + VersionString(nccl_version) : "";
  switch (state) {
    case NcclState::kUnavailable:
      return "nccl: unavailable (" + detail + ")";
    case NcclState::kNoDriver:
      return "nccl: no driver (" + detail + (version.empty() ? "" : "; " + version) + ")";
    case NcclState::kNoDevice:
      return "nccl: no GPU (" + detail + "; " + version + ")";
    case NcclState::kError:
      return "nccl: error (" + detail + ")";
    case NcclState::kReady:
      return "nccl: ready (" + version + ", " + std::to_string(devices) + " GPUs)";
  }
  return "nccl: unknown";
}

NcclAvailability CheckNccl(const NcclApi& api) {
  NcclAvailability a;
  if (const ncclResult_t r = api.GetVersion(&a.nccl_version); r != nccl_abi::kNcclSuccess) {
    a.state = NcclState::kError;
    a.detail = "ncclGetVersion: " + NcclText(api, r);
    return a;
  }
  const cudaError_t e = api.GetDeviceCount(&a.devices);
  a.cuda_error = e;
  if (e == nccl_abi::kCudaErrorInsufficientDriver) {
    a.state = NcclState::kNoDriver;
    a.devices = 0;
    a.detail = "cudaGetDeviceCount: " + CudaText(api, e);
  } else if (e == nccl_abi::kCudaErrorNoDevice || (e == nccl_abi::kCudaSuccess && a.devices <= 0)) {
    a.state = NcclState::kNoDevice;
    a.devices = 0;
    a.detail = e == nccl_abi::kCudaSuccess ? "cudaGetDeviceCount: 0 devices"
                                           : "cudaGetDeviceCount: " + CudaText(api, e);
  } else if (e != nccl_abi::kCudaSuccess) {
    a.state = NcclState::kError;
    a.devices = 0;
    a.detail = "cudaGetDeviceCount: " + CudaText(api, e);
  } else {
    a.state = NcclState::kReady;
  }
  return a;
}

NcclAvailability LoadAndCheckNccl(const NcclLibraryOptions& options,
                                  std::unique_ptr<NcclLibrary>* library) {
  auto lib = NcclLibrary::Load(options);
  if (!lib.ok()) {
    NcclAvailability a;
    a.state = NcclState::kUnavailable;
    a.detail = lib.status().message();
    return a;
  }
  NcclAvailability a = CheckNccl((*lib)->api());
  SPDLOG_INFO("component=collective backend=nccl msg=\"{}\" state={}", a.ToString(),
              NcclStateName(a.state));
  if (library) *library = std::move(*lib);
  return a;
}

StatusOr<std::unique_ptr<Communicator>> ConnectNccl(const NcclApi& api, const GroupSpec& group,
                                                    KvStore& kv, const NcclOptions& options,
                                                    NcclCounters& counters) {
  if (Status s = ValidateGroup(group); !s.ok()) return s;
  if (options.devices.empty()) return Status::InvalidArgument("nccl: no local devices given");
  if (group.rank + static_cast<int>(options.devices.size()) > group.size) {
    return Status::InvalidArgument("nccl: ranks " + std::to_string(group.rank) + ".." +
                                   std::to_string(group.rank + options.devices.size() - 1) +
                                   " exceed the group size " + std::to_string(group.size));
  }
  const Deadline deadline = std::chrono::steady_clock::now() + options.rendezvous_timeout;
  const std::string key = GroupKeyPrefix(group) + "nccl/unique_id";
  nccl_abi::ncclUniqueId id{};
  if (group.rank == 0) {
    if (const ncclResult_t r = api.GetUniqueId(&id); r != nccl_abi::kNcclSuccess) {
      counters.nccl_errors.fetch_add(1, std::memory_order_relaxed);
      return Status::Unavailable("nccl: ncclGetUniqueId: " + NcclText(api, r));
    }
    if (Status s = kv.Set(key, std::string(id.internal, sizeof(id.internal))); !s.ok()) return s;
  } else {
    auto v = kv.Get(key, options.rendezvous_timeout);
    if (!v.ok()) {
      return Status::Unavailable("nccl: rendezvous of rank " + std::to_string(group.rank) + " in " +
                                 group.group_id + " failed: " + v.status().message());
    }
    if (v->size() != sizeof(id.internal)) {
      return Status::InvalidArgument("nccl: unique id of " + std::to_string(v->size()) +
                                     " bytes, expected " + std::to_string(sizeof(id.internal)));
    }
    std::memcpy(id.internal, v->data(), sizeof(id.internal));
  }
  auto comm = std::make_unique<NcclCommunicator>(api, group, options, counters);
  if (Status s = comm->Init(id, deadline); !s.ok()) return s;
  return std::unique_ptr<Communicator>(std::move(comm));
}

}  // namespace fw::collective
