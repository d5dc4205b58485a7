// Delta rules; see counter_spec.h for where the widths come from.
#include "probes/counters/counter_delta.h"

namespace fw::counters {

const char* DeltaKindName(DeltaKind kind) {
  switch (kind) {
    case DeltaKind::kOk:
      return "ok";
    case DeltaKind::kWrapped:
      return "wrapped";
    case DeltaKind::kReset:
      return "reset";
    case DeltaKind::kSaturated:
      return "saturated";
    case DeltaKind::kFirst:
      return "first";
    case DeltaKind::kInvalid:
      return "invalid";
  }
  return "invalid";
}

bool IsSaturated(const CounterSpec& spec, uint64_t value, std::optional<uint64_t> previous) {
  if (spec.width > 0) return value == MaxForWidth(spec.width);
  const bool at_max =
      value == MaxForWidth(8) || value == MaxForWidth(16) || value == MaxForWidth(32);
  return at_max && previous && *previous == value;
}

Delta ComputeDelta(const CounterSpec& spec, std::optional<uint64_t> previous, uint64_t current) {
  Delta d;
  if (IsSaturated(spec, current, previous)) {
    d.kind = DeltaKind::kSaturated;
    return d;
  }
  if (!previous) return d;  // kFirst
  if (current >= *previous) {
    d.kind = DeltaKind::kOk;
    d.raw = current - *previous;
    return d;
  }
  // Went down. A counter that saturates by spec cannot wrap; neither can a value above 32 bits.
  constexpr uint64_t k32 = uint64_t{1} << 32;
  if (!spec.saturates && *previous < k32) {
    const uint64_t wrapped = (k32 - *previous) + current;
    // Accept a wrap only if it implies less than half the 32-bit range; otherwise a reset to a
    // small value is the likelier story.
    if (wrapped < (k32 >> 1)) {
      d.kind = DeltaKind::kWrapped;
      d.raw = wrapped;
      return d;
    }
  }
  d.kind = DeltaKind::kReset;
  return d;
}

}  // namespace fw::counters
