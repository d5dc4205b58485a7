// Bridges the agent's flags to the node-checks library's one-shot check.
#include "daemon/agent/check_main.h"

#include <algorithm>
#include <chrono>
#include <iostream>

#include "daemon/agent/node/check_command.h"

namespace fw::agent {

int RunCheckCommand(const AgentOptions& options, const std::string& format, std::ostream& out) {
  CheckOptions co;
  co.sysfs_root = options.sysfs_root;
  co.hwloc_xml = options.hwloc_xml;
  co.profile = options.profile;
  co.format = format;
  co.node_name = options.node_name;
  co.xmit_wait_tick_bytes = options.xmit_wait_tick_bytes;
  co.counter_interval = std::chrono::milliseconds(
      static_cast<int64_t>(std::max(0.0, options.check_counter_interval_s) * 1000));
  return RunCheck(co, out);
}

}  // namespace fw::agent
