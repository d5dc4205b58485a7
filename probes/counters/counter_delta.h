// The change of one counter between two samples: wrap, saturation and reset aware.
#pragma once

#include <cstdint>
#include <optional>

#include "probes/counters/counter_spec.h"

namespace fw::counters {

enum class DeltaKind {
  kOk,         // plain increase (or no change)
  kWrapped,    // went down, read as one wrap at 2^32
  kReset,      // went down and cannot be a wrap: the counter was cleared; rate unknown
  kSaturated,  // stuck at its maximum: new events are invisible; rate unknown, not zero
  kFirst,      // no previous value yet
  kInvalid,    // this or the previous read failed
};

const char* DeltaKindName(DeltaKind kind);

struct Delta {
  DeltaKind kind = DeltaKind::kFirst;
  uint64_t raw = 0;  // the increase in raw units; meaningful for kOk and kWrapped
  bool known() const { return kind == DeltaKind::kOk || kind == DeltaKind::kWrapped; }
};

// Whether `value` shows a saturated counter. Known widths: the value is 2^width - 1. Unknown widths
// (hw_counters, data counters): the value sits at 2^8-1, 2^16-1 or 2^32-1 and did not move since
// `previous` (a single reading at such a value is more likely a real count).
bool IsSaturated(const CounterSpec& spec, uint64_t value, std::optional<uint64_t> previous);

// The delta from `previous` to `current`.
Delta ComputeDelta(const CounterSpec& spec, std::optional<uint64_t> previous, uint64_t current);

}  // namespace fw::counters
