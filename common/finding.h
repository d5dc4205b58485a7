// A node finding: what is wrong, where, how sure we are; shared by probes, agent and aggregator.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace fw {

enum class Severity { kWarning, kCritical };

// "warning" or "critical", as in the DESIGN.md finding schema.
const char* SeverityName(Severity severity);

// Where a finding points. Fields that do not apply stay empty (port 0 = no port).
struct FindingLocation {
  std::string type;    // link | switch | nic | node | gpu | pair
  std::string id;      // stable identifier, e.g. "node01/mlx5_1/1" or "node01/0000:44:00.0"
  std::string node;    // the node name
  std::string device;  // e.g. "mlx5_1", "GPU2", "0000:44:00.0"
  int port = 0;        // NIC port number, 0 when not a port
};

// One finding. `kind` is one of the kinds listed in DESIGN.md (port_errors, pcie_downtrained, ...).
// Timestamps and `active` belong to whoever tracks findings over time, not to the detector.
struct Finding {
  std::string kind;
  Severity severity = Severity::kWarning;
  FindingLocation location;
  std::string summary;                     // one sentence a person can act on
  std::map<std::string, double> evidence;  // the numbers behind the summary
  double confidence = 1.0;                 // 0..1
};

// The Nagios/NHC verdict for a set of findings: 0 none, 1 at least one warning, 2 any critical.
int ExitCodeForFindings(const std::vector<Finding>& findings);

// Sorts critical first, then by kind, then by location id, so output is stable.
void SortFindings(std::vector<Finding>& findings);

}  // namespace fw
