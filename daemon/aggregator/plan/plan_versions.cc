// Plan versions across restarts: a persisted millisecond epoch and a re-plan counter.
#include "daemon/aggregator/plan/plan_versions.h"

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "common/log.h"

namespace fw::aggregator {

StatusOr<PlanVersions> PlanVersions::Start(const std::string& state_dir, int64_t wall_ns) {
  if (wall_ns < 0 || static_cast<uint64_t>(wall_ns / 1'000'000) >= kMaxEpochMs) {
    return Status::FailedPrecondition(
        "wall clock out of range for plan versions: " + std::to_string(wall_ns) + " ns since 1970");
  }
  const uint64_t now_ms = static_cast<uint64_t>(wall_ns / 1'000'000);
  PlanVersions v(state_dir.empty() ? "" : state_dir + "/plan_epoch", now_ms);
  if (!v.path_.empty()) {
    std::ifstream in(v.path_);
    if (in) {
      std::string text(std::istreambuf_iterator<char>(in), {});
      while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
      uint64_t last = 0;
      const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), last);
      if (ec != std::errc() || end != text.data() + text.size() || text.empty() ||
          last >= kMaxEpochMs - 1) {
        v.quarantined_ = QuarantineFile(
            v.path_, "not an epoch in milliseconds: " + LogQuote(text.substr(0, 40)), wall_ns);
      } else if (last >= now_ms) {
        spdlog::warn(
            "msg=\"wall clock is behind the last plan epoch; continuing after it\" "
            "last_epoch_ms={} now_ms={}",
            last, now_ms);
        v.epoch_ms_ = last + 1;
      }
    }
    v.Persist();
  }
  return v;
}

uint64_t PlanVersions::Next(int64_t wall_ns) {
  if (counter_ + 1 >= (uint64_t{1} << kCounterBits)) {
    const uint64_t now_ms = wall_ns > 0 ? static_cast<uint64_t>(wall_ns / 1'000'000) : 0;
    epoch_ms_ = std::min(std::max(epoch_ms_ + 1, now_ms), kMaxEpochMs);
    counter_ = 0;
    Persist();
  }
  return (epoch_ms_ << kCounterBits) | ++counter_;
}

void PlanVersions::Persist() {
  if (path_.empty()) return;
  const std::string tmp = path_ + ".tmp";
  std::ofstream out(tmp, std::ios::trunc);
  out << epoch_ms_ << '\n';
  out.close();
  std::error_code ec;
  if (out) std::filesystem::rename(tmp, path_, ec);
  if ((!out || ec) && !persist_failed_logged_) {
    persist_failed_logged_ = true;
    spdlog::warn(
        "msg=\"cannot save the plan epoch; plan versions rely on the wall clock alone\" file={}",
        path_);
  }
}

}  // namespace fw::aggregator
