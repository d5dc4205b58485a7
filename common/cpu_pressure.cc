// /proc/pressure/cpu and schedstat parsing, and the stall shares of an interval.
#include "common/cpu_pressure.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>

namespace fw {
namespace {

bool IsSpace(char c) { return c == ' ' || c == '\t' || c == '\n'; }

// One decimal field that must end at `end` or at a space.
bool ParseU64(std::string_view field, uint64_t& out) {
  if (field.empty()) return false;
  auto [p, ec] = std::from_chars(field.data(), field.data() + field.size(), out);
  return ec == std::errc() && p == field.data() + field.size();
}

}  // namespace

Status ParsePressureSomeTotal(std::string_view text, uint64_t& total_us) {
  size_t at = text.substr(0, 5) == "some " ? 0 : text.find("\nsome ");
  if (at == std::string_view::npos)
    return Status::InvalidArgument("cpu pressure: no \"some\" line");
  if (text[at] == '\n') ++at;
  std::string_view line = text.substr(at + 5);
  line = line.substr(0, line.find('\n'));
  // "avg10=0.00 avg60=0.00 avg300=0.00 total=123": the fields in any order.
  size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && IsSpace(line[i])) ++i;
    size_t j = i;
    while (j < line.size() && !IsSpace(line[j])) ++j;
    const std::string_view field = line.substr(i, j - i);
    if (field.substr(0, 6) == "total=") {
      if (!ParseU64(field.substr(6), total_us)) {
        return Status::InvalidArgument("cpu pressure: \"total=\" is not a 64-bit decimal");
      }
      return Status::Ok();
    }
    i = j;
  }
  return Status::InvalidArgument("cpu pressure: the \"some\" line has no \"total=\"");
}

Status ParseSchedstatRunDelay(std::string_view text, uint64_t& run_delay_ns) {
  size_t i = 0;
  for (int field = 0; field < 2; ++field) {
    while (i < text.size() && IsSpace(text[i])) ++i;
    size_t j = i;
    while (j < text.size() && !IsSpace(text[j])) ++j;
    uint64_t v = 0;
    if (!ParseU64(text.substr(i, j - i), v)) {
      return Status::InvalidArgument("schedstat: fewer than 2 decimal fields");
    }
    if (field == 1) run_delay_ns = v;
    i = j;
  }
  return Status::Ok();
}

double StallShare(uint64_t stall0_ns, uint64_t stall1_ns, int64_t wall_ns) {
  if (wall_ns < kMinPressureWallNs || stall1_ns < stall0_ns) return -1;
  // Both counters and the caller's clock are read a few microseconds apart: a stall that covers
  // the whole interval can read slightly over it.
  return std::min(1.0, static_cast<double>(stall1_ns - stall0_ns) / static_cast<double>(wall_ns));
}

CpuPressureMeter::CpuPressureMeter(std::string pressure_path, std::string schedstat_path)
    : pressure_path_(std::move(pressure_path)), schedstat_path_(std::move(schedstat_path)) {}

bool CpuPressureMeter::Read(Which which, uint64_t& value) {
  const bool pressure = which == Which::kPressure;
  bool& absent = pressure ? pressure_absent_ : schedstat_absent_;
  if (absent) return false;
  const std::string& path = pressure ? pressure_path_ : schedstat_path_;
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    // Absent is a property of the kernel, not a failure: remembered, never retried.
    if (errno == ENOENT || errno == ENOTDIR || errno == EOPNOTSUPP) {
      absent = true;
    } else {
      ++failures_;
    }
    return false;
  }
  // Both files are one or two short lines: one read fills them (more is ignored by the parsers).
  ssize_t n;
  do {
    n = read(fd, buffer_, sizeof buffer_);
  } while (n < 0 && errno == EINTR);
  const int err = n < 0 ? errno : 0;
  close(fd);
  if (n < 0) {
    if (err == EOPNOTSUPP) {
      absent = true;  // a PSI file whose accounting is off (psi=0, cgroup without it)
    } else {
      ++failures_;
    }
    return false;
  }
  const std::string_view text(buffer_, static_cast<size_t>(n));
  Status s;
  if (pressure) {
    uint64_t us = 0;
    s = ParsePressureSomeTotal(text, us);
    if (s.ok() && us > UINT64_MAX / 1000)
      s = Status::InvalidArgument("cpu pressure: total overflows");
    value = us * 1000;
  } else {
    s = ParseSchedstatRunDelay(text, value);
  }
  if (!s.ok()) ++failures_;
  return s.ok();
}

void CpuPressureMeter::Start(int64_t mono_ns) {
  start_ns_ = mono_ns;
  some_started_ = Read(Which::kPressure, some0_ns_);
  wait_started_ = Read(Which::kSchedstat, wait0_ns_);
}

CpuPressure CpuPressureMeter::Stop(int64_t mono_ns) {
  CpuPressure p;
  uint64_t v = 0;
  if (some_started_ && Read(Which::kPressure, v))
    p.some = StallShare(some0_ns_, v, mono_ns - start_ns_);
  if (wait_started_ && Read(Which::kSchedstat, v)) {
    p.thread_wait = StallShare(wait0_ns_, v, mono_ns - start_ns_);
  }
  some_started_ = wait_started_ = false;
  return p;
}

}  // namespace fw
