// Sysfs value parsing: strict, no allocation on success.
#include "probes/counters/sysfs_value.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cmath>
#include <string>

namespace fw::counters {
namespace {

std::string_view Trim(std::string_view s) {
  auto space = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\0'; };
  while (!s.empty() && space(s.front())) s.remove_prefix(1);
  while (!s.empty() && space(s.back())) s.remove_suffix(1);
  return s;
}

std::string Quote(std::string_view s) {
  constexpr size_t kMax = 40;
  std::string out = "'";
  for (char c : s.substr(0, kMax)) out += (c >= 0x20 && c < 0x7f) ? c : '?';
  if (s.size() > kMax) out += "...";
  return out + "'";
}

}  // namespace

StatusOr<uint64_t> ParseCounterValue(std::string_view text) {
  const std::string_view t = Trim(text);
  if (t.rfind("N/A", 0) == 0) return Status::Unavailable("counter not available: " + Quote(t));
  uint64_t v = 0;
  const auto [ptr, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
  if (t.empty() || ec == std::errc::invalid_argument || ptr != t.data() + t.size()) {
    return Status::InvalidArgument("not a counter value: " + Quote(t));
  }
  if (ec == std::errc::result_out_of_range) {
    return Status::InvalidArgument("counter value out of range: " + Quote(t));
  }
  return v;
}

StatusOr<EnumValue> ParseEnumValue(std::string_view text) {
  const std::string_view t = Trim(text);
  const size_t colon = t.find(':');
  if (colon == std::string_view::npos) {
    return Status::InvalidArgument("expected 'ID: NAME', got " + Quote(t));
  }
  const std::string_view id_text = Trim(t.substr(0, colon));
  EnumValue out;
  const auto [ptr, ec] = std::from_chars(id_text.data(), id_text.data() + id_text.size(), out.id);
  if (id_text.empty() || ec != std::errc() || ptr != id_text.data() + id_text.size() ||
      out.id < 0) {
    return Status::InvalidArgument("bad state id in " + Quote(t));
  }
  out.name = Trim(t.substr(colon + 1));
  return out;
}

StatusOr<double> ParseRateGbps(std::string_view text) {
  const std::string_view t = Trim(text);
  double v = 0;
  const auto [ptr, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
  if (t.empty() || ec != std::errc() || !std::isfinite(v) || v < 0) {
    return Status::InvalidArgument("not a rate: " + Quote(t));
  }
  const std::string_view unit = Trim(std::string_view(ptr, t.data() + t.size() - ptr));
  if (unit.rfind("Gb/sec", 0) != 0 && unit.rfind("GB/sec", 0) != 0) {
    return Status::InvalidArgument("rate not in Gb/sec: " + Quote(t));
  }
  return v;
}

ReadResult ReadSmallFileAt(int dirfd, const char* name, char* buf, size_t cap, size_t& len,
                           int& err) {
  int fd = -1;  // opened, read once and closed
  return RereadFileAt(dirfd, name, fd, /*keep=*/false, /*check_unlinked=*/false, buf, cap, len,
                      err);
}

ReadResult RereadFileAt(int dirfd, const char* name, int& fd, bool keep, bool check_unlinked,
                        char* buf, size_t cap, size_t& len, int& err) {
  len = 0;
  err = 0;
  if (cap == 0) return ReadResult::kIoError;
  auto drop = [&fd] {
    if (fd >= 0) close(fd);
    fd = -1;
  };
  if (fd < 0) {
    fd = openat(dirfd, name, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      err = errno;
      return err == ENOENT
                 ? ReadResult::kMissing
                 : (err == ENODEV || err == ENXIO ? ReadResult::kGone : ReadResult::kIoError);
    }
  }
  ssize_t n;
  do {
    n = pread(fd, buf, cap - 1, 0);
  } while (n < 0 && errno == EINTR);
  if (n < 0) {
    err = errno;
    buf[0] = '\0';
    drop();
    return err == ENODEV || err == ENXIO || err == ENOENT ? ReadResult::kGone
                                                          : ReadResult::kIoError;
  }
  struct stat st {};
  if (check_unlinked && fstat(fd, &st) == 0 && st.st_nlink == 0) {
    err = ENOENT;
    buf[0] = '\0';
    drop();
    return ReadResult::kMissing;
  }
  len = static_cast<size_t>(n);
  buf[len] = '\0';
  if (!keep) drop();
  return ReadResult::kOk;
}

bool IsOnSysfs(int fd) {
  constexpr long kSysfsMagic = 0x62656572;  // SYSFS_MAGIC, linux/magic.h
  struct statfs sfs {};
  return fd >= 0 && fstatfs(fd, &sfs) == 0 && static_cast<long>(sfs.f_type) == kSysfsMagic;
}

}  // namespace fw::counters
