// The fabric map (--fabric-map): switches, links and host NICs, and the equal-cost paths between
// NICs.
#pragma once

#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/status.h"

namespace fw::aggregator {

enum class Routing : uint8_t { kEcmp, kDeterministic };
enum class SwitchTier : uint8_t { kLeaf, kSpine, kSuperspine, kCore };
enum class PathClass : uint8_t { kIntraLeaf, kInterLeaf, kUnknown };

std::string_view RoutingName(Routing r);
std::string_view SwitchTierName(SwitchTier t);
// "intra_leaf", "inter_leaf", "unknown" (the /api/v1/pairs contract).
std::string_view PathClassName(PathClass c);

using LinkIndex = uint32_t;
using SwitchIndex = uint32_t;
using HostNicIndex = uint32_t;
inline constexpr uint32_t kNoIndex = std::numeric_limits<uint32_t>::max();

struct Switch {
  std::string name;
  SwitchTier tier = SwitchTier::kLeaf;
  int line = 0;  // 1-based line in the map file
  // The addresses it answers from (ICMP time exceeded to path traces), in canonical text form.
  std::vector<std::string> addresses;
};

// A link. Switch-to-switch links come from the map and have id "a~b" with a < b. Each host NIC also
// gets an access link with id "<node>:<nic>~<switch>" (host side first, whatever the ordering), so
// that a fault on a NIC cable can be named like any other link.
struct Link {
  std::string id;
  SwitchIndex a = kNoIndex;          // for an access link: the switch the NIC attaches to
  SwitchIndex b = kNoIndex;          // for an access link: kNoIndex
  HostNicIndex host_nic = kNoIndex;  // set only for access links
  int line = 0;
  bool IsAccess() const { return host_nic != kNoIndex; }
};

struct HostNic {
  std::string node;
  std::string nic;
  std::string address;
  SwitchIndex leaf = kNoIndex;
  LinkIndex access_link = kNoIndex;
  int line = 0;
};

// Equal-cost shortest paths, all of the same hop count, stored flat: one allocation for all of them
// instead of one per path. A 16,000-node fabric caches ~250,000 switch pairs of 16 paths each, so
// the layout is worth ~100 MB (a vector per path cost ~1 KB per switch pair, this ~200 bytes).
class PathList {
 public:
  using Path = std::span<const LinkIndex>;

  class Iterator {
   public:
    using value_type = Path;
    using difference_type = std::ptrdiff_t;
    Iterator(const PathList* list, size_t i) : list_(list), i_(i) {}
    Path operator*() const { return (*list_)[i_]; }
    Iterator& operator++() {
      ++i_;
      return *this;
    }
    bool operator==(const Iterator& o) const { return i_ == o.i_; }
    bool operator!=(const Iterator& o) const { return i_ != o.i_; }

   private:
    const PathList* list_;
    size_t i_;
  };

  // REQUIRES: every path has `hops` links.
  PathList(uint32_t hops, const std::vector<std::vector<LinkIndex>>& paths);
  PathList() = default;

  size_t size() const { return count_; }
  bool empty() const { return count_ == 0; }
  uint32_t hops() const { return hops_; }
  // REQUIRES: i < size().
  Path operator[](size_t i) const { return Path(links_.data() + i * hops_, hops_); }
  Iterator begin() const { return Iterator(this, 0); }
  Iterator end() const { return Iterator(this, count_); }

 private:
  uint32_t count_ = 0;
  uint32_t hops_ = 0;
  std::vector<LinkIndex> links_;  // path i is links_[i * hops_, (i + 1) * hops_)
};

// The equal-cost switch-level paths between two switches, each a list of link indices in order.
// Shared between every NIC pair behind the same two switches.
struct SwitchPaths {
  PathList paths;          // one empty path when both switches are the same
  bool truncated = false;  // more than FabricMap::kMaxPaths existed
};

// Candidate paths of one NIC pair: src access link, then one of core->paths, then dst access link.
struct PathSet {
  PathClass path_class = PathClass::kUnknown;
  LinkIndex src_access = kNoIndex;
  LinkIndex dst_access = kNoIndex;
  std::shared_ptr<const SwitchPaths> core;  // null when path_class is kUnknown

  size_t PathCount() const { return core ? core->paths.size() : 0; }
  // Full paths, access links included. Allocates; for display and tests, not for hot paths.
  std::vector<std::vector<LinkIndex>> FullPaths() const;
};

// A validated fabric map. Immutable after Parse() except for the internal path cache, which is
// guarded by its own mutex: every const method is safe to call from any thread.
class FabricMap {
 public:
  static constexpr size_t kMaxPaths = 4096;
  static constexpr size_t kMaxInputBytes = 64 << 20;

  // Parses and validates YAML text. `source` names the input in error messages, e.g. the file
  // path: "fabric.yaml:12: links[3]: unknown switch 'spine9'".
  static StatusOr<FabricMap> Parse(std::string_view yaml, std::string_view source = "fabric map");
  static StatusOr<FabricMap> Load(const std::string& path);

  FabricMap(FabricMap&&) noexcept;
  FabricMap& operator=(FabricMap&&) noexcept;
  ~FabricMap();

  Routing routing() const { return routing_; }
  const std::vector<Switch>& switches() const { return switches_; }
  const std::vector<Link>& links() const { return links_; }
  const std::vector<HostNic>& host_nics() const { return host_nics_; }

  std::optional<SwitchIndex> FindSwitch(std::string_view name) const;
  // The switch that answers from `address` (any textual form inet_pton reads); nullopt for an
  // address in no switch's `addresses` list.
  std::optional<SwitchIndex> SwitchAtAddress(std::string_view address) const;
  // The switches path `path` of `paths` crosses, in order from the source's leaf to the
  // destination's leaf (one switch for an intra-leaf pair). Empty for an unknown pair or index.
  std::vector<SwitchIndex> SwitchesOnPath(const PathSet& paths, size_t path) const;
  std::optional<LinkIndex> FindLink(std::string_view id) const;
  std::optional<HostNicIndex> FindHostNic(std::string_view node, std::string_view nic) const;
  // The NICs of a node in map order; empty when the node is not in the map.
  const std::vector<HostNicIndex>& NicsOfNode(std::string_view node) const;
  // Nodes with at least one NIC in the map.
  size_t NodeCount() const { return nics_by_node_.size(); }
  // The NICs attached to a switch in map order.
  const std::vector<HostNicIndex>& NicsOnSwitch(SwitchIndex s) const;

  // Candidate path set between two host NICs. Cheap after the first call for the same switch pair.
  PathSet Paths(HostNicIndex src, HostNicIndex dst) const;
  // The same for two nodes: the first NIC pair on a common rail (same NIC name), else their first
  // NICs. kUnknown when either node is absent or no path exists.
  PathSet PathsBetweenNodes(std::string_view src_node, std::string_view dst_node) const;
  // The candidate paths of one NIC pair named by node and device (a result's src_nic/dst_nic):
  // Paths() of those NICs, on their own rail and leaves. When either device is empty or not in the
  // map, PathsBetweenNodes: results that name no NIC are judged as before NICs were reported.
  PathSet PathsBetweenNics(std::string_view src_node, std::string_view src_nic,
                           std::string_view dst_node, std::string_view dst_nic) const;
  // The NIC of `node` whose map address is `address` (any textual form inet_pton reads).
  std::optional<HostNicIndex> HostNicAt(std::string_view node, std::string_view address) const;
  // A NIC's rail: its position among its node's NICs in map order (0-based). Rail-optimized maps
  // list each host's NICs in rail order, so mlx5_3 of every host is rail 3.
  uint32_t RailOf(HostNicIndex nic) const;

  // Equal-cost shortest paths between two switches; null when none. Cached: the first call for a
  // source switch computes its paths to every switch with hosts at once.
  std::shared_ptr<const SwitchPaths> SwitchPathsBetween(SwitchIndex a, SwitchIndex b) const;

 private:
  struct Cache;
  struct Bfs;
  FabricMap();
  Bfs BfsFrom(SwitchIndex a) const;
  std::shared_ptr<const SwitchPaths> EnumeratePaths(const Bfs& bfs, SwitchIndex a,
                                                    SwitchIndex b) const;

  Routing routing_ = Routing::kEcmp;
  std::vector<Switch> switches_;
  std::vector<Link> links_;  // switch links first, then one access link per host NIC
  std::vector<HostNic> host_nics_;
  std::unordered_map<std::string, SwitchIndex> switch_by_name_;
  std::unordered_map<std::string, SwitchIndex> switch_by_address_;  // canonical address text
  std::unordered_map<std::string, LinkIndex> link_by_id_;
  std::unordered_map<std::string, std::vector<HostNicIndex>> nics_by_node_;
  std::vector<std::vector<HostNicIndex>> nics_by_switch_;
  std::vector<std::vector<std::pair<SwitchIndex, LinkIndex>>> adjacency_;  // switch graph
  std::unique_ptr<Cache> cache_;
};

}  // namespace fw::aggregator
