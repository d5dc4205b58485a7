// PrivateLibraryDirs: the override first, then the packages' folder beside the executable, then
// the build tree.
#include "common/private_lib.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

namespace fw {
namespace {

std::string ExeDirAndName(std::string* name) {
  char exe[4096];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  std::string path(exe, n > 0 ? static_cast<size_t>(n) : 0);
  size_t slash = path.rfind('/');
  *name = path.substr(slash + 1);
  return path.substr(0, slash);
}

TEST(PrivateLibraryDirs, OverrideThenBesideTheExecutableThenTheBuildTree) {
  std::string name;
  const std::string dir = ExeDirAndName(&name);
  unsetenv("FW_TEST_PRIVATE_LIB_DIR");
  EXPECT_EQ(PrivateLibraryDirs("FW_TEST_PRIVATE_LIB_DIR", "/build/x"),
            (std::vector<std::string>{dir + "/../lib/" + name, "/build/x"}));
  setenv("FW_TEST_PRIVATE_LIB_DIR", "/opt/mods", 1);
  EXPECT_EQ(PrivateLibraryDirs("FW_TEST_PRIVATE_LIB_DIR", "/build/x"),
            (std::vector<std::string>{"/opt/mods", dir + "/../lib/" + name, "/build/x"}));
  setenv("FW_TEST_PRIVATE_LIB_DIR", "", 1);  // empty: no override
  EXPECT_EQ(PrivateLibraryDirs("FW_TEST_PRIVATE_LIB_DIR", "").size(), 1u);
  unsetenv("FW_TEST_PRIVATE_LIB_DIR");
}

}  // namespace
}  // namespace fw
