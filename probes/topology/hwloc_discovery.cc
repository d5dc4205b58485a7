// Walks an hwloc topology into our NodeTopology: PCI tree, GPUs, NICs, NVSwitches, NUMA locality.
#include "probes/topology/hwloc_discovery.h"

#include <hwloc.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <memory>

namespace fw::topology {
namespace {

struct TopologyDeleter {
  void operator()(hwloc_topology* t) const { hwloc_topology_destroy(t); }
};
using TopologyPtr = std::unique_ptr<hwloc_topology, TopologyDeleter>;

std::vector<int> NumaOf(hwloc_obj_t obj) {
  std::vector<int> out;
  if (obj == nullptr || obj->nodeset == nullptr) return out;
  for (int i = hwloc_bitmap_first(obj->nodeset); i >= 0; i = hwloc_bitmap_next(obj->nodeset, i)) {
    out.push_back(i);
  }
  return out;
}

std::string InfoOf(hwloc_obj_t obj, const char* name) {
  const char* v = hwloc_obj_get_info_by_name(obj, name);
  return v != nullptr ? v : "";
}

class Walker {
 public:
  explicit Walker(NodeTopology& out) : out_(out) {}

  void Walk(hwloc_obj_t obj, int parent, const std::vector<int>& numa) {
    int self = parent;
    std::vector<int> local_numa = numa;
    switch (obj->type) {
      case HWLOC_OBJ_MACHINE:
        self = Add(NodeKind::kMachine, parent, NumaOf(obj));
        local_numa = NumaOf(obj);
        break;
      case HWLOC_OBJ_PACKAGE:
        ++out_.packages;
        self = Add(NodeKind::kPackage, parent, NumaOf(obj));
        local_numa = NumaOf(obj);
        break;
      case HWLOC_OBJ_GROUP:
        self = Add(NodeKind::kGroup, parent, NumaOf(obj));
        local_numa = NumaOf(obj);
        break;
      case HWLOC_OBJ_NUMANODE:
        out_.numa_nodes.push_back(static_cast<int>(obj->os_index));
        return;
      case HWLOC_OBJ_BRIDGE:
        self = AddBridge(obj, parent, local_numa);
        break;
      case HWLOC_OBJ_PCI_DEVICE:
        self = AddPci(obj, parent, local_numa);
        break;
      case HWLOC_OBJ_OS_DEVICE:
        AttachOsDevice(obj, parent);
        return;
      default:
        // Caches, cores, PUs, dies and misc objects: their children may still hold I/O; keep
        // the CPU-side locality of this object when it has one.
        if (obj->nodeset != nullptr && !hwloc_bitmap_iszero(obj->nodeset)) local_numa = NumaOf(obj);
        break;
    }
    for (hwloc_obj_t c = obj->memory_first_child; c != nullptr; c = c->next_sibling) {
      Walk(c, self, local_numa);
    }
    for (hwloc_obj_t c = obj->first_child; c != nullptr; c = c->next_sibling) {
      Walk(c, self, local_numa);
    }
    for (hwloc_obj_t c = obj->io_first_child; c != nullptr; c = c->next_sibling) {
      Walk(c, self, local_numa);
    }
  }

 private:
  int Add(NodeKind kind, int parent, std::vector<int> numa) {
    TopoNode n;
    n.kind = kind;
    n.parent = parent;
    n.numa = std::move(numa);
    out_.nodes.push_back(std::move(n));
    return static_cast<int>(out_.nodes.size()) - 1;
  }

  int AddBridge(hwloc_obj_t obj, int parent, const std::vector<int>& numa) {
    const auto& br = obj->attr->bridge;
    if (br.upstream_type != HWLOC_OBJ_BRIDGE_PCI) return Add(NodeKind::kHostBridge, parent, numa);
    int self = Add(NodeKind::kPciBridge, parent, numa);
    FillPci(out_.nodes[self], br.upstream.pci);
    return self;
  }

  int AddPci(hwloc_obj_t obj, int parent, const std::vector<int>& numa) {
    int self = Add(NodeKind::kPciDevice, parent, numa);
    TopoNode& n = out_.nodes[self];
    FillPci(n, obj->attr->pcidev);
    if (IsGpuPciFunction(n.class_id, n.vendor_id)) {
      Gpu g;
      g.bdf = n.bdf;
      g.vendor_id = n.vendor_id;
      g.device_id = n.device_id;
      g.node_index = self;
      gpu_of_node_.push_back({self, out_.gpus.size()});
      out_.gpus.push_back(std::move(g));
    }
    const bool nvswitch = (obj->subtype != nullptr && std::strcmp(obj->subtype, "NVSwitch") == 0) ||
                          (n.vendor_id == 0x10de && n.class_id == 0x0680);
    if (nvswitch) out_.nvswitches.push_back(n.bdf);
    if ((n.class_id >> 8) == 0x02) {  // network controller: Ethernet 0200, InfiniBand 0207, ...
      Nic nic;
      nic.kind = NicKind::kEthernet;  // until an OpenFabrics OS device shows up below it
      nic.bdf = n.bdf;
      nic.class_id = n.class_id;
      nic.vendor_id = n.vendor_id;
      nic.device_id = n.device_id;
      nic.node_index = self;
      nic_of_node_.push_back({self, out_.nics.size()});
      out_.nics.push_back(std::move(nic));
    }
    return self;
  }

  static void FillPci(TopoNode& n, const hwloc_obj_attr_u::hwloc_pcidev_attr_s& pci) {
    n.bdf = FormatBdf(pci.domain, pci.bus, pci.dev, pci.func);
    n.class_id = pci.class_id;
    n.vendor_id = pci.vendor_id;
    n.device_id = pci.device_id;
    n.link_gbytes = pci.linkspeed;
  }

  void AttachOsDevice(hwloc_obj_t obj, int parent) {
    if (parent < 0 || obj->name == nullptr) return;
    const std::string name = obj->name;
    for (auto& [node, gi] : gpu_of_node_) {
      if (node != parent) continue;
      Gpu& g = out_.gpus[gi];
      const std::string model = InfoOf(obj, "GPUModel");
      if (!model.empty() && g.model.empty()) g.model = model;
      // Prefer a compute OS device name (nvml/cuda/rsmi/opencl) over a DRM one (card0).
      const bool compute = !model.empty() || obj->attr->osdev.type == HWLOC_OBJ_OSDEV_COPROC;
      if (g.os_device.empty() || compute) g.os_device = name;
    }
    for (auto& [node, ni] : nic_of_node_) {
      if (node != parent) continue;
      Nic& nic = out_.nics[ni];
      if (obj->attr->osdev.type == HWLOC_OBJ_OSDEV_OPENFABRICS) {
        nic.kind = NicKind::kRdma;
        nic.name = name;
      } else if (obj->attr->osdev.type == HWLOC_OBJ_OSDEV_NETWORK) {
        nic.netdevs.push_back(name);
      }
    }
  }

  NodeTopology& out_;
  std::vector<std::pair<int, size_t>> gpu_of_node_;
  std::vector<std::pair<int, size_t>> nic_of_node_;
};

// "mlx5_2" < "mlx5_10": digit runs compare as numbers.
bool NaturalLess(const std::string& a, const std::string& b) {
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    if (std::isdigit(static_cast<unsigned char>(a[i])) &&
        std::isdigit(static_cast<unsigned char>(b[j]))) {
      size_t ie = i, je = j;
      while (ie < a.size() && std::isdigit(static_cast<unsigned char>(a[ie]))) ++ie;
      while (je < b.size() && std::isdigit(static_cast<unsigned char>(b[je]))) ++je;
      const std::string_view da(a.data() + i, ie - i), db(b.data() + j, je - j);
      if (da.size() != db.size()) return da.size() < db.size();
      if (da != db) return da < db;
      i = ie;
      j = je;
    } else {
      if (a[i] != b[j]) return a[i] < b[j];
      ++i;
      ++j;
    }
  }
  return a.size() - i < b.size() - j;
}

void Finish(NodeTopology& topo) {
  // nvidia-smi numbers GPUs in PCI bus order.
  std::sort(topo.gpus.begin(), topo.gpus.end(),
            [](const Gpu& a, const Gpu& b) { return a.bdf < b.bdf; });
  for (size_t i = 0; i < topo.gpus.size(); ++i) topo.gpus[i].name = "GPU" + std::to_string(i);
  for (Nic& nic : topo.nics) {
    if (nic.name.empty()) nic.name = nic.netdevs.empty() ? nic.bdf : nic.netdevs.front();
  }
  std::sort(topo.nics.begin(), topo.nics.end(), [](const Nic& a, const Nic& b) {
    if (a.kind != b.kind) return a.kind == NicKind::kRdma;
    return NaturalLess(a.name, b.name);
  });
  std::sort(topo.numa_nodes.begin(), topo.numa_nodes.end());
}

StatusOr<NodeTopology> Load(TopologyPtr& topo, std::string source) {
  if (hwloc_topology_set_io_types_filter(topo.get(), HWLOC_TYPE_FILTER_KEEP_ALL) != 0) {
    return Status::Internal("hwloc: cannot keep I/O objects: " + std::string(strerror(errno)));
  }
  if (hwloc_topology_load(topo.get()) != 0) {
    return Status::InvalidArgument("hwloc could not load the topology from " + source + ": " +
                                   strerror(errno));
  }
  NodeTopology out;
  out.source = std::move(source);
  Walker walker(out);
  walker.Walk(hwloc_get_root_obj(topo.get()), -1, {});
  Finish(out);
  return out;
}

StatusOr<TopologyPtr> NewTopology() {
  hwloc_topology_t raw = nullptr;
  if (hwloc_topology_init(&raw) != 0) {
    return Status::Internal(std::string("hwloc_topology_init failed: ") + strerror(errno));
  }
  return TopologyPtr(raw);
}

}  // namespace

StatusOr<NodeTopology> DiscoverLive() {
  auto topo = NewTopology();
  if (!topo.ok()) return topo.status();
  auto result = Load(*topo, "live");
  if (!result.ok()) return Status::Unavailable(result.status().message());
  return result;
}

StatusOr<NodeTopology> DiscoverFromXmlFile(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) {
    return Status::NotFound("hwloc XML " + path + " does not exist or is not a file");
  }
  auto topo = NewTopology();
  if (!topo.ok()) return topo.status();
  if (hwloc_topology_set_xml(topo->get(), path.c_str()) != 0) {
    return Status::InvalidArgument("hwloc cannot read XML " + path + ": " + strerror(errno));
  }
  return Load(*topo, path);
}

StatusOr<NodeTopology> DiscoverFromXmlBuffer(std::string_view xml) {
  auto topo = NewTopology();
  if (!topo.ok()) return topo.status();
  const std::string buffer(xml);  // hwloc wants a NUL-terminated buffer
  if (hwloc_topology_set_xmlbuffer(topo->get(), buffer.c_str(),
                                   static_cast<int>(buffer.size()) + 1) != 0) {
    return Status::InvalidArgument("hwloc rejected the XML buffer: " +
                                   std::string(strerror(errno)));
  }
  return Load(*topo, "xml-buffer");
}

StatusOr<NodeTopology> Discover(const std::string& xml_path) {
  return xml_path.empty() ? DiscoverLive() : DiscoverFromXmlFile(xml_path);
}

}  // namespace fw::topology
