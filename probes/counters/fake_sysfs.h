// Test helper: a synthetic sysfs tree in a temporary directory, removed on destruction.
#pragma once

#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <string>

namespace fw::counters::testing {

class FakeSysfs {
 public:
  FakeSysfs() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "fw-sysfs-XXXXXX").string();
    if (mkdtemp(tmpl.data()) != nullptr) root_ = tmpl;
  }
  ~FakeSysfs() {
    std::error_code ec;
    std::filesystem::remove_all(root_, ec);
  }
  FakeSysfs(const FakeSysfs&) = delete;
  FakeSysfs& operator=(const FakeSysfs&) = delete;

  const std::string& root() const { return root_; }

  // Writes <root>/<rel> with `text`, creating directories.
  void Write(const std::string& rel, const std::string& text) const {
    const std::filesystem::path p = std::filesystem::path(root_) / rel;
    std::filesystem::create_directories(p.parent_path());
    std::ofstream(p) << text;
  }
  void Remove(const std::string& rel) const {
    std::error_code ec;
    std::filesystem::remove_all(std::filesystem::path(root_) / rel, ec);
  }
  std::string PortDir(const std::string& dev, int port) const {
    return "class/infiniband/" + dev + "/ports/" + std::to_string(port);
  }
  // An ACTIVE port with the usual identity files.
  void AddPort(const std::string& dev, int port, const std::string& rate = "400 Gb/sec (4X NDR)",
               const std::string& link_layer = "InfiniBand") const {
    Write("class/infiniband/" + dev + "/hca_type", "MT4129\n");
    Write("class/infiniband/" + dev + "/fw_ver", "28.41.1000\n");
    Write("class/infiniband/" + dev + "/board_id", "MT_0000000838\n");
    const std::string d = PortDir(dev, port);
    Write(d + "/state", "4: ACTIVE\n");
    Write(d + "/phys_state", "5: LinkUp\n");
    Write(d + "/rate", rate + "\n");
    Write(d + "/link_layer", link_layer + "\n");
  }
  void Counter(const std::string& dev, int port, const std::string& name,
               const std::string& value) const {
    Write(PortDir(dev, port) + "/counters/" + name, value + "\n");
  }
  void HwCounter(const std::string& dev, int port, const std::string& name,
                 const std::string& value) const {
    Write(PortDir(dev, port) + "/hw_counters/" + name, value + "\n");
  }

 private:
  std::string root_;
};

}  // namespace fw::counters::testing
