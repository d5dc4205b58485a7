// The Gloo backend of the collective probe: TCP transport everywhere, ibverbs where RDMA exists,
// rendezvous through a gloo::rendezvous::Store carried by the KvStore seam (the aggregator's
// key-value service in the agent; no Redis, no shared file system).
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "probes/collective/collective.h"
#include "probes/collective/kv_store.h"

namespace fw::collective {

enum class GlooTransport { kTcp, kIbverbs };

struct GlooOptions {
  GlooTransport transport = GlooTransport::kTcp;
  // TCP: the local address the member binds and announces (an IPv4 literal or a host name).
  std::string tcp_address = "127.0.0.1";
  // ibverbs: device name (empty: the first), port and GID index.
  std::string ibverbs_device;
  int ibverbs_port = 1;
  int ibverbs_index = 0;
  // Bound on the rendezvous: every member must publish its address within this time.
  std::chrono::milliseconds rendezvous_timeout{30000};
};

// Rendezvous with the other members of `group` through `kv` and connect the full mesh. Blocks up to
// options.rendezvous_timeout. Unavailable when a member does not arrive in time or the transport
// cannot be opened (no RDMA device for ibverbs); the error names the cause. Nothing is left running
// on failure.
StatusOr<std::unique_ptr<Communicator>> ConnectGloo(const GroupSpec& group, KvStore& kv,
                                                    const GlooOptions& options);

}  // namespace fw::collective
