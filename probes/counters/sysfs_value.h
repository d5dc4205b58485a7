// Parsers for the values in sysfs InfiniBand port files, and an allocation-free small-file read.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "common/status.h"

namespace fw::counters {

// A counter file: "123\n" → 123. "N/A (no PMA)" and other "N/A" texts → kUnavailable (the driver
// has no value); empty text, garbage, negative numbers or overflow → kInvalidArgument.
StatusOr<uint64_t> ParseCounterValue(std::string_view text);

// A state file: "4: ACTIVE" → {4, "ACTIVE"}; phys_state "5: LinkUp" likewise.
struct EnumValue {
  int id = -1;
  std::string_view name;  // points into the parsed text
};
StatusOr<EnumValue> ParseEnumValue(std::string_view text);

// A rate file: "400 Gb/sec (4X NDR)" → 400, "2.5 Gb/sec (1X SDR)" → 2.5, "0 GB/sec" → 0.
StatusOr<double> ParseRateGbps(std::string_view text);

// Outcome of reading one small sysfs file relative to a directory descriptor.
enum class ReadResult {
  kOk,
  kMissing,  // ENOENT: the file or its directory is gone (device vanished or never had it)
  kGone,     // ENODEV/ENXIO: the device was removed while the file was open
  kIoError,  // anything else (EIO from a failed MAD query, EACCES, ...)
};

// Reads at most `cap - 1` bytes of `name` under `dirfd` into `buf` and NUL-terminates it; sets
// `len`. No allocation. `err` receives errno on failure.
ReadResult ReadSmallFileAt(int dirfd, const char* name, char* buf, size_t cap, size_t& len,
                           int& err);

// As ReadSmallFileAt, for a file read again every pass: opens `name` under `dirfd` into `fd` when
// `fd` is -1, then reads it from offset 0 with pread (a sysfs attribute runs its show() again on
// every read at offset 0), which spares the open and close of each pass. On failure `fd` is closed
// and set to -1 and the result says why. sysfs fails the read of a removed attribute (ENODEV); a
// regular filesystem (test trees, copies) keeps serving a deleted file through an open descriptor,
// so with `check_unlinked` an unlinked file reads as kMissing (one fstat). With `keep` false the
// descriptor is closed after the read as well.
ReadResult RereadFileAt(int dirfd, const char* name, int& fd, bool keep, bool check_unlinked,
                        char* buf, size_t cap, size_t& len, int& err);

// Whether `fd` lies on sysfs (statfs magic), where RereadFileAt needs no unlink check.
bool IsOnSysfs(int fd);

}  // namespace fw::counters
