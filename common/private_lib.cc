// The search folders of a daemon's private shared objects (private_lib.h).
#include "common/private_lib.h"

#include <unistd.h>

#include <cstdlib>

namespace fw {

std::vector<std::string> PrivateLibraryDirs(const char* env_var, std::string_view build_dir) {
  std::vector<std::string> dirs;
  if (const char* env = std::getenv(env_var); env != nullptr && *env != '\0') dirs.emplace_back(env);
  char exe[4096];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n > 0) {
    std::string path(exe, static_cast<size_t>(n));
    size_t slash = path.rfind('/');
    if (slash != std::string::npos) {
      dirs.push_back(path.substr(0, slash) + "/../lib/" + path.substr(slash + 1));
    }
  }
  if (!build_dir.empty()) dirs.emplace_back(build_dir);
  return dirs;
}

}  // namespace fw
