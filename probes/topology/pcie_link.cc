// Reads and judges PCIe link state from sysfs.
#include "probes/topology/pcie_link.h"

#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>

namespace fw::topology {
namespace {

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\n'))
    s.remove_prefix(1);
  while (!s.empty() &&
         (s.back() == ' ' || s.back() == '\t' || s.back() == '\n' || s.back() == '\0')) {
    s.remove_suffix(1);
  }
  return s;
}

// Reads a small sysfs attribute. nullopt when it is missing or unreadable.
std::optional<std::string> ReadAttr(const std::filesystem::path& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::string text(256, '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  if (in.bad()) return std::nullopt;
  text.resize(static_cast<size_t>(in.gcount()));
  return text;
}

bool LooksLikeBdf(std::string_view s) {
  // dddd:bb:dd.f
  if (s.size() != 12 || s[4] != ':' || s[7] != ':' || s[10] != '.') return false;
  for (size_t i : {0, 1, 2, 3, 5, 6, 8, 9, 11}) {
    if (!std::isxdigit(static_cast<unsigned char>(s[i]))) return false;
  }
  return true;
}

std::string Gts(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f", v);
  return buf;
}

}  // namespace

StatusOr<double> ParsePcieSpeed(std::string_view text) {
  const std::string_view t = Trim(text);
  if (t.empty() || t == "Unknown" || t == "0" || t.rfind("Unknown", 0) == 0) {
    return Status::NotFound("no link speed reported ('" + std::string(t) + "')");
  }
  double v = 0;
  const auto [ptr, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
  if (ec != std::errc() || !std::isfinite(v) || v < 0) {
    return Status::InvalidArgument("unparsable PCIe link speed '" + std::string(t) + "'");
  }
  const std::string_view rest = Trim(std::string_view(ptr, t.data() + t.size() - ptr));
  if (rest.rfind("GT/s", 0) != 0) {
    return Status::InvalidArgument("PCIe link speed '" + std::string(t) + "' is not in GT/s");
  }
  if (v == 0) return Status::NotFound("link speed 0 GT/s");
  return v;
}

StatusOr<int> ParsePcieWidth(std::string_view text) {
  const std::string_view t = Trim(text);
  int v = 0;
  const auto [ptr, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
  if (t.empty() || ec != std::errc() || ptr != t.data() + t.size() || v < 0 || v > 64) {
    return Status::InvalidArgument("unparsable PCIe link width '" + std::string(t) + "'");
  }
  if (v == 0) return Status::NotFound("link width 0 (no link)");
  return v;
}

int PcieGeneration(double gts) {
  struct Row {
    double gts;
    int gen;
  };
  static constexpr Row kRows[] = {{2.5, 1}, {5, 2}, {8, 3}, {16, 4}, {32, 5}, {64, 6}};
  for (const Row& r : kRows) {
    if (std::fabs(gts - r.gts) < 0.01) return r.gen;
  }
  return 0;
}

std::vector<PcieTarget> PcieTargets(const NodeTopology& topo, const std::string& sysfs_root) {
  std::vector<PcieTarget> out;
  std::set<std::string> seen;
  auto add = [&](PcieTarget t) {
    if (t.bdf.empty() || !seen.insert(t.bdf).second) return;
    out.push_back(std::move(t));
  };
  for (const Gpu& g : topo.gpus) {
    add({g.bdf, "gpu", g.name, true});
    const std::vector<std::string> bridges = topo.BridgesAbove(g.node_index);
    for (size_t i = 0; i < bridges.size(); ++i) add({bridges[i], "bridge", g.name, i == 0});
  }
  for (const Nic& n : topo.nics) {
    if (n.kind != NicKind::kRdma) continue;
    add({n.bdf, "nic", n.name, false});
    for (const std::string& b : topo.BridgesAbove(n.node_index)) add({b, "bridge", n.name, false});
  }
  // RDMA devices that hwloc did not show: follow the sysfs device link up the PCI hierarchy.
  std::error_code ec;
  const std::filesystem::path ib = std::filesystem::path(sysfs_root) / "class" / "infiniband";
  for (const auto& entry : std::filesystem::directory_iterator(ib, ec)) {
    const std::string dev = entry.path().filename().string();
    bool known = false;
    for (const Nic& n : topo.nics) known = known || (n.name == dev && !n.bdf.empty());
    if (known) continue;
    std::error_code ec2;
    const std::filesystem::path real = std::filesystem::canonical(entry.path() / "device", ec2);
    if (ec2) continue;
    std::vector<std::string> chain;
    for (const auto& part : real) {
      const std::string s = part.string();
      if (LooksLikeBdf(s)) chain.push_back(s);
    }
    if (chain.empty()) continue;
    add({chain.back(), "nic", dev, false});
    for (size_t i = chain.size() - 1; i-- > 0;) add({chain[i], "bridge", dev, false});
  }
  return out;
}

std::vector<PcieLink> ReadPcieLinks(const std::string& sysfs_root,
                                    const std::vector<PcieTarget>& targets) {
  std::vector<PcieLink> out;
  out.reserve(targets.size());
  for (const PcieTarget& t : targets) {
    PcieLink link;
    link.target = t;
    const std::filesystem::path dir =
        std::filesystem::path(sysfs_root) / "bus" / "pci" / "devices" / t.bdf;
    std::error_code ec;
    link.present = std::filesystem::is_directory(dir, ec);
    if (!link.present) {
      out.push_back(std::move(link));
      continue;
    }
    // Reads one attribute with `parse`; "no link" values leave `dst` empty without a problem.
    auto read = [&](const char* file, auto parse, auto& dst) {
      const auto text = ReadAttr(dir / file);
      if (!text) {
        link.problems.push_back(std::string(file) + ": missing or unreadable");
        return;
      }
      auto v = parse(*text);
      if (v.ok()) {
        dst = *v;
      } else if (v.status().code() != StatusCode::kNotFound) {
        link.problems.push_back(std::string(file) + ": " + v.status().message());
      }
    };
    read("current_link_speed", ParsePcieSpeed, link.current_speed_gts);
    read("max_link_speed", ParsePcieSpeed, link.max_speed_gts);
    read("current_link_width", ParsePcieWidth, link.current_width);
    read("max_link_width", ParsePcieWidth, link.max_width);
    out.push_back(std::move(link));
  }
  return out;
}

std::vector<Finding> CheckPcieLinks(const std::vector<PcieLink>& links, const std::string& node) {
  std::vector<Finding> out;
  for (const PcieLink& l : links) {
    const bool width_low = l.current_width && l.max_width && *l.current_width < *l.max_width;
    const bool speed_low = !l.target.speed_may_idle && l.current_speed_gts && l.max_speed_gts &&
                           *l.current_speed_gts + 1e-6 < *l.max_speed_gts;
    if (!width_low && !speed_low) continue;
    Finding f;
    f.kind = "pcie_downtrained";
    f.severity = width_low && *l.current_width * 2 <= *l.max_width ? Severity::kCritical
                                                                   : Severity::kWarning;
    f.location = {l.target.role == "gpu" ? "gpu" : (l.target.role == "nic" ? "nic" : "node"),
                  node + "/" + l.target.bdf, node, l.target.bdf, 0};
    std::string what = l.target.role == "bridge"
                           ? "PCIe bridge " + l.target.bdf + " (above " + l.target.owner + ")"
                           : l.target.owner + " (" + l.target.bdf + ")";
    std::string detail;
    if (width_low) {
      detail = "x" + std::to_string(*l.current_width) + " of x" + std::to_string(*l.max_width);
      f.evidence["current_width"] = *l.current_width;
      f.evidence["max_width"] = *l.max_width;
    }
    if (l.current_speed_gts && l.max_speed_gts) {
      f.evidence["current_speed_gts"] = *l.current_speed_gts;
      f.evidence["max_speed_gts"] = *l.max_speed_gts;
      if (speed_low) {
        detail += std::string(detail.empty() ? "" : " at ") + Gts(*l.current_speed_gts) + " of " +
                  Gts(*l.max_speed_gts) + " GT/s";
      }
    }
    f.summary = what + " PCIe link trained at " + detail +
                ", so it moves less data than it can; reseat the card or check the slot and riser";
    out.push_back(std::move(f));
  }
  return out;
}

}  // namespace fw::topology
