// Lookup of the profiles built into the binary (the table is generated from profiles/*.yaml).
#include <string_view>
#include <utility>

#include "probes/topology/profile.h"

namespace fw::topology {
namespace generated {
extern const std::pair<std::string_view, std::string_view> kBuiltinProfiles[];
extern const int kBuiltinProfileCount;
}  // namespace generated

std::vector<std::string> BuiltinProfileNames() {
  std::vector<std::string> out;
  for (int i = 0; i < generated::kBuiltinProfileCount; ++i) {
    out.emplace_back(generated::kBuiltinProfiles[i].first);
  }
  return out;
}

std::optional<std::string_view> BuiltinProfileYaml(std::string_view name) {
  for (int i = 0; i < generated::kBuiltinProfileCount; ++i) {
    if (generated::kBuiltinProfiles[i].first == name) return generated::kBuiltinProfiles[i].second;
  }
  return std::nullopt;
}

}  // namespace fw::topology
