#include "probes/collective/nvml.h"

#include <dlfcn.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

namespace fw::collective {
namespace {

// The NVML ABI this check uses (nvml.h is not needed at build time): return codes are ints,
// devices opaque pointers, utilization two unsigned ints.
constexpr int kNvmlSuccess = 0;
constexpr int kNvmlInsufficientSize = 7;  // more processes than the (empty) array holds
using NvmlDevice = void*;
struct NvmlUtilization {
  unsigned gpu;
  unsigned memory;
};

class RealNvml final : public NvmlApi {
 public:
  RealNvml() = default;
  ~RealNvml() override {
    if (shutdown_ != nullptr) (void)Check("nvmlShutdown", shutdown_());
    // The library stays mapped: NVML may keep threads that reference it.
  }
  Status Load(const std::string& library) {
    handle_ = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle_ == nullptr) {
      const char* e = dlerror();
      return Status::Unavailable(e ? e : library + ": dlopen failed");
    }
    for (Status s : {Sym("nvmlInit_v2", init_), Sym("nvmlShutdown", shutdown_),
                     Sym("nvmlErrorString", error_string_), Sym("nvmlDeviceGetCount_v2", count_),
                     Sym("nvmlDeviceGetHandleByIndex_v2", handle_by_index_),
                     Sym("nvmlDeviceGetUtilizationRates", utilization_),
                     Sym("nvmlDeviceGetComputeRunningProcesses", processes_)}) {
      if (!s.ok()) {
        shutdown_ = nullptr;  // not initialised: nothing to shut down
        return s;
      }
    }
    auto shutdown = shutdown_;
    shutdown_ = nullptr;
    if (Status s = Check("nvmlInit_v2", init_()); !s.ok()) return s;
    shutdown_ = shutdown;
    return Status::Ok();
  }
  StatusOr<unsigned> DeviceCount() override {
    unsigned n = 0;
    if (Status s = Check("nvmlDeviceGetCount_v2", count_(&n)); !s.ok()) return s;
    return n;
  }
  StatusOr<unsigned> Utilization(unsigned index) override {
    auto dev = Device(index);
    if (!dev.ok()) return dev.status();
    NvmlUtilization u{};
    if (Status s = Check("nvmlDeviceGetUtilizationRates", utilization_(*dev, &u)); !s.ok()) {
      return s;
    }
    return u.gpu;
  }
  StatusOr<unsigned> ComputeProcesses(unsigned index) override {
    auto dev = Device(index);
    if (!dev.ok()) return dev.status();
    unsigned n = 0;
    const int rc = processes_(*dev, &n, nullptr);
    if (rc == kNvmlInsufficientSize) return n > 0 ? n : 1u;  // some process runs
    if (Status s = Check("nvmlDeviceGetComputeRunningProcesses", rc); !s.ok()) return s;
    return n;
  }

 private:
  template <typename Fn>
  Status Sym(const char* name, Fn& out) {
    void* p = dlsym(handle_, name);
    if (p == nullptr) {
      SPDLOG_WARN("component=collective backend=nvml msg=\"missing entry point\" symbol={}", name);
      return Status::Unavailable(fmt::format("libnvidia-ml lacks {}", name));
    }
    out = reinterpret_cast<Fn>(p);
    return Status::Ok();
  }
  Status Check(const char* call, int rc) const {
    if (rc == kNvmlSuccess) return Status::Ok();
    const char* text = error_string_ != nullptr ? error_string_(rc) : nullptr;
    const std::string what = fmt::format("{}: NVML error {}: {}", call, rc, text ? text : "?");
    SPDLOG_WARN("component=collective backend=nvml msg=\"call failed\" error=\"{}\"", what);
    return Status::Unavailable(what);
  }
  StatusOr<NvmlDevice> Device(unsigned index) {
    NvmlDevice d = nullptr;
    if (Status s = Check("nvmlDeviceGetHandleByIndex_v2", handle_by_index_(index, &d)); !s.ok()) {
      return s;
    }
    return d;
  }

  void* handle_ = nullptr;
  int (*init_)() = nullptr;
  int (*shutdown_)() = nullptr;
  const char* (*error_string_)(int) = nullptr;
  int (*count_)(unsigned*) = nullptr;
  int (*handle_by_index_)(unsigned, NvmlDevice*) = nullptr;
  int (*utilization_)(NvmlDevice, NvmlUtilization*) = nullptr;
  int (*processes_)(NvmlDevice, unsigned*, void*) = nullptr;
};

}  // namespace

StatusOr<std::unique_ptr<NvmlApi>> LoadNvml(const std::string& library) {
  auto nvml = std::make_unique<RealNvml>();
  if (Status s = nvml->Load(library); !s.ok()) {
    SPDLOG_INFO("component=collective backend=nvml msg=\"nvml: unavailable\" error=\"{}\"",
                s.message());
    return s;
  }
  SPDLOG_INFO("component=collective backend=nvml msg=\"nvml loaded\" library={}", library);
  return std::unique_ptr<NvmlApi>(std::move(nvml));
}

std::string GpuBusyReport::Reason() const {
  if (busy.empty()) return "";
  std::string out = "GPUs busy:";
  for (size_t i = 0; i < busy.size(); ++i) out += (i ? ", " : " ") + busy[i];
  return out;
}

GpuBusyReport CheckGpusBusy(NvmlApi& nvml, const GpuBusyPolicy& policy) {
  GpuBusyReport r;
  auto count = nvml.DeviceCount();
  if (!count.ok()) {
    r.error = std::string(count.status().message());
    return r;
  }
  r.checked = true;
  for (unsigned i = 0; i < *count; ++i) {
    auto util = nvml.Utilization(i);
    auto procs = nvml.ComputeProcesses(i);
    if (!util.ok() || !procs.ok()) {
      r.busy.push_back(fmt::format("gpu{} (not readable: {})", i,
                                   (!util.ok() ? util.status() : procs.status()).message()));
      continue;
    }
    if (*util > policy.max_utilization_percent || (policy.any_process_is_busy && *procs > 0)) {
      r.busy.push_back(fmt::format("gpu{} (utilization {}%, {} processes)", i, *util, *procs));
    }
  }
  return r;
}

StatusOr<unsigned> FakeNvml::DeviceCount() { return static_cast<unsigned>(gpus_.size()); }

StatusOr<unsigned> FakeNvml::Utilization(unsigned index) {
  if (index >= gpus_.size() || gpus_[index].fails) {
    return Status::Unavailable(
        fmt::format("nvmlDeviceGetUtilizationRates: NVML error 15 (gpu{})", index));
  }
  return gpus_[index].utilization;
}

StatusOr<unsigned> FakeNvml::ComputeProcesses(unsigned index) {
  if (index >= gpus_.size() || gpus_[index].fails) {
    return Status::Unavailable(
        fmt::format("nvmlDeviceGetComputeRunningProcesses: NVML error 15 (gpu{})", index));
  }
  return gpus_[index].processes;
}

}  // namespace fw::collective
