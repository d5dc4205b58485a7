// Plan entries a prober cannot use: the reasons, and the checks every prober shares. A plan is
// applied entry by entry: an unusable entry is skipped and counted, the rest of the plan runs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace fw::net {

// Why a plan entry was skipped. The names are the `reason` label of
// fabricwatch_probe_plan_entries_skipped_total (docs/metrics.md); keep them stable.
enum class PlanSkip : uint8_t {
  kName,       // empty, or longer than a ProbeResult holds (63 characters)
  kAddress,    // not a numeric IPv4 or IPv6 address
  kPort,       // 0 or above 65535
  kFlows,      // 0 flows, more than 64, or past the 65,535 flows a plan may hold
  kRate,       // a negative or non-finite probe rate
  kTransport,  // a transport this agent does not know
  kDuplicate,  // the same entry again
  kSocket,     // no probe socket for the address's family (e.g. IPv6 disabled on this host)
  kTimeout,    // a UDP probe timeout outside (0, 60 s]
  kCount,
};
inline constexpr size_t kPlanSkipCount = static_cast<size_t>(PlanSkip::kCount);
std::string_view PlanSkipName(PlanSkip s);

// The checks every prober needs of a peer: a name that fits a ProbeResult, a numeric address and
// a port in 1..65535. Returns the first reason the peer cannot be probed, or nothing.
std::optional<PlanSkip> CheckPeer(std::string_view name, std::string_view address, uint32_t port);

}  // namespace fw::net
