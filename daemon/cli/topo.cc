// Topo report assembly and its text rendering.
#include "daemon/cli/topo.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <sstream>

#include "daemon/cli/text_table.h"
#include "daemon/cli/verdict.h"

namespace fw::cli {
namespace {

using nlohmann::json;

const json& Field(const json& j, const char* key) {
  static const json kNull;
  if (!j.is_object()) return kNull;
  auto it = j.find(key);
  return it == j.end() ? kNull : *it;
}

std::string Str(const json& j, const char* key) {
  const json& v = Field(j, key);
  return v.is_string() ? v.get<std::string>() : std::string();
}

const json& ArrayField(const json& j, const char* key) {
  static const json kEmpty = json::array();
  const json& v = Field(j, key);
  return v.is_array() ? v : kEmpty;
}

// The pcie_downtrained findings of this node, by the link's bus address.
std::map<std::string, std::string> DowntrainedSeverity(const json& findings) {
  std::map<std::string, std::string> out;
  for (const json& f : findings) {
    if (Str(f, "kind") != "pcie_downtrained" || FindingVerdict(f) == kOk) continue;
    const std::string bdf = Str(Field(f, "location"), "device");
    const std::string sev = Str(f, "severity");
    if (!out.count(bdf) || sev == "critical") out[bdf] = sev;
  }
  return out;
}

json PcieRows(const json& pcie, const json& node_findings) {
  const auto downtrained = DowntrainedSeverity(node_findings);
  json rows = json::array();
  for (const json& l : pcie) {
    if (!l.is_object()) continue;
    json row = l;
    const json &cs = Field(l, "current_speed_gts"), &ms = Field(l, "max_speed_gts");
    const json &cw = Field(l, "current_width"), &mw = Field(l, "max_width");
    auto it = downtrained.find(Str(l, "bdf"));
    row["severity"] = nullptr;
    if (it != downtrained.end()) {
      row["state"] = "downtrained";
      row["severity"] = it->second;
    } else if (!Field(l, "present").is_boolean() || !Field(l, "present").get<bool>() ||
               !cw.is_number() || !mw.is_number()) {
      row["state"] = "no_data";
    } else if (cs.is_number() && ms.is_number() && cs.get<double>() + 1e-6 < ms.get<double>()) {
      // The agent raises a finding for a slow link unless the link may idle (GPU links and the
      // bridge port above a GPU); without one, this is that idle case.
      row["state"] = "idle_speed";
    } else {
      row["state"] = "ok";
    }
    rows.push_back(std::move(row));
  }
  return rows;
}

std::string Num(const json& v) {
  if (!v.is_number()) return "-";
  const double d = v.get<double>();
  std::ostringstream s;
  if (d == std::floor(d)) {
    s << static_cast<long long>(d) << (v.is_number_float() ? ".0" : "");
  } else {
    s << d;
  }
  return s.str();
}

}  // namespace

json TopoReport(const json& node, const json& active_findings) {
  const std::string name = Str(node, "name");
  const json& inv = Field(node, "inventory");
  json report = {
      {"node", name},
      {"connected", Field(node, "connected").is_boolean() && Field(node, "connected").get<bool>()},
      {"health", Str(node, "health")},
      {"last_seen", Str(node, "last_seen")},
      {"source", Str(inv, "source")}};

  json node_findings = json::array();
  for (const json& f : active_findings) {
    if (Str(Field(f, "location"), "node") == name && FindingVerdict(f) != kOk) {
      node_findings.push_back(f);
    }
  }

  // GPU names (GPU0...) come from the check report; the inventory knows GPUs by bus address.
  std::map<std::string, std::string> gpu_bdf;
  const json& pcie = Field(inv, "pcie");
  for (const json& l : ArrayField(inv, "pcie")) {
    if (Str(l, "role") == "gpu") gpu_bdf[Str(l, "for")] = Str(l, "bdf");
  }
  std::map<std::string, const json*> inv_gpu;
  for (const json& g : ArrayField(inv, "gpus")) inv_gpu[Str(g, "bus_id")] = &g;

  json affinity = nullptr;
  json gpus = json::array();
  const json& aff = Field(inv, "affinity");
  if (aff.is_array()) {
    std::vector<std::string> gpu_names, nic_names;
    std::map<std::pair<std::string, std::string>, std::string> cls;
    auto add = [](std::vector<std::string>& v, const std::string& s) {
      if (std::find(v.begin(), v.end(), s) == v.end()) v.push_back(s);
    };
    for (const json& e : aff) {
      add(gpu_names, Str(e, "gpu"));
      add(nic_names, Str(e, "nic"));
      cls[{Str(e, "gpu"), Str(e, "nic")}] = Str(e, "class");
    }
    json rows = json::array();
    for (const std::string& g : gpu_names) {
      json classes = json::array();
      for (const std::string& n : nic_names) {
        auto it = cls.find({g, n});
        classes.push_back(it == cls.end() ? json(nullptr) : json(it->second));
      }
      rows.push_back({{"gpu", g}, {"classes", classes}});
    }
    affinity = {{"nics", nic_names}, {"rows", rows}};
    for (const std::string& g : gpu_names) {
      const std::string bdf = gpu_bdf.count(g) ? gpu_bdf[g] : "";
      const json* ig = inv_gpu.count(bdf) ? inv_gpu[bdf] : nullptr;
      gpus.push_back({{"name", g},
                      {"bdf", bdf},
                      {"numa_node", ig ? Field(*ig, "numa_node") : json(nullptr)},
                      {"best_nic", ig ? Str(*ig, "best_nic") : ""},
                      {"affinity_class", ig ? Str(*ig, "affinity_class") : ""}});
    }
  }
  if (gpus.empty()) {
    // No check report yet, or no fabric NIC to pair with: the Hello inventory still lists the
    // GPUs and names each one's best NIC.
    for (const json& g : ArrayField(inv, "gpus")) {
      gpus.push_back({{"name", Str(g, "name")},
                      {"bdf", Str(g, "bus_id")},
                      {"numa_node", Field(g, "numa_node")},
                      {"best_nic", Str(g, "best_nic")},
                      {"affinity_class", Str(g, "affinity_class")}});
    }
  }
  json nics = json::array();
  for (const json& n : ArrayField(inv, "nics")) {
    nics.push_back({{"device", Str(n, "device")},
                    {"netdev", Str(n, "netdev")},
                    {"bdf", Str(n, "bus_id")},
                    {"numa_node", Field(n, "numa_node")},
                    {"fabric", Field(n, "fabric").is_boolean() && Field(n, "fabric").get<bool>()}});
  }
  report["gpus"] = gpus;
  report["nics"] = nics;
  report["affinity"] = affinity;
  report["pcie"] = pcie.is_array() ? PcieRows(pcie, node_findings) : json(nullptr);
  report["findings"] = node_findings;
  const int verdict = TopoVerdict(node, active_findings);
  report["verdict"] = VerdictName(verdict);
  report["exit_code"] = verdict;
  return report;
}

std::string TopoText(const json& report) {
  std::ostringstream out;
  const json& gpus = ArrayField(report, "gpus");
  const json& nics = ArrayField(report, "nics");
  out << "node " << Str(report, "node") << " · "
      << (Field(report, "connected").get<bool>()
              ? "connected"
              : "DISCONNECTED (last seen " + Str(report, "last_seen") + ")")
      << " · health " << (Str(report, "health").empty() ? "-" : Str(report, "health")) << " · "
      << gpus.size() << " GPUs, " << nics.size() << " NICs";
  if (!Str(report, "source").empty()) out << " · topology " << Str(report, "source");
  out << "\n\n";

  std::map<std::string, std::string> numa_of;
  for (const json& g : gpus) numa_of[Str(g, "name")] = Num(Field(g, "numa_node"));
  const json& aff = Field(report, "affinity");
  if (aff.is_object() && ArrayField(aff, "rows").empty()) {
    out << "no GPU-NIC matrix: the check report pairs no GPU with a fabric NIC";
    out << (gpus.empty() ? " (no GPUs)\n" : "; GPUs from its Hello:\n");
  }
  if (aff.is_object() && !ArrayField(aff, "rows").empty()) {
    const json& nic_names = ArrayField(aff, "nics");
    std::vector<std::string> header = {""};
    for (size_t i = 0; i < nic_names.size(); ++i) header.push_back("NIC" + std::to_string(i));
    header.push_back("NUMA Affinity");
    TextTable t(header);
    for (const json& row : ArrayField(aff, "rows")) {
      std::vector<std::string> cells = {Str(row, "gpu")};
      for (const json& c : ArrayField(row, "classes")) {
        cells.push_back(c.is_string() ? c.get<std::string>() : "-");
      }
      cells.push_back(numa_of[Str(row, "gpu")]);
      t.Add(cells);
    }
    t.Print(out);
    out << "\nLegend:\n"
           "  PIX  = joined by at most one PCIe bridge\n"
           "  PXB  = joined by several PCIe bridges, without crossing the host bridge\n"
           "  PHB  = joined through a PCIe host bridge\n"
           "  NODE = joined by the interconnect between host bridges inside one NUMA node\n"
           "  SYS  = joined across NUMA nodes (SMP interconnect)\n\nNIC Legend:\n";
    std::map<std::string, std::string> netdev;
    for (const json& n : nics) netdev[Str(n, "device")] = Str(n, "netdev");
    for (size_t i = 0; i < nic_names.size(); ++i) {
      const std::string name = nic_names[i].is_string() ? nic_names[i].get<std::string>() : "";
      out << "  NIC" << i << ": " << name;
      if (!netdev[name].empty()) out << " (" << netdev[name] << ")";
      out << "\n";
    }
  } else if (!gpus.empty() || !aff.is_object()) {
    if (!aff.is_object()) {
      out << "no affinity matrix: the agent has not sent a check report yet (or the aggregator "
             "predates inventory.affinity); best NIC per GPU from its Hello:\n";
    }
    TextTable t({"GPU", "BUS ID", "NUMA", "BEST NIC", "CLASS"});
    for (const json& g : gpus) {
      t.Add({Str(g, "name"), Str(g, "bdf"), Num(Field(g, "numa_node")), Str(g, "best_nic"),
             Str(g, "affinity_class")});
    }
    t.Print(out, "  ");
  }

  out << "\nPCIe links (current / max):\n";
  const json& pcie = Field(report, "pcie");
  if (!pcie.is_array()) {
    out << "  no PCIe data: the agent has not sent a check report yet\n";
  } else {
    TextTable t({"BDF", "ROLE", "FOR", "SPEED GT/s", "WIDTH", ""});
    size_t no_data = 0;
    for (const json& l : pcie) {
      const std::string state = Str(l, "state");
      if (state == "no_data") {
        ++no_data;
        continue;
      }
      std::string mark;
      if (state == "downtrained") mark = "<< DOWNTRAINED (" + Str(l, "severity") + ")";
      if (state == "idle_speed") mark = "speed below max (allowed while idle)";
      t.Add({Str(l, "bdf"), Str(l, "role"), Str(l, "for"),
             Num(Field(l, "current_speed_gts")) + " / " + Num(Field(l, "max_speed_gts")),
             "x" + Num(Field(l, "current_width")) + " / x" + Num(Field(l, "max_width")), mark});
    }
    if (t.body_rows() > 0) t.Print(out, "  ");
    if (no_data > 0) {
      out << "  " << no_data << " of " << pcie.size()
          << " links without data (no sysfs link files for them on the node)\n";
    }
  }

  const json& findings = ArrayField(report, "findings");
  out << "\nFindings on " << Str(report, "node") << ":" << (findings.empty() ? " none" : "")
      << "\n";
  if (!findings.empty()) {
    TextTable t({"SEVERITY", "KIND", "SUMMARY"});
    for (const json& f : findings) t.Add({Str(f, "severity"), Str(f, "kind"), Str(f, "summary")});
    t.Print(out, "  ");
  }
  const int rc = Field(report, "exit_code").is_number_integer()
                     ? Field(report, "exit_code").get<int>()
                     : kUnknown;
  out << "\nverdict: " << VerdictWord(rc) << " (exit " << rc << ")\n";
  return out.str();
}

}  // namespace fw::cli
