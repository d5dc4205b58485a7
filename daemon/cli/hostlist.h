// Slurm hostlist expressions ("gpu[001-016,020],dgx-a[1-2]") expanded to node names, bounded.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace fw::cli {

struct HostlistLimits {
  // The most names one expansion may produce; a larger set is refused, not truncated, so that a
  // typo like "gpu[1-999999]" never becomes a million-node qualification.
  size_t max_hosts = 4096;
  // The longest expression accepted (bytes), and the longest name it may produce.
  size_t max_input = 64 * 1024;
  size_t max_name = 255;
  // Brackets per name ("rack[1-4]-gpu[01-08]" has two).
  size_t max_brackets = 4;
};

// Expands a hostlist as Slurm writes it (`scontrol show hostnames` semantics):
// - names are separated by commas (or whitespace) outside brackets;
// - "prefix[RANGES]suffix", RANGES a comma list of "N" or "N-M" (N <= M), several brackets per
//   name multiply out left to right;
// - zero padding: a range whose bound is written with leading zeros ("001-016") pads every number
//   to that width, as Slurm does.
// Names keep their first-seen order; duplicates are dropped. Fails with kInvalidArgument naming
// the position and the problem (unbalanced bracket, empty range, reversed range, bad character,
// nested bracket), or kResourceExhausted when the set would exceed `limits.max_hosts`.
StatusOr<std::vector<std::string>> ExpandHostlist(std::string_view expr,
                                                  const HostlistLimits& limits = {});

// A --nodes-file: one or more hostlist expressions per line, whitespace-separated; '#' starts a
// comment. The same limits hold for the whole file together.
StatusOr<std::vector<std::string>> ExpandHostlistFile(std::string_view contents,
                                                      const HostlistLimits& limits = {});

}  // namespace fw::cli
