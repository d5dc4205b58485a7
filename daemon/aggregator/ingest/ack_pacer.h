// Which durable acks the committer sends now and which wait (docs/durability.md, "Acks per
// stream").
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <optional>
#include <unordered_map>
#include <utility>
#include <vector>

namespace fw::aggregator {

// Acks are cumulative ("every batch with seq <= this is stored") and an agent sends its batches
// without waiting for them (an ack only releases its buffer), so a stream needs one ack for several
// batches, not one each. An ack message costs the aggregator a gRPC write, a sendmsg and its
// completion, and the agent a read and a wakeup, whatever it covers.
//
// The committer Adds every ack its commit made durable; per stream they fold into one held ack (the
// highest seq). A held ack is due, and TakeDue hands it out once, when:
//   - `batches` batches wait in it (a client may hold a window of unacknowledged batches; fw_sim
//     holds 4: acking at half of it keeps such a window open),
//   - one of them was Added as immediate (the session's resume point: the agent sends no batch
//     before it),
//   - or `delay` has passed since the oldest of them was Added (the most an ack waits).
// Nothing is promised that is not durable: only what was Added, after its commit, is handed out.
//
// `Handle` is a copyable owning handle (a shared_ptr) whose get() identifies the stream while an ack
// of it is held. Not thread-safe: the committer's thread alone uses it.
template <typename Handle>
class AckPacer {
 public:
  using Clock = std::chrono::steady_clock;

  AckPacer(Clock::duration delay, uint32_t batches) : delay_(delay), batches_(batches) {}

  // Folds one durable ack of `stream` (one batch, or the resume point with `immediate`) into its
  // held ack, at `now`.
  void Add(const Handle& stream, uint64_t seq, bool immediate, Clock::time_point now) {
    auto [it, fresh] = held_.try_emplace(stream.get());
    Held& h = it->second;
    if (fresh) {
      h.stream = stream;
      h.since = now;
      h.generation = ++generation_;
      by_age_.push_back({stream.get(), h.generation});
    }
    if (seq > h.seq) h.seq = seq;
    ++h.batches;
    if ((immediate || h.batches >= batches_) && !h.ready) {
      h.ready = true;
      ready_.push_back(stream.get());
    }
  }

  // Appends (stream, seq) for every held ack due at `now` and forgets them.
  void TakeDue(Clock::time_point now, std::vector<std::pair<Handle, uint64_t>>& out) {
    for (const void* key : ready_) Emit(key, out);
    ready_.clear();
    while (!by_age_.empty()) {
      const auto [key, generation] = by_age_.front();
      auto it = held_.find(key);
      if (it != held_.end() && it->second.generation == generation) {
        if (now < it->second.since + delay_) break;  // the oldest held ack is not due yet
        Emit(key, out);
      }
      by_age_.pop_front();  // sent, or an entry of an ack already sent
    }
  }

  // Appends every held ack (the committer stops; each is durable) and forgets them.
  void TakeAll(std::vector<std::pair<Handle, uint64_t>>& out) {
    for (auto& [key, h] : held_) out.emplace_back(std::move(h.stream), h.seq);
    held_.clear();
    ready_.clear();
    by_age_.clear();
  }

  // When the oldest held ack falls due by age; nullopt when none is held. (One Added as due sooner
  // is handed out by the TakeDue that follows the Add.)
  std::optional<Clock::time_point> NextDue() {
    while (!by_age_.empty()) {
      auto it = held_.find(by_age_.front().first);
      if (it != held_.end() && it->second.generation == by_age_.front().second) {
        return it->second.since + delay_;
      }
      by_age_.pop_front();
    }
    return std::nullopt;
  }

  size_t held() const { return held_.size(); }

 private:
  struct Held {
    Handle stream;
    uint64_t seq = 0;
    uint32_t batches = 0;
    bool ready = false;  // due by count or immediacy, listed in ready_
    Clock::time_point since;
    uint64_t generation = 0;  // tells this hold's entry in by_age_ from an earlier hold's
  };

  void Emit(const void* key, std::vector<std::pair<Handle, uint64_t>>& out) {
    auto it = held_.find(key);
    if (it == held_.end()) return;
    out.emplace_back(std::move(it->second.stream), it->second.seq);
    held_.erase(it);
  }

  const Clock::duration delay_;
  const uint32_t batches_;
  uint64_t generation_ = 0;
  std::unordered_map<const void*, Held> held_;
  std::vector<const void*> ready_;
  std::deque<std::pair<const void*, uint64_t>> by_age_;  // (stream, generation), oldest first
};

}  // namespace fw::aggregator
