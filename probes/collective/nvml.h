// Busy-GPU check before a collective probe, through NVML (libnvidia-ml) loaded with dlopen, so the
// agent has no link-time dependency on the driver. A probe must never disturb a user's job: a node
// whose GPUs are busy (utilization, or any compute process) skips its NCCL probe.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common/status.h"

namespace fw::collective {

// What the check needs of NVML: the seam between the real library and the tests' fake.
class NvmlApi {
 public:
  virtual ~NvmlApi() = default;
  virtual StatusOr<unsigned> DeviceCount() = 0;
  // Percent of the last sample period in which a kernel ran on GPU `index`.
  virtual StatusOr<unsigned> Utilization(unsigned index) = 0;
  // Compute processes running on GPU `index`.
  virtual StatusOr<unsigned> ComputeProcesses(unsigned index) = 0;
};

// Opens `library` (default libnvidia-ml.so.1) and calls nvmlInit_v2. Every entry point is resolved
// and checked, every NVML return code is checked and logged with nvmlErrorString; a failure is
// Unavailable ("nvml: unavailable (...)" as NvmlStatusText writes it). The library stays loaded and
// initialised for the life of the returned object (nvmlShutdown on destruction).
StatusOr<std::unique_ptr<NvmlApi>> LoadNvml(const std::string& library = "libnvidia-ml.so.1");

struct GpuBusyPolicy {
  unsigned max_utilization_percent = 10;  // above this a GPU is busy
  bool any_process_is_busy = true;        // a compute process on a GPU makes it busy
};

struct GpuBusyReport {
  bool checked = false;           // NVML answered for every GPU
  std::vector<std::string> busy;  // "gpu1 (utilization 87%, 2 processes)"
  std::string error;              // why the check could not run (then `checked` is false)
  std::string Reason() const;     // "GPUs busy: gpu1 (...), gpu3 (...)"; empty when none
};

// Asks NVML about every GPU. A GPU whose query fails counts as busy (a probe must not guess that
// a GPU it cannot see is idle); a failing device count leaves `checked` false with the error.
GpuBusyReport CheckGpusBusy(NvmlApi& nvml, const GpuBusyPolicy& policy = {});

// Tests: an NvmlApi with fixed answers per GPU.
class FakeNvml final : public NvmlApi {
 public:
  struct Gpu {
    unsigned utilization = 0;
    unsigned processes = 0;
    bool fails = false;  // every query on this GPU returns an error
  };
  explicit FakeNvml(std::vector<Gpu> gpus) : gpus_(std::move(gpus)) {}
  StatusOr<unsigned> DeviceCount() override;
  StatusOr<unsigned> Utilization(unsigned index) override;
  StatusOr<unsigned> ComputeProcesses(unsigned index) override;
  std::vector<Gpu>& gpus() { return gpus_; }

 private:
  std::vector<Gpu> gpus_;
};

}  // namespace fw::collective
