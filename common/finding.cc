// Finding helpers: severity names, verdicts and stable ordering.
#include "common/finding.h"

#include <algorithm>
#include <tuple>

namespace fw {

const char* SeverityName(Severity severity) {
  return severity == Severity::kCritical ? "critical" : "warning";
}

int ExitCodeForFindings(const std::vector<Finding>& findings) {
  int code = 0;
  for (const Finding& f : findings) {
    code = std::max(code, f.severity == Severity::kCritical ? 2 : 1);
  }
  return code;
}

void SortFindings(std::vector<Finding>& findings) {
  std::stable_sort(findings.begin(), findings.end(), [](const Finding& a, const Finding& b) {
    const int sa = a.severity == Severity::kCritical ? 0 : 1;
    const int sb = b.severity == Severity::kCritical ? 0 : 1;
    return std::tie(sa, a.kind, a.location.id, a.location.port) <
           std::tie(sb, b.kind, b.location.id, b.location.port);
  });
}

}  // namespace fw
