// Gloo collective probe: a gloo::rendezvous::Store over the KvStore seam, the transport device, and
// a Communicator that times gloo::allreduce / gloo::allgather on the host clock.
#include "probes/collective/gloo_backend.h"

#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/config.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>

#if GLOO_HAVE_TRANSPORT_IBVERBS
#include <gloo/transport/ibverbs/device.h>
#endif

#include <cmath>
#include <exception>
#include <stdexcept>
#include <vector>

#include "common/clock.h"

namespace fw::collective {
namespace {

// Gloo reports store failures by exception; this one carries the KvStore's status text.
class KvStoreError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// gloo::rendezvous::Store over the KvStore seam. Every key gets the group's prefix, so groups never
// collide. Waits are bounded: Gloo's timeout where it passes one, else the rendezvous timeout.
class KvGlooStore final : public gloo::rendezvous::Store {
 public:
  KvGlooStore(KvStore& kv, std::string prefix, std::chrono::milliseconds timeout)
      : kv_(kv), prefix_(std::move(prefix)), timeout_(timeout) {}

  void set(const std::string& key, const std::vector<char>& data) override {
    Status s = kv_.Set(prefix_ + key, std::string(data.begin(), data.end()));
    if (!s.ok()) throw KvStoreError(s.ToString());
  }
  std::vector<char> get(const std::string& key) override {
    auto v = kv_.Get(prefix_ + key, timeout_);
    if (!v.ok()) throw KvStoreError(v.status().ToString());
    return std::vector<char>(v->begin(), v->end());
  }
  void wait(const std::vector<std::string>& keys) override { wait(keys, timeout_); }
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override {
    const auto limit = std::min(timeout, timeout_);
    const auto deadline = std::chrono::steady_clock::now() + limit;
    for (const std::string& key : keys) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      auto v = kv_.Get(prefix_ + key, std::max(left, std::chrono::milliseconds(0)));
      if (!v.ok()) throw KvStoreError(v.status().ToString());
    }
  }

 private:
  KvStore& kv_;
  const std::string prefix_;
  const std::chrono::milliseconds timeout_;
};

StatusOr<std::shared_ptr<gloo::transport::Device>> OpenDevice(const GlooOptions& options) {
  try {
    if (options.transport == GlooTransport::kTcp) {
      gloo::transport::tcp::attr attr(options.tcp_address.c_str());
      attr.ai_family = AF_INET;
      return gloo::transport::tcp::CreateDevice(attr);
    }
#if GLOO_HAVE_TRANSPORT_IBVERBS
    gloo::transport::ibverbs::attr attr;
    attr.name = options.ibverbs_device;
    attr.port = options.ibverbs_port;
    attr.index = options.ibverbs_index;
    if (attr.name.empty()) {
      const std::vector<std::string> names = gloo::transport::ibverbs::getDeviceNames();
      if (names.empty()) return Status::Unavailable("gloo ibverbs: no RDMA device on this node");
      attr.name = names.front();
    }
    return gloo::transport::ibverbs::CreateDevice(attr);
#else
    return Status::Unimplemented("gloo ibverbs: this libgloo was built without ibverbs");
#endif
  } catch (const std::exception& e) {
    return Status::Unavailable(std::string("gloo ") +
                               (options.transport == GlooTransport::kTcp ? "tcp" : "ibverbs") +
                               ": cannot open the transport device: " + e.what());
  }
}

class GlooCommunicator final : public Communicator {
 public:
  GlooCommunicator(GroupSpec group, std::shared_ptr<gloo::transport::Device> device,
                   std::shared_ptr<gloo::rendezvous::Context> context)
      : group_(std::move(group)), device_(std::move(device)), context_(std::move(context)) {}

  std::string_view backend() const override { return "gloo"; }
  const GroupSpec& group() const override { return group_; }
  std::vector<int> local_ranks() const override { return {group_.rank}; }

  Status Prepare(const OpSpec& op) override {
    if (broken_) return Broken();
    op_ = op;
    const size_t n = static_cast<size_t>(group_.size);
    per_rank_ = static_cast<size_t>(op.bytes / 4 / n);
    const size_t in_count = op.kind == OpKind::kAllGather ? per_rank_ : per_rank_ * n;
    const size_t out_count = per_rank_ * n;
    if (op.kind == OpKind::kReduceScatter) {
      return Status::Unimplemented("gloo: the probe runs all_reduce and all_gather");
    }
    in_.assign(in_count, 0);
    out_.assign(out_count, 0);
    for (size_t j = 0; j < in_count; ++j) in_[j] = InputValue(group_.rank, j);
    return Status::Ok();
  }

  Status RunOnce(std::span<IterationSample> samples) override {
    if (broken_) return Broken();
    if (samples.size() != 1) return Status::InvalidArgument("gloo: one sample per call");
    IterationSample& s = samples[0];
    try {
      s.arrive_ns = RealClock::Get().MonotonicNanos();
      if (op_.kind == OpKind::kAllReduce) {
        gloo::AllreduceOptions opts(context_);
        opts.setInput(in_.data(), in_.size());
        opts.setOutput(out_.data(), out_.size());
        opts.setReduceFunction(&SumFloats);
        opts.setTimeout(op_.timeout);
        opts.setTag(tag_++);
        gloo::allreduce(opts);
      } else {
        gloo::AllgatherOptions opts(context_);
        opts.setInput(in_.data(), in_.size());
        opts.setOutput(out_.data(), out_.size());
        opts.setTimeout(op_.timeout);
        opts.setTag(tag_++);
        gloo::allgather(opts);
      }
      s.exit_ns = RealClock::Get().MonotonicNanos();
      s.op_seconds = static_cast<double>(s.exit_ns - s.arrive_ns) * 1e-9;
      return Status::Ok();
    } catch (const std::exception& e) {
      broken_ = true;
      error_ = std::string("gloo: ") + std::string(OpKindName(op_.kind)) + " on rank " +
               std::to_string(group_.rank) + " of group " + group_.group_id +
               " failed: " + e.what();
      SPDLOG_WARN(
          "component=collective backend=gloo msg=\"operation failed\" group={} rank={} "
          "error=\"{}\"",
          group_.group_id, group_.rank, e.what());
      return Status::Unavailable(error_);
    }
  }

  Status Verify() override {
    const size_t n = static_cast<size_t>(group_.size);
    for (size_t j = 0; j < out_.size(); ++j) {
      float want = 0;
      if (op_.kind == OpKind::kAllReduce) {
        for (size_t r = 0; r < n; ++r) want += InputValue(static_cast<int>(r), j);
      } else {
        want = InputValue(static_cast<int>(j / per_rank_), j % per_rank_);
      }
      if (out_[j] != want) {
        return Status::Internal("gloo: " + std::string(OpKindName(op_.kind)) + " output[" +
                                std::to_string(j) + "] is " + std::to_string(out_[j]) +
                                ", expected " + std::to_string(want));
      }
    }
    return Status::Ok();
  }

 private:
  // Small integers, so float sums stay exact for any group size the probe runs.
  static float InputValue(int rank, size_t j) {
    return static_cast<float>(rank % 64 + 1) + static_cast<float>(j % 13);
  }
  static void SumFloats(void* out, const void* a, const void* b, size_t n) {
    float* o = static_cast<float*>(out);
    const float* x = static_cast<const float*>(a);
    const float* y = static_cast<const float*>(b);
    for (size_t i = 0; i < n; ++i) o[i] = x[i] + y[i];
  }
  Status Broken() const {
    return Status::FailedPrecondition("gloo: communicator unusable after an error: " + error_);
  }

  const GroupSpec group_;
  std::shared_ptr<gloo::transport::Device> device_;
  std::shared_ptr<gloo::rendezvous::Context> context_;
  OpSpec op_;
  size_t per_rank_ = 0;
  std::vector<float> in_;
  std::vector<float> out_;
  uint32_t tag_ = 0;
  bool broken_ = false;
  std::string error_;
};

}  // namespace

StatusOr<std::unique_ptr<Communicator>> ConnectGloo(const GroupSpec& group, KvStore& kv,
                                                    const GlooOptions& options) {
  if (Status s = ValidateGroup(group); !s.ok()) return s;
  auto device = OpenDevice(options);
  if (!device.ok()) {
    SPDLOG_WARN("component=collective backend=gloo msg=\"no transport\" group={} error=\"{}\"",
                group.group_id, device.status().message());
    return device.status();
  }
  KvGlooStore store(kv, GroupKeyPrefix(group) + "gloo/", options.rendezvous_timeout);
  auto context = std::make_shared<gloo::rendezvous::Context>(group.rank, group.size);
  context->setTimeout(options.rendezvous_timeout);
  try {
    context->connectFullMesh(store, *device);
  } catch (const std::exception& e) {
    SPDLOG_WARN(
        "component=collective backend=gloo msg=\"rendezvous failed\" group={} rank={} "
        "error=\"{}\"",
        group.group_id, group.rank, e.what());
    return Status::Unavailable("gloo: rendezvous of rank " + std::to_string(group.rank) + " in " +
                               group.group_id + " failed: " + e.what());
  }
  return std::unique_ptr<Communicator>(
      std::make_unique<GlooCommunicator>(group, std::move(*device), std::move(context)));
}

}  // namespace fw::collective
