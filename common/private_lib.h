// Where a daemon finds the shared objects it loads with dlopen (civetweb's TLS shims, the Gloo
// collective module): they are private to the package, so they sit in a folder of the executable's
// own, not on the loader's search path.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace fw {

// The folders to try, in order: $<env_var> when set and non-empty (an operator's or a test's
// override), <exe dir>/../lib/<exe name>/ (the packages: /usr/bin/fabricwatch-agent loads from
// /usr/lib/fabricwatch-agent/), then `build_dir` (the build tree, where tests run the binaries).
std::vector<std::string> PrivateLibraryDirs(const char* env_var, std::string_view build_dir);

}  // namespace fw
