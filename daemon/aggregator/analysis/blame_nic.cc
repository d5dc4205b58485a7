// NIC level: a node's blamed access links become NIC findings, or one host finding when every NIC
// of the node is bad or it answers nothing.
#include "daemon/aggregator/analysis/blamer.h"

namespace fw::analysis::blame {

void Blamer::NodeNics(const std::string& node, const std::vector<const Verdict*>& list) {
  const FabricMap& map = *ctx_.map;
  const size_t nics = map.NicsOfNode(node).size();
  const std::optional<NodeId> id = ctx_.names.FindNode(node);
  if (id && noisy_.count(*id)) return;  // already named as a noisy host
  bool all_down = true;
  for (const Verdict* v : list) all_down = all_down && LevelOf(*v) == Level::kDown;
  const bool sends = id && *id < ev_.hosts.size() && ev_.hosts[*id].out_flows > 0;
  if (list.size() == nics && all_down && !sends) {
    Finding f;
    f.kind = "probe_unreachable";
    f.severity = Severity::kCritical;
    f.location = FindingLocation{"node", node, node, "", 0};
    f.evidence = {{"nics_down", list.size()}};
    f.summary = node +
                " answers no probes on any NIC and sends no results: the host or its "
                "agent is down, or all its cables are out.";
    f.confidence = Confidence(*list.front());
    for (const Verdict* v : list)
      ev_.link_elements[v->group.front()] = {"node:" + node, f.confidence};
    Emit("node:" + node, std::move(f), false);
    return;
  }
  if (nics >= 2 && list.size() == nics) {
    Finding f;
    f.kind = "host_network";
    f.severity = all_down ? Severity::kCritical : Severity::kWarning;
    f.location = FindingLocation{"node", node, node, "", 0};
    f.evidence = {{"bad_nics", list.size()}};
    f.summary = "Every NIC of " + node +
                " looks bad toward its peers; the host itself (driver, "
                "PCIe, firmware, CPU) is the likely cause, not the fabric.";
    f.confidence = Confidence(*list.front());
    for (const Verdict* v : list)
      ev_.link_elements[v->group.front()] = {"node:" + node, f.confidence};
    Emit("node:" + node, std::move(f), false);
    return;
  }
  for (const Verdict* v : list) Nic(node, *v);
}

void Blamer::Nic(const std::string& node, const Verdict& v) {
  const Link& link = ctx_.map->links()[v.group.front()];
  const std::string& device = ctx_.map->host_nics()[link.host_nic].nic;
  const std::string leaf = ctx_.map->switches()[link.a].name;
  const Level level = LevelOf(v);
  Finding f;
  f.location = FindingLocation{"nic", node + "/" + device, node, device, 0};
  const std::string what = Describe(v, f);
  f.confidence = Confidence(v);
  std::string element = "nic:" + node + "/" + device;
  if (PortDown(node, device)) {
    f.evidence["port_up"] = 0;
    f.confidence = 1 - (1 - f.confidence) / 2;
  }
  const LinkBlame* lat = v.latency();
  // Hysteresis: once the host is named for drops and delays, its drops alone (a tick whose slow
  // fraction dips under the threshold) stay the host's, not a second finding on its NIC.
  const bool host_named = ctx_.tracker &&
                          ctx_.tracker->HealthOf("node:" + node) >= ElementHealth::kFiring &&
                          ctx_.tracker->KindOf("node:" + node) == "host_network";
  const bool stack_delays =
      v.loss() && (host_named || (lat && lat->inflation >= c_.host_delay_inflation));
  int confirm_ticks = 0;
  if (level == Level::kDown) {
    f.kind = "nic_down";
    f.severity = Severity::kCritical;
    f.summary = "NIC " + device + " on " + node + " is unreachable: it " + what +
                "; check its link state and the cable to " + leaf + ".";
  } else if (level == Level::kDegraded && stack_delays) {
    // Drops plus delays far beyond what a switch port can queue: the host holds the packets.
    f.kind = "host_network";
    f.severity = Severity::kWarning;
    f.location = FindingLocation{"node", node, node, "", 0};
    element = "node:" + node;
    f.summary = "Probes to and from " + node + " are lost and delayed by its own stack (its NIC " +
                device + " " + what +
                Fmt("; delays of %.0fx the baseline are more than a switch port queues), toward "
                    "all its peers in both directions; the host (CPU contention, interrupts, "
                    "driver) is the likely cause, not the fabric.",
                    lat ? lat->inflation : 0.0);
  } else if (level == Level::kDegraded) {
    f.kind = "nic_degraded";
    const LinkBlame* loss = v.loss();
    f.severity = (loss && loss->estimate >= 0.05) ? Severity::kCritical : Severity::kWarning;
    f.summary = "NIC " + device + " on " + node + " " + what +
                " toward all its peers, "
                "intra-leaf included; check its cable to " +
                leaf +
                ", optics and port "
                "counters, or replace it.";
  } else {
    const auto [sampled, congested] = PortCongestion(node, device);
    f.evidence["ports_sampled"] = sampled;
    f.evidence["ports_congested"] = congested;
    if (congested > 0) {
      f.kind = "congestion";
      f.severity = Severity::kWarning;
      f.summary = "The access link of " + node + "/" + device + " is congested: it " + what +
                  ", and its port counters report congestion; check what the host sends.";
    } else {
      f.kind = "host_network";
      f.severity = Severity::kWarning;
      f.location = FindingLocation{"node", node, node, "", 0};
      element = "node:" + node;
      f.summary = "Probes to and from " + node + " are slow (its NIC " + device + " " + what +
                  ") with no loss and no congestion counters, and have been for at least " +
                  Fmt("%.0f evaluations", c_.latency_confirm_ticks) +
                  "; the host (CPU contention, interrupts, driver) is the likely cause, not "
                  "the fabric.";
    }
    // A queueing episode on the cable looks the same while it lasts: ask for persistence.
    confirm_ticks = c_.latency_confirm_ticks;
  }
  ev_.link_elements[v.group.front()] = {element, f.confidence};
  Emit(element, std::move(f), element.starts_with("nic:"), confirm_ticks);
}

}  // namespace fw::analysis::blame
