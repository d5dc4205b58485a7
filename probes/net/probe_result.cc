// ProbeResult helpers and the bounded result queue.
#include "probes/net/probe_result.h"

#include <algorithm>
#include <cstring>

namespace fw::net {

std::string_view TransportName(Transport t) {
  switch (t) {
    case Transport::kUdp:
      return "udp";
    case Transport::kTcpConnect:
      return "tcp_connect";
    case Transport::kTcpBw:
      return "tcp_bw";
    case Transport::kRdmaUd:
      return "rdma_ud";
    case Transport::kRdmaRc:
      return "rdma_rc";
    case Transport::kCollective:
      return "collective";
  }
  return "unknown";
}

void ProbeResult::SetPeer(std::string_view name) {
  size_t n = std::min(name.size(), kPeerNameMax);
  std::memcpy(peer.data(), name.data(), n);
  peer[n] = '\0';
}

// The ring's whole capacity is reserved up front (address space only: untouched pages cost no
// RSS) and its used part grows by doubling while the backlog outgrows it. An agent keeps a
// 65,536-entry queue for uplink stalls (about 9 MiB) but holds a few hundred results in steady
// state; the resident part is what the backlog ever reached.
ResultQueue::ResultQueue(size_t capacity) { ring_.reserve(std::max<size_t>(capacity, 1)); }

bool ResultQueue::TryPush(const ProbeResult& r) {
  {
    MutexLock lock(mu_);
    if (count_ == ring_.size()) {
      if (ring_.size() == ring_.capacity()) {
        ++dropped_;
        return false;
      }
      // Full at the current size: put the oldest first, then grow within the reservation (no
      // reallocation, so the ring's storage never moves).
      std::rotate(ring_.begin(), ring_.begin() + static_cast<std::ptrdiff_t>(head_), ring_.end());
      head_ = 0;
      ring_.resize(std::min(ring_.capacity(), std::max<size_t>(64, 2 * ring_.size())));
    }
    ring_[(head_ + count_) % ring_.size()] = r;
    ++count_;
  }
  if (push_hook_) push_hook_(r);
  return true;
}

size_t ResultQueue::PopBatch(std::vector<ProbeResult>& out, size_t max) {
  MutexLock lock(mu_);
  size_t n = std::min(max, count_);
  for (size_t i = 0; i < n; ++i) {
    out.push_back(ring_[head_]);
    head_ = (head_ + 1) % ring_.size();
  }
  count_ -= n;
  return n;
}

size_t ResultQueue::size() const {
  MutexLock lock(mu_);
  return count_;
}

uint64_t ResultQueue::dropped() const {
  MutexLock lock(mu_);
  return dropped_;
}

}  // namespace fw::net
