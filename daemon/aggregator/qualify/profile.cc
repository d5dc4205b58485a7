// The built-in qualification profiles.
#include "daemon/aggregator/qualify/profile.h"

namespace fw::qualify {
namespace {

// Kernel UDP round trips: tens of microseconds inside a leaf on an idle host, a few hundred
// across spines or on a busy host. "generic" only catches the grossly broken; the DGX profiles
// expect a dedicated fabric.
// Goodput: "generic" fails a path slower than 10 Mbit/s (a broken link, a misconfigured shaper);
// one TCP stream over a DGX's 200-400 Gbit/s rail carries tens of Gbit/s.
const QualifyProfile kProfiles[] = {
    {"generic", 5e-3, 20e-3, 0.02, 0.10, 100e6, 10e6, 20e6, 2e6},
    {"dgx-h100", 1e-3, 5e-3, 0.001, 0.01, 10e9, 2e9, 5e9, 1e9},
    {"dgx-a100", 1e-3, 5e-3, 0.001, 0.01, 10e9, 2e9, 5e9, 1e9},
};

}  // namespace

StatusOr<QualifyProfile> FindQualifyProfile(const std::string& name) {
  const std::string want = name.empty() ? "generic" : name;
  for (const QualifyProfile& p : kProfiles) {
    if (p.name == want) return p;
  }
  std::string known;
  for (const auto& n : QualifyProfileNames()) known += (known.empty() ? "" : ", ") + n;
  return Status::InvalidArgument("unknown qualification profile '" + want + "' (known: " + known +
                                 ")");
}

std::vector<std::string> QualifyProfileNames() {
  std::vector<std::string> out;
  for (const QualifyProfile& p : kProfiles) out.push_back(p.name);
  return out;
}

}  // namespace fw::qualify
