// /proc/stat parsing and the busy shares of an interval.
#include "common/cpu_busy.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>

namespace fw {
namespace {

// Field order of a CPU line (proc(5)): user nice system idle iowait irq softirq steal guest
// guest_nice. Kernels before 2.6.11 stop after fewer fields; missing ones count as 0.
constexpr size_t kMinFields = 4;
constexpr size_t kMaxFields = 10;

bool IsSpace(char c) { return c == ' ' || c == '\t'; }

// Parses the numbers after a CPU line's label. Returns false on a malformed field.
bool ParseTimes(std::string_view rest, CpuTimes& out) {
  uint64_t f[kMaxFields] = {};
  size_t n = 0;
  size_t i = 0;
  while (i < rest.size()) {
    while (i < rest.size() && IsSpace(rest[i])) ++i;
    if (i == rest.size()) break;
    size_t j = i;
    while (j < rest.size() && !IsSpace(rest[j])) ++j;
    uint64_t v = 0;
    const char* end = rest.data() + j;
    auto [p, ec] = std::from_chars(rest.data() + i, end, v);
    if (ec != std::errc() || p != end) return false;
    if (n < kMaxFields) f[n] = v;  // later kernels may add fields: ignored
    ++n;
    i = j;
  }
  if (n < kMinFields) return false;
  // busy = user + nice + system + irq + softirq + steal; idle = idle + iowait.
  const uint64_t parts_busy[] = {f[0], f[1], f[2], f[5], f[6], f[7]};
  uint64_t busy = 0;
  for (uint64_t v : parts_busy) {
    if (__builtin_add_overflow(busy, v, &busy)) return false;
  }
  uint64_t total = busy;
  if (__builtin_add_overflow(total, f[3], &total) || __builtin_add_overflow(total, f[4], &total)) {
    return false;
  }
  out = CpuTimes{busy, total};
  return true;
}

double Share(uint64_t busy0, uint64_t total0, uint64_t busy1, uint64_t total1, uint64_t min) {
  if (total1 < total0 || total1 - total0 < std::max<uint64_t>(min, 1) || busy1 < busy0) return -1;
  const double share = static_cast<double>(busy1 - busy0) / static_cast<double>(total1 - total0);
  return std::clamp(share, 0.0, 1.0);
}

}  // namespace

Status ParseProcStat(std::string_view text, CpuSnapshot& out, size_t max_cpus) {
  size_t cpus = 0;
  bool have_all = false;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t eol = text.find('\n', pos);
    if (eol == std::string_view::npos) eol = text.size();
    const std::string_view line = text.substr(pos, eol - pos);
    pos = eol + 1;
    if (line.size() < 3 || line.substr(0, 3) != "cpu") {
      if (!have_all) return Status::InvalidArgument("/proc/stat: the first line is not \"cpu\"");
      break;  // the CPU lines come first; the rest (intr, ctxt, ...) is not needed
    }
    size_t label = 3;
    while (label < line.size() && line[label] >= '0' && line[label] <= '9') ++label;
    if (label < line.size() && !IsSpace(line[label])) {
      return Status::InvalidArgument("/proc/stat: a malformed CPU label");
    }
    const bool aggregate = label == 3;
    if (aggregate == have_all) {
      return Status::InvalidArgument(aggregate ? "/proc/stat: a second aggregate \"cpu\" line"
                                               : "/proc/stat: a \"cpuN\" line before \"cpu\"");
    }
    CpuTimes t;
    if (!ParseTimes(line.substr(label), t)) {
      return Status::InvalidArgument("/proc/stat: a CPU line without 4 decimal fields");
    }
    if (aggregate) {
      out.all = t;
      have_all = true;
      continue;
    }
    if (cpus == max_cpus) return Status::InvalidArgument("/proc/stat: too many CPU lines");
    if (cpus == out.cpus.size()) out.cpus.emplace_back();
    out.cpus[cpus++] = t;
  }
  if (!have_all) return Status::InvalidArgument("/proc/stat: no aggregate \"cpu\" line");
  out.cpus.resize(cpus);
  return Status::Ok();
}

CpuBusy BusyBetween(const CpuSnapshot& before, const CpuSnapshot& after) {
  CpuBusy b;
  b.all = Share(before.all.busy, before.all.total, after.all.busy, after.all.total, kMinAllUnits);
  if (b.all < 0 || before.cpus.size() != after.cpus.size()) return b;
  for (size_t i = 0; i < after.cpus.size(); ++i) {
    const CpuTimes& x = before.cpus[i];
    const CpuTimes& y = after.cpus[i];
    b.busiest = std::max(b.busiest, Share(x.busy, x.total, y.busy, y.total, kMinCpuUnits));
  }
  // The busiest CPU is at least as busy as all of them together. CPUs under the resolution are
  // skipped above, so without this the busiest of the rest can read below the mean.
  if (b.busiest >= 0) b.busiest = std::max(b.busiest, b.all);
  return b;
}

uint32_t BusyPermille(double share) {
  if (!(share >= 0)) return 0;
  return static_cast<uint32_t>(std::clamp(std::lround(share * 1000.0), 1L, 1000L));
}

double BusyShare(uint32_t permille) {
  if (permille == 0 || permille > 1000) return -1;
  return permille / 1000.0;
}

CpuBusyMeter::CpuBusyMeter(std::string path) : path_(std::move(path)) {}

Status CpuBusyMeter::Read(CpuSnapshot& into) {
  const int fd = open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::Unavailable(path_ + ": " + std::strerror(errno));
  if (buffer_.size() < 4096) buffer_.resize(4096);
  size_t got = 0;
  for (;;) {
    if (got == buffer_.size()) buffer_.resize(buffer_.size() * 2);
    const ssize_t n = read(fd, buffer_.data() + got, buffer_.size() - got);
    if (n < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      close(fd);
      return Status::Unavailable(path_ + ": " + std::strerror(err));
    }
    if (n == 0) break;
    got += static_cast<size_t>(n);
  }
  close(fd);
  return ParseProcStat(std::string_view(buffer_.data(), got), into);
}

Status CpuBusyMeter::Start() {
  Status s = Read(start_);
  started_ = s.ok();
  if (!s.ok()) ++failures_;
  return s;
}

CpuBusy CpuBusyMeter::Stop() {
  if (!started_) return CpuBusy{};
  started_ = false;
  if (!Read(end_).ok()) {
    ++failures_;
    return CpuBusy{};
  }
  return BusyBetween(start_, end_);
}

}  // namespace fw
