// Probe plan versions that keep growing across aggregator restarts, because agents apply only a
// plan whose version is newer than the one they hold.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "common/state_file.h"
#include "common/status.h"

namespace fw::aggregator {

// version = epoch << kCounterBits | counter. The epoch is the wall clock in milliseconds at start,
// raised past the last epoch persisted in `<state_dir>/plan_epoch` when there is a state dir (so a
// clock that stepped back across a restart cannot reuse versions); the counter counts re-plans.
// The wire format is unchanged: ProbePlan.version stays one uint64.
//
// Why not persist the last version itself: that needs a write per re-plan, and still breaks when
// the state dir is lost. A millisecond epoch needs one write per start, and with no state dir the
// wall clock alone keeps versions growing unless it steps back across a restart.
//
// Not thread-safe: the aggregator calls Next() under its plan mutex.
class PlanVersions {
 public:
  static constexpr int kCounterBits = 22;  // 4.2 million re-plans; at most one a second: 48 days
  static constexpr uint64_t kMaxEpochMs = (uint64_t{1} << (64 - kCounterBits)) - 1;  // year 2109

  // Picks the epoch and, with a state dir, persists it. A plan_epoch file that does not hold a
  // number is moved aside (quarantined() says so) and the wall clock used. Fails only when the
  // wall clock is out of range (before 1970 or after 2109).
  static StatusOr<PlanVersions> Start(const std::string& state_dir, int64_t wall_ns);

  // The next version, strictly greater than every one returned before by this or an earlier
  // process with the same state dir. When the counter runs out, the epoch moves to
  // max(epoch + 1, now) and is persisted again.
  uint64_t Next(int64_t wall_ns);

  uint64_t epoch_ms() const { return epoch_ms_; }
  const std::optional<QuarantinedFile>& quarantined() const { return quarantined_; }

 private:
  PlanVersions(std::string path, uint64_t epoch_ms) : path_(std::move(path)), epoch_ms_(epoch_ms) {}
  void Persist();  // best effort: logs a failure once; the wall clock still protects

  std::string path_;  // "" without a state dir
  uint64_t epoch_ms_ = 0;
  uint64_t counter_ = 0;
  bool persist_failed_logged_ = false;
  std::optional<QuarantinedFile> quarantined_;
};

}  // namespace fw::aggregator
