// Fallback used only while the node-checks library (daemon/agent/node) is absent from the build.
#include "daemon/agent/check_main.h"

namespace fw::agent {

int RunCheckCommand(const AgentOptions&, const std::string&, std::ostream& out) {
  out << "fabricwatch-agent check: node checks are not built into this binary\n";
  return 3;
}

}  // namespace fw::agent
