// Bounded, acknowledged outbound buffer.
#include "daemon/agent/outbound_buffer.h"

namespace fw::agent {

uint64_t OutboundBuffer::Push(fabricwatch::v1::ProbeBatch batch) {
  MutexLock lock(mu_);
  uint64_t seq = next_seq_++;
  batch.set_seq(seq);
  size_t b = batch.ByteSizeLong();
  entries_.push_back(Entry{std::move(batch), b});
  bytes_ += b;
  while (entries_.size() > 1 && (entries_.size() > max_batches_ || bytes_ > max_bytes_)) {
    bytes_ -= entries_.front().bytes;
    entries_.pop_front();
    ++dropped_;
  }
  return seq;
}

void OutboundBuffer::Ack(uint64_t seq) {
  MutexLock lock(mu_);
  if (seq > acked_) acked_ = seq;
  while (!entries_.empty() && entries_.front().batch.seq() <= seq) {
    bytes_ -= entries_.front().bytes;
    entries_.pop_front();
  }
}

std::vector<fabricwatch::v1::ProbeBatch> OutboundBuffer::TakeUnsent(size_t max) {
  MutexLock lock(mu_);
  std::vector<fabricwatch::v1::ProbeBatch> out;
  for (const Entry& e : entries_) {
    if (out.size() >= max) break;
    if (e.batch.seq() <= sent_through_) continue;
    out.push_back(e.batch);
    sent_through_ = e.batch.seq();
  }
  return out;
}

void OutboundBuffer::RewindForResend() {
  MutexLock lock(mu_);
  sent_through_ = acked_;
}

size_t OutboundBuffer::size() const {
  MutexLock lock(mu_);
  return entries_.size();
}
size_t OutboundBuffer::bytes() const {
  MutexLock lock(mu_);
  return bytes_;
}
uint64_t OutboundBuffer::dropped() const {
  MutexLock lock(mu_);
  return dropped_;
}
uint64_t OutboundBuffer::acked() const {
  MutexLock lock(mu_);
  return acked_;
}
uint64_t OutboundBuffer::next_seq() const {
  MutexLock lock(mu_);
  return next_seq_;
}

}  // namespace fw::agent
