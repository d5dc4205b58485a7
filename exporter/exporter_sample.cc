// Prints a representative exposition (every metric type, escaping, special values) for promtool.
#include <cmath>
#include <iostream>
#include <limits>

#include "exporter/registry.h"
#include "exporter/self_metrics.h"

int main() {
  fw::metrics::Registry r;
  fw::metrics::SelfMetrics self(r, "0.1.0");
  r.AddCounter("fabricwatch_probe_sent_total", "Probes sent.", {"transport"})
      .WithLabels({"udp"})
      .Inc(12);
  auto& g = r.AddGauge("fabricwatch_link_loss_ratio", "Loss ratio per link.", {"link"});
  g.WithLabels({"leaf1~spine1"}).Set(0.01);
  g.WithLabels({"quote\"back\\slash\nnl"}).Set(std::nan(""));
  g.WithLabels({"inf"}).Set(std::numeric_limits<double>::infinity());
  auto& h = r.AddHistogram("fabricwatch_probe_rtt_seconds", "Probe RTT.", {"transport"},
                           {1e-5, 1e-4, 1e-3});
  h.WithLabels({"udp"}).Observe(5e-5);
  self.ObserveScrape(0.001);
  r.Render([](std::string_view chunk) { std::cout << chunk; });
  return 0;
}
