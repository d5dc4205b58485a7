// Unmapping start-up code: see code_pages.h.
#include "common/code_pages.h"

#include <fcntl.h>
#include <link.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>
#include <optional>

#include <spdlog/spdlog.h>

namespace fw {
namespace {

std::string_view NextToken(std::string_view& s) {
  const size_t b = s.find_first_not_of(' ');
  if (b == std::string_view::npos) {
    s = {};
    return {};
  }
  s.remove_prefix(b);
  const size_t e = s.find(' ');
  const std::string_view t = s.substr(0, e);
  s.remove_prefix(e == std::string_view::npos ? s.size() : e);
  return t;
}

bool ParseHex(std::string_view s, uintptr_t& v) {
  if (s.empty()) return false;
  const auto r = std::from_chars(s.data(), s.data() + s.size(), v, 16);
  return r.ec == std::errc() && r.ptr == s.data() + s.size();
}

// The value of a "Key:   N kB" line, in bytes.
std::optional<uint64_t> KbValue(std::string_view rest) {
  const std::string_view n = NextToken(rest);
  uint64_t v = 0;
  const auto r = std::from_chars(n.data(), n.data() + n.size(), v);
  if (r.ec != std::errc() || r.ptr != n.data() + n.size() || v > (UINT64_MAX >> 10)) {
    return std::nullopt;
  }
  return v << 10;
}

struct Pending {
  CodeRange range;
  bool candidate = false;   // file-backed, not writable, not a device
  bool anon_known = false;  // an "Anonymous: 0 kB" line was seen
  bool anon_zero = false;
  bool special = false;     // VmFlags: I/O or PFN mapping, locked, or hugetlb
};

// VmFlags that madvise(MADV_DONTNEED) refuses or that are not page-cache pages: io (VM_IO),
// pf (VM_PFNMAP: device pages such as an RDMA NIC's clock page), lo (mlocked), ht (hugetlb).
bool SpecialVmFlags(std::string_view flags) {
  for (std::string_view t = NextToken(flags); !t.empty(); t = NextToken(flags)) {
    if (t == "io" || t == "pf" || t == "lo" || t == "ht") return true;
  }
  return false;
}

void Flush(Pending& p, std::vector<CodeRange>& out) {
  if (p.candidate && !p.special && p.anon_known && p.anon_zero && p.range.rss_bytes > 0) {
    out.push_back(std::move(p.range));
  }
  p = Pending{};
}

}  // namespace

Status ParseReleasableRanges(std::string_view smaps, std::vector<CodeRange>& out) {
  out.clear();
  Pending p;
  size_t line_no = 0;
  while (!smaps.empty()) {
    const size_t nl = smaps.find('\n');
    std::string_view line = smaps.substr(0, nl);
    smaps.remove_prefix(nl == std::string_view::npos ? smaps.size() : nl + 1);
    ++line_no;
    std::string_view rest = line;
    const std::string_view first = NextToken(rest);
    if (first.empty()) continue;
    if (first.back() == ':') {  // a field of the current mapping
      if (first == "VmFlags:") {
        p.special = p.special || SpecialVmFlags(rest);
        continue;
      }
      if (first == "Rss:" || first == "Anonymous:") {
        const std::optional<uint64_t> v = KbValue(rest);
        if (!v) {
          return Status::InvalidArgument("smaps line " + std::to_string(line_no) + ": bad " +
                                         std::string(first) + " value");
        }
        if (first == "Rss:") {
          p.range.rss_bytes = *v;
        } else {
          p.anon_known = true;
          p.anon_zero = *v == 0;
        }
      }
      continue;
    }
    // A mapping header: "start-end perms offset dev inode [path]".
    Flush(p, out);
    const size_t dash = first.find('-');
    uintptr_t start = 0, end = 0;
    if (dash == std::string_view::npos || !ParseHex(first.substr(0, dash), start) ||
        !ParseHex(first.substr(dash + 1), end) || end < start) {
      return Status::InvalidArgument("smaps line " + std::to_string(line_no) +
                                     ": bad mapping range");
    }
    const std::string_view perms = NextToken(rest);
    const std::string_view offset = NextToken(rest), dev = NextToken(rest), inode = NextToken(rest);
    if (perms.size() != 4 || offset.empty() || dev.empty() || inode.empty()) {
      return Status::InvalidArgument("smaps line " + std::to_string(line_no) +
                                     ": mapping header with too few fields");
    }
    const size_t path_at = rest.find_first_not_of(' ');
    const std::string_view path =
        path_at == std::string_view::npos ? std::string_view{} : rest.substr(path_at);
    p.range.start = start;
    p.range.end = end;
    // Device files (/dev/...: GPU and RDMA driver mappings) are not code even when read-only.
    p.candidate = perms[1] != 'w' && !path.empty() && path.front() == '/' &&
                  !path.starts_with("/dev/") && end > start;
    if (p.candidate) p.range.path = std::string(path);
  }
  Flush(p, out);
  return Status::Ok();
}

namespace {

Status ReadAll(const std::string& path, std::string& text) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::Unavailable("open " + path + ": " + std::strerror(errno));
  text.clear();
  char buf[16384];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n == 0) break;
    if (n < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      ::close(fd);
      return Status::Unavailable("read " + path + ": " + std::strerror(err));
    }
    text.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return Status::Ok();
}

struct ReleaseRun {
  const std::string* smaps_path;
  CodeReleaseResult* result;
  Status status;
  bool ran = false;
};

int ReleaseUnderLoaderLock(dl_phdr_info*, size_t, void* arg) {
  auto& run = *static_cast<ReleaseRun*>(arg);
  run.ran = true;
  std::string text;
  run.status = ReadAll(*run.smaps_path, text);
  if (!run.status.ok()) return 1;
  std::vector<CodeRange> ranges;
  run.status = ParseReleasableRanges(text, ranges);
  if (!run.status.ok()) return 1;
  for (const CodeRange& r : ranges) {
    if (::madvise(reinterpret_cast<void*>(r.start), r.end - r.start, MADV_DONTNEED) != 0) {
      const int err = errno;
      ++run.result->failures;
      spdlog::warn("msg=\"madvise(MADV_DONTNEED) of a code mapping failed\" path={} start={:#x} "
                   "bytes={} errno={} error=\"{}\"",
                   r.path, r.start, r.end - r.start, err, std::strerror(err));
      continue;
    }
    ++run.result->mappings;
    run.result->resident_bytes += r.rss_bytes;
  }
  return 1;  // once: the first object's callback does it all
}

}  // namespace

Status ReleaseCodePages(CodeReleaseResult& result, const std::string& smaps_path) {
  result = CodeReleaseResult{};
  ReleaseRun run{&smaps_path, &result, Status::Ok()};
  dl_iterate_phdr(ReleaseUnderLoaderLock, &run);
  if (!run.ran) return Status::Internal("dl_iterate_phdr listed no object");
  return run.status;
}

}  // namespace fw
