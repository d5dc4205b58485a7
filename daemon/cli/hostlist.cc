// Slurm hostlist expansion: tokens at top-level commas, bracket ranges multiplied out, bounded.
#include "daemon/cli/hostlist.h"

#include <cctype>
#include <cstdint>
#include <unordered_set>

namespace fw::cli {
namespace {

// Longest number a range bound may have: keeps every value and every span inside uint64_t.
constexpr size_t kMaxDigits = 18;

struct Range {
  uint64_t lo = 0, hi = 0;
  size_t width = 0;  // print at least this many digits (zero padding)
};

// A name template: literal pieces between bracket groups; pieces.size() == groups.size() + 1.
struct Template {
  std::vector<std::string> pieces{std::string()};
  std::vector<std::vector<Range>> groups;
};

bool NameChar(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.';
}

std::string At(size_t pos) { return "hostlist position " + std::to_string(pos + 1) + ": "; }

// Parses "N" or "N-M" from `s` (the text between two commas inside a bracket).
StatusOr<Range> ParseRange(std::string_view s, size_t pos) {
  const size_t dash = s.find('-');
  const std::string_view a = s.substr(0, dash);
  const std::string_view b = dash == std::string_view::npos ? a : s.substr(dash + 1);
  for (std::string_view part : {a, b}) {
    if (part.empty()) return Status::InvalidArgument(At(pos) + "empty number in range");
    if (part.size() > kMaxDigits) {
      return Status::InvalidArgument(At(pos) + "number longer than " + std::to_string(kMaxDigits) +
                                     " digits");
    }
    for (char c : part) {
      if (c < '0' || c > '9') {
        return Status::InvalidArgument(At(pos) + "'" + std::string(s) +
                                       "' is not a number or a range N-M");
      }
    }
  }
  Range r;
  r.lo = std::stoull(std::string(a));
  r.hi = std::stoull(std::string(b));
  r.width = a.size();
  if (r.lo > r.hi) {
    return Status::InvalidArgument(At(pos) + "range '" + std::string(s) + "' runs backwards");
  }
  return r;
}

// Parses one top-level token (no top-level commas or spaces) that starts at `base` in the input.
StatusOr<Template> ParseToken(std::string_view tok, size_t base, const HostlistLimits& limits) {
  Template t;
  size_t i = 0;
  while (i < tok.size()) {
    const char c = tok[i];
    if (c == '[') {
      const size_t close = tok.find(']', i + 1);
      if (close == std::string_view::npos) {
        return Status::InvalidArgument(At(base + i) + "'[' without a matching ']'");
      }
      const std::string_view inner = tok.substr(i + 1, close - i - 1);
      if (inner.find('[') != std::string_view::npos) {
        return Status::InvalidArgument(At(base + i) + "nested '['");
      }
      if (t.groups.size() == limits.max_brackets) {
        return Status::InvalidArgument(At(base + i) + "more than " +
                                       std::to_string(limits.max_brackets) +
                                       " bracket groups in one name");
      }
      std::vector<Range> group;
      size_t start = 0;
      while (true) {
        const size_t comma = inner.find(',', start);
        auto r =
            ParseRange(inner.substr(start, comma == std::string_view::npos ? std::string_view::npos
                                                                           : comma - start),
                       base + i + 1 + start);
        if (!r.ok()) return r.status();
        group.push_back(*r);
        if (comma == std::string_view::npos) break;
        start = comma + 1;
      }
      t.groups.push_back(std::move(group));
      t.pieces.emplace_back();
      i = close + 1;
    } else if (c == ']') {
      return Status::InvalidArgument(At(base + i) + "']' without a matching '['");
    } else if (NameChar(c)) {
      t.pieces.back() += c;
      ++i;
    } else {
      return Status::InvalidArgument(At(base + i) + "character '" + std::string(1, c) +
                                     "' cannot be part of a node name");
    }
  }
  return t;
}

std::string Pad(uint64_t v, size_t width) {
  std::string s = std::to_string(v);
  if (s.size() < width) s.insert(0, width - s.size(), '0');
  return s;
}

// Adds the names of `t` to `out` (skipping duplicates) while the set stays within the limits.
Status Expand(const Template& t, size_t base, const HostlistLimits& limits,
              std::vector<std::string>* out, std::unordered_set<std::string>* seen) {
  // Count first, so a huge set is refused before anything is built.
  uint64_t count = 1;
  for (const auto& g : t.groups) {
    uint64_t n = 0;
    for (const Range& r : g) {
      n += r.hi - r.lo + 1;
      if (n > limits.max_hosts) break;
    }
    count *= n;
    if (count > limits.max_hosts) break;
  }
  if (count > limits.max_hosts || out->size() + count > limits.max_hosts) {
    // Counted before duplicates are dropped: the bound is on the work of expanding the list.
    return Status::ResourceExhausted(At(base) + "the hostlist expands to more than " +
                                     std::to_string(limits.max_hosts) + " names");
  }
  // Odometer over one index per group: idx[g] walks the group's ranges, value[g] inside one.
  const size_t G = t.groups.size();
  std::vector<size_t> range_idx(G, 0);
  std::vector<uint64_t> value(G);
  for (size_t g = 0; g < G; ++g) value[g] = t.groups[g][0].lo;
  while (true) {
    std::string name = t.pieces[0];
    for (size_t g = 0; g < G; ++g) {
      name += Pad(value[g], t.groups[g][range_idx[g]].width);
      name += t.pieces[g + 1];
    }
    if (name.empty()) return Status::InvalidArgument(At(base) + "empty node name");
    if (name.size() > limits.max_name) {
      return Status::InvalidArgument(At(base) + "node name longer than " +
                                     std::to_string(limits.max_name) + " characters");
    }
    if (seen->insert(name).second) out->push_back(std::move(name));
    // Advance the last group first, so names come out in the order they are written.
    size_t g = G;
    while (g > 0) {
      --g;
      const Range& r = t.groups[g][range_idx[g]];
      if (value[g] < r.hi) {
        ++value[g];
        break;
      }
      if (range_idx[g] + 1 < t.groups[g].size()) {
        ++range_idx[g];
        value[g] = t.groups[g][range_idx[g]].lo;
        break;
      }
      range_idx[g] = 0;
      value[g] = t.groups[g][0].lo;
      if (g == 0) return Status::Ok();
    }
    if (G == 0) return Status::Ok();
  }
}

Status ExpandInto(std::string_view expr, size_t offset, const HostlistLimits& limits,
                  std::vector<std::string>* out, std::unordered_set<std::string>* seen) {
  size_t depth = 0, start = 0;
  for (size_t i = 0; i <= expr.size(); ++i) {
    const char c = i < expr.size() ? expr[i] : ',';
    if (c == '[') ++depth;
    if (c == ']') {
      if (depth == 0) return Status::InvalidArgument(At(offset + i) + "']' without a matching '['");
      --depth;
    }
    const bool sep = c == ',' || std::isspace(static_cast<unsigned char>(c));
    if (depth == 0 && sep) {
      if (i > start) {
        auto t = ParseToken(expr.substr(start, i - start), offset + start, limits);
        if (!t.ok()) return t.status();
        Status st = Expand(*t, offset + start, limits, out, seen);
        if (!st.ok()) return st;
      }
      start = i + 1;
    }
  }
  if (depth > 0) return Status::InvalidArgument(At(offset + start) + "'[' without a matching ']'");
  return Status::Ok();
}

}  // namespace

StatusOr<std::vector<std::string>> ExpandHostlist(std::string_view expr,
                                                  const HostlistLimits& limits) {
  if (expr.size() > limits.max_input) {
    return Status::InvalidArgument("hostlist of " + std::to_string(expr.size()) +
                                   " bytes is longer than the limit of " +
                                   std::to_string(limits.max_input));
  }
  std::vector<std::string> out;
  std::unordered_set<std::string> seen;
  Status st = ExpandInto(expr, 0, limits, &out, &seen);
  if (!st.ok()) return st;
  if (out.empty()) return Status::InvalidArgument("the hostlist names no nodes");
  return out;
}

StatusOr<std::vector<std::string>> ExpandHostlistFile(std::string_view contents,
                                                      const HostlistLimits& limits) {
  if (contents.size() > limits.max_input) {
    return Status::InvalidArgument("nodes file of " + std::to_string(contents.size()) +
                                   " bytes is longer than the limit of " +
                                   std::to_string(limits.max_input));
  }
  std::vector<std::string> out;
  std::unordered_set<std::string> seen;
  size_t line_start = 0, line_no = 1;
  while (line_start <= contents.size()) {
    size_t end = contents.find('\n', line_start);
    if (end == std::string_view::npos) end = contents.size();
    std::string_view line = contents.substr(line_start, end - line_start);
    const size_t hash = line.find('#');
    if (hash != std::string_view::npos) line = line.substr(0, hash);
    Status st = ExpandInto(line, line_start, limits, &out, &seen);
    if (!st.ok()) return Status(st.code(), "line " + std::to_string(line_no) + ": " + st.message());
    line_start = end + 1;
    ++line_no;
  }
  if (out.empty()) return Status::InvalidArgument("the nodes file names no nodes");
  return out;
}

}  // namespace fw::cli
