// Health metrics every daemon exports about itself: build info, CPU, memory, scrape duration.
#pragma once

#include <string>

#include "exporter/registry.h"

namespace fw::metrics {

class SelfMetrics {
 public:
  // Registers fabricwatch_build_info{version}, process_cpu_seconds_total,
  // process_resident_memory_bytes, process_start_time_seconds, process_open_fds and
  // fabricwatch_scrape_duration_seconds. CPU, memory and fds refresh before every render.
  SelfMetrics(Registry& registry, const std::string& version);

  // Records how long one /metrics render took.
  void ObserveScrape(double seconds) { scrape_duration_->Observe(seconds); }

 private:
  void Refresh();

  Counter* cpu_seconds_;
  Gauge* rss_bytes_;
  Gauge* open_fds_;
  Histogram* scrape_duration_;
};

// Reads this process's CPU seconds (user + system) and resident bytes; false when /proc is
// unreadable.
bool ReadProcessUsage(double* cpu_seconds, double* rss_bytes);

}  // namespace fw::metrics
