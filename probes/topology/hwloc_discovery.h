// Node discovery through hwloc: live, or from an XML export (the agent's --hwloc-xml).
#pragma once

#include <string>
#include <string_view>

#include "common/status.h"
#include "probes/topology/topology.h"

namespace fw::topology {

// Discovers the local node with hwloc, keeping every PCI object (hwloc 2.9 hides them otherwise).
// Fails with kUnavailable when hwloc cannot load the machine.
StatusOr<NodeTopology> DiscoverLive();

// Loads an hwloc XML export (hwloc 2.x format; hwloc 2.9 cannot read 3.0). kNotFound when the file
// does not exist, kInvalidArgument when hwloc rejects it.
StatusOr<NodeTopology> DiscoverFromXmlFile(const std::string& path);

// As above, from XML text in memory.
StatusOr<NodeTopology> DiscoverFromXmlBuffer(std::string_view xml);

// Live when `xml_path` is empty, else from the file.
StatusOr<NodeTopology> Discover(const std::string& xml_path);

}  // namespace fw::topology
