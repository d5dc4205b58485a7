// Qualification profiles: the absolute expectations a set is held to besides its own median.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"

namespace fw::qualify {

// Limits in SI units (seconds, ratios). Peer-relative thresholds need no profile: a set is
// compared with itself, which is what keeps new hardware from needing hand-tuned numbers here.
struct QualifyProfile {
  std::string name;
  double rtt_p99_warn_s = 0;
  double rtt_p99_fail_s = 0;
  double loss_warn = 0;
  double loss_fail = 0;
  // The least bandwidth-burst goodput, bits/s: a single TCP stream from user space, so well
  // below the NIC's line rate.
  double goodput_warn_bps = 0;
  double goodput_fail_bps = 0;
  // The least bus bandwidth of the set's Gloo all-reduce (TCP), bits/s; 0: not judged.
  double allreduce_busbw_warn_bps = 0;
  double allreduce_busbw_fail_bps = 0;
};

// The built-in profiles: "generic" (loose: any network this runs on), "dgx-h100" and "dgx-a100"
// (the agent's profile names, for a fabric of such nodes in one cluster). An empty name is
// "generic". Unknown names fail with kInvalidArgument listing the known ones.
StatusOr<QualifyProfile> FindQualifyProfile(const std::string& name);
std::vector<std::string> QualifyProfileNames();

}  // namespace fw::qualify
