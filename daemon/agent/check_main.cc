// Bridges the agent's flags to the node-checks library's one-shot check.
#include "daemon/agent/check_main.h"

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
  return RunCheck(co, out);
}

}  // namespace fw::agent
