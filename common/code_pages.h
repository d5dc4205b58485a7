// Giving back the pages of code a daemon ran once (docs/performance.md, "Cut: code run only at
// start is unmapped").
//
// RSS counts every page mapped into the process. A daemon's binary and libraries are mapped from
// files, and the kernel maps pages around each one that faults (fault-around, readahead), so the
// code and read-only data run once at start (static initializers, library set-up, the first
// connection's TLS and HTTP/2 paths, configuration parsing) stay mapped and counted for the
// process's life although nothing touches them again. Unmapping them (MADV_DONTNEED) costs nothing
// to correctness: they are clean copies of the file, and the next access maps the page cache's
// copy back (a minor fault). The pages the steady state runs fault back within a second; the rest
// stay unmapped, which is what lets the kernel reclaim them under memory pressure.
//
// Only mappings that can hold nothing but the file's bytes are touched: file-backed, not writable,
// and with no anonymous (copy-on-write) page. That excludes data and .bss, the RELRO pages the
// dynamic loader relocated before making them read-only, and text a debugger or uprobe patched.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace fw {

// One mapping of /proc/PID/smaps that may be released, with what it had resident.
struct CodeRange {
  uintptr_t start = 0;
  uintptr_t end = 0;        // exclusive
  uint64_t rss_bytes = 0;   // resident when read
  std::string path;
};

// The mappings of smaps text that hold only a file's bytes: a path that starts with '/' and not
// with "/dev/" (driver mappings), no 'w' permission, "Anonymous: 0 kB" (a mapping whose Anonymous
// line is missing is left out too: nothing proves it clean), and none of the VmFlags io, pf, lo,
// ht. Mappings with nothing resident are left out (nothing to give back).
// InvalidArgument when a mapping header is malformed (bad range, end before start, too few
// fields); other lines it does not know are skipped, as new kernels add fields.
Status ParseReleasableRanges(std::string_view smaps, std::vector<CodeRange>& out);

struct CodeReleaseResult {
  size_t mappings = 0;          // mappings released
  uint64_t resident_bytes = 0;  // what they had resident just before
  size_t failures = 0;          // madvise calls that failed (logged with errno)
};

// Unmaps the resident pages of this process's releasable mappings (ParseReleasableRanges over
// /proc/self/smaps). Runs under the dynamic loader's lock (inside dl_iterate_phdr), so that no
// library is being loaded and relocated meanwhile. Error when smaps cannot be read or parsed;
// a failed madvise is counted in `failures` and the others still run.
Status ReleaseCodePages(CodeReleaseResult& result, const std::string& smaps_path = "/proc/self/smaps");

}  // namespace fw
