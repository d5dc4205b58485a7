// A hash for unordered containers keyed by std::string that also looks up by std::string_view
// (with std::equal_to<>), so a lookup by a view allocates no temporary string.
#pragma once

#include <cstddef>
#include <functional>
#include <string_view>

namespace fw {

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};

}  // namespace fw
