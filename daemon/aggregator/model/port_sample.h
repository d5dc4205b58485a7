// A counter sample of one NIC port, as the agents report it: ingest makes it from the wire, the
// analyzer reads it.
#pragma once

#include <string>

namespace fw::aggregator {

// Rates are per second; a value the agent could not measure arrives as 0.
struct PortSample {
  std::string node;
  std::string device;
  int port = 1;
  double congestion_ratio = 0;  // xmit_wait share of time, 0..1
  double cnp_rate = 0;
  double ecn_rate = 0;
  double error_rate = 0;
  bool up = true;
};

}  // namespace fw::aggregator
