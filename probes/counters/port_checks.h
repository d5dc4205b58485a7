// Findings from port samples: port_errors (error counters climbing or saturated), port_congestion
// (transmit wait, CNPs, ECN marks) and nic_down (a port that vanished).
#pragma once

#include <string>
#include <vector>

#include "common/finding.h"
#include "probes/counters/sampler.h"

namespace fw::counters {

struct PortCheckOptions {
  // Error counters: warning on any increase over the interval; critical at or above this rate.
  double error_critical_per_s = 10.0;
  // link_downed: any increase is critical (the link dropped).
  // port_xmit_wait ratio (see SamplerOptions): warning and critical thresholds.
  double xmit_wait_warning = 0.05;
  double xmit_wait_critical = 0.25;
  // RoCE congestion notifications per second; warning at or above.
  double cnp_handled_warning_per_s = 1000.0;
  double ecn_marked_warning_per_s = 1000.0;
};

// Findings for one pass of samples. Saturated error counters give a warning even on the first
// pass; rate-based findings need two passes.
std::vector<Finding> CheckPorts(const std::vector<PortSample>& samples, const std::string& node,
                                const PortCheckOptions& options = {});

}  // namespace fw::counters
