// The agent's bounded outbound buffer: numbered batches kept until the aggregator acknowledges
// them.
#pragma once

#include <cstdint>
#include <deque>
#include <vector>

#include "common/mutex.h"
#include "fabricwatch.pb.h"

namespace fw::agent {

// Thread-safe. Producers Push(); the uplink takes unsent batches, and Ack() releases stored ones.
// When the buffer is full the oldest unacknowledged batch is dropped and counted: the agent keeps
// measuring, and the newest data is the most useful after an outage.
class OutboundBuffer {
 public:
  OutboundBuffer(size_t max_batches, size_t max_bytes)
      : max_batches_(max_batches), max_bytes_(max_bytes) {}

  // Assigns the next sequence number (from 1) and stores the batch. Returns the seq.
  uint64_t Push(fabricwatch::v1::ProbeBatch batch);
  // Releases every batch with seq <= `seq`.
  void Ack(uint64_t seq);
  // Up to `max` batches not yet sent on the current connection, in seq order; marks them sent.
  std::vector<fabricwatch::v1::ProbeBatch> TakeUnsent(size_t max);
  // After a reconnect: every unacknowledged batch must be sent again.
  void RewindForResend();

  size_t size() const;
  size_t bytes() const;
  uint64_t dropped() const;
  uint64_t acked() const;
  uint64_t next_seq() const;

 private:
  struct Entry {
    fabricwatch::v1::ProbeBatch batch;
    size_t bytes;
  };
  const size_t max_batches_;
  const size_t max_bytes_;
  mutable Mutex mu_;
  std::deque<Entry> entries_ FW_GUARDED_BY(mu_);  // ascending seq
  size_t bytes_ FW_GUARDED_BY(mu_) = 0;
  uint64_t next_seq_ FW_GUARDED_BY(mu_) = 1;
  uint64_t sent_through_ FW_GUARDED_BY(mu_) = 0;  // highest seq sent on this connection
  uint64_t acked_ FW_GUARDED_BY(mu_) = 0;
  uint64_t dropped_ FW_GUARDED_BY(mu_) = 0;
};

}  // namespace fw::agent
