// The agent's side of collective probes: the rendezvous KvStore carried to the aggregator over the
// uplink (KvRequest / KvReply), and a runner thread that executes CollectiveJobs one at a time and
// reports a CollectiveResult for each. NCCL is loaded lazily, once, through dlopen.
#pragma once

#include <chrono>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>

#include "common/mutex.h"
#include "exporter/registry.h"
#include "fabricwatch.pb.h"
#include "probes/collective/kv_store.h"
#include "probes/collective/nccl_backend.h"
#include "probes/collective/nvml.h"

namespace fw::agent {

using AgentSendFn = std::function<void(fabricwatch::v1::AgentMessage)>;

// KvStore over the uplink. Set waits for the aggregator's acknowledgement; Get waits for its
// answer (the aggregator parks a get until a member sets the key). Thread-safe: the runner thread
// calls Set/Get, the uplink's thread delivers replies.
class UplinkKvStore final : public collective::KvStore {
 public:
  explicit UplinkKvStore(AgentSendFn send,
                         std::chrono::milliseconds set_timeout = std::chrono::seconds(10))
      : send_(std::move(send)), set_timeout_(set_timeout) {}
  Status Set(std::string_view key, std::string value) override;
  StatusOr<std::string> Get(std::string_view key, std::chrono::milliseconds timeout) override;
  // The aggregator erases a group's keys when the group ends; nothing is held here.
  size_t ErasePrefix(std::string_view) override { return 0; }
  // A KvReply from the aggregator (the uplink's thread). Replies nobody waits for are dropped.
  void OnReply(const fabricwatch::v1::KvReply& reply);
  // Fails every wait in progress and every later call (agent stop).
  void Cancel();

 private:
  StatusOr<fabricwatch::v1::KvReply> Request(std::string_view key, std::string value,
                                             std::chrono::milliseconds timeout);
  AgentSendFn send_;
  const std::chrono::milliseconds set_timeout_;
  Mutex mu_;
  CondVar cv_;
  std::map<std::string, int, std::less<>> waiting_ FW_GUARDED_BY(mu_);
  std::map<std::string, fabricwatch::v1::KvReply, std::less<>> arrived_ FW_GUARDED_BY(mu_);
  bool cancelled_ FW_GUARDED_BY(mu_) = false;
};

struct CollectiveRunnerOptions {
  std::string node;                       // this agent's node name (its rank is its index)
  std::string tcp_address = "127.0.0.1";  // the address Gloo binds (the probe address)
  uint64_t max_bytes = 8ull << 20;        // larger jobs are clamped
  std::chrono::milliseconds rendezvous_timeout{30000};
  std::chrono::milliseconds op_timeout{10000};
  collective::NcclLibraryOptions nccl;
  // Tests: this API (a fake NCCL) instead of loading the libraries; it must outlive the runner.
  const collective::NcclApi* nccl_api_for_test = nullptr;
  // Files that show an NVIDIA kernel driver; any one present is enough. Empty: no check. When
  // none exists, an NCCL job reports no_driver without loading NCCL and the CUDA runtime (1.6 MiB
  // of libraries and about 2 MiB of heap their start-up leaves resident, for good: they are never
  // unloaded), and each later job looks again. The agent sets kNvidiaDriverFiles.
  std::vector<std::string> nvidia_driver_files;
  static constexpr const char* kNvidiaDriverFiles[] = {"/proc/driver/nvidia/version",
                                                       "/dev/nvidiactl"};
  // NVML for the busy-GPU check before an NCCL job (a node whose GPUs are busy skips it).
  std::string nvml_library = "libnvidia-ml.so.1";
  // Tests: replaces LoadNvml (e.g. with a FakeNvml).
  std::function<StatusOr<std::unique_ptr<collective::NvmlApi>>()> nvml_loader;
  size_t max_queued = 4;  // jobs beyond this are refused with a result saying so
  // Tests only: sleep this long before each Gloo iteration, so this node is a late rank.
  std::chrono::milliseconds test_delay{0};
};

// The nice value of the runner thread and of the Gloo and NCCL threads it starts.
inline constexpr int kCollectiveNice = 10;

class CollectiveRunner {
 public:
  CollectiveRunner(CollectiveRunnerOptions options, AgentSendFn send, metrics::Registry& registry);
  ~CollectiveRunner();
  // Lets jobs run. The runner thread starts when a job arrives and ends when the queue is empty, so
  // between jobs (most of the time) the node keeps no idle thread for them.
  void Start();
  void Stop();  // cancels rendezvous waits; a running operation ends at its timeout
  // The uplink's thread: a job to run, a rendezvous reply.
  void OnJob(const fabricwatch::v1::CollectiveJob& job);
  void OnKvReply(const fabricwatch::v1::KvReply& reply) { kv_.OnReply(reply); }
  // "nccl: ..." once NCCL was checked (CheckNccl, or the first NCCL job), else empty.
  std::string nccl_status() const;
  // Loads and checks NCCL now, on the calling thread, so that the Hello can announce the state.
  // Call before Start() (the runner thread owns the library afterwards). The agent calls it where
  // its inventory lists GPUs; elsewhere NCCL is loaded on the first NCCL job, if one comes.
  void CheckNccl();
  // NCCL's state for the Hello (CollectiveCapability): empty until checked.
  fabricwatch::v1::CollectiveCapability capability() const;

 private:
  void Loop();
  fabricwatch::v1::CollectiveResult Run(const fabricwatch::v1::CollectiveJob& job);
  void RunNccl(const fabricwatch::v1::CollectiveJob& job, int rank,
               fabricwatch::v1::CollectiveResult& result);
  void Report(fabricwatch::v1::CollectiveResult result);
  // True (with `result`'s error set, and skipped_) when the node's GPUs are busy or NVML, once
  // loaded, cannot say whether they are.
  bool GpusBusy(fabricwatch::v1::CollectiveResult& result);
  // Records NCCL's state: status text, the state gauge (the old state's series back to 0).
  void SetNcclAvailability(const collective::NcclAvailability& a);
  // Loads the libraries once (or takes the test's API) and records the state found.
  void LoadNcclOnce();
  // Starts a runner thread when started_, jobs are queued and none is running (a thread that has
  // ended is joined first).
  void StartThreadIfNeeded() FW_REQUIRES(mu_);

  const CollectiveRunnerOptions options_;
  AgentSendFn send_;
  UplinkKvStore kv_;
  collective::NcclCounters nccl_counters_;
  std::unique_ptr<collective::NcclLibrary> nccl_;  // runner thread only
  const collective::NcclApi* nccl_api_ = nullptr;  // runner thread only: nccl_'s, or the test's
  bool nccl_loaded_ = false;                       // runner thread only: load attempted
  bool nccl_loaded_state_known_ = false;           // runner thread only
  collective::NcclState nccl_state_value_{};       // runner thread only: the last state seen
  int nccl_devices_value_ = 0;                     // runner thread only: and its device count
  std::unique_ptr<collective::NvmlApi> nvml_;      // runner thread only; null: check off
  bool nvml_loaded_ = false;                       // runner thread only: load attempted
  bool skipped_ = false;                           // runner thread only: the job was skipped
  mutable Mutex mu_;
  std::deque<fabricwatch::v1::CollectiveJob> queue_ FW_GUARDED_BY(mu_);
  bool started_ FW_GUARDED_BY(mu_) = false;
  bool stopping_ FW_GUARDED_BY(mu_) = false;
  std::string nccl_status_ FW_GUARDED_BY(mu_);
  fabricwatch::v1::CollectiveCapability capability_ FW_GUARDED_BY(mu_);
  bool running_ FW_GUARDED_BY(mu_) = false;  // Loop() has not yet decided to end
  std::thread thread_ FW_GUARDED_BY(mu_);    // the last runner thread, joined before the next
  metrics::Family<metrics::Counter>& runs_;  // {backend, outcome}
  metrics::Family<metrics::Gauge>& nccl_state_;
  metrics::Gauge& last_busbw_;
};

}  // namespace fw::agent
