// A temporary directory for tests: created empty and unique, removed with its contents when the
// object goes. Header-only so any test target can use it without a link dependency.
#pragma once

#include <stdlib.h>

#include <filesystem>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>

namespace fw::testing {

class TempDir {
 public:
  // `prefix` names the directory under the system temp dir (short, so AF_UNIX socket paths inside
  // it stay under their 108-byte limit). Throws when the directory cannot be made.
  explicit TempDir(std::string_view prefix = "fw-test") {
    std::string tmpl =
        (std::filesystem::temp_directory_path() / (std::string(prefix) + "-XXXXXX")).string();
    if (mkdtemp(tmpl.data()) == nullptr) {
      throw std::runtime_error("mkdtemp " + tmpl + ": " +
                               std::error_code(errno, std::generic_category()).message());
    }
    path_ = std::move(tmpl);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace fw::testing
