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

ResultQueue::ResultQueue(size_t capacity) : ring_(std::max<size_t>(capacity, 1)) {}

bool ResultQueue::TryPush(const ProbeResult& r) {
  MutexLock lock(mu_);
  if (count_ == ring_.size()) {
    ++dropped_;
    return false;
  }
  ring_[(head_ + count_) % ring_.size()] = r;
  ++count_;
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
