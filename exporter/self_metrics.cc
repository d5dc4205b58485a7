// Process self-metrics from getrusage and /proc/self.
#include "exporter/self_metrics.h"

#include <dirent.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cstdio>
#include <ctime>

namespace fw::metrics {

bool ReadProcessUsage(double* cpu_seconds, double* rss_bytes) {
  rusage ru{};
  if (getrusage(RUSAGE_SELF, &ru) != 0) return false;
  *cpu_seconds = static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
                 static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1e-6;
  FILE* f = std::fopen("/proc/self/statm", "r");
  if (f == nullptr) return false;
  long pages_total = 0, pages_resident = 0;
  int n = std::fscanf(f, "%ld %ld", &pages_total, &pages_resident);
  std::fclose(f);
  if (n != 2) return false;
  *rss_bytes = static_cast<double>(pages_resident) * static_cast<double>(sysconf(_SC_PAGESIZE));
  return true;
}

SelfMetrics::SelfMetrics(Registry& registry, const std::string& version) {
  registry
      .AddGauge("fabricwatch_build_info", "Build information; the value is always 1.", {"version"})
      .WithLabels({version})
      .Set(1);
  cpu_seconds_ = &registry
                      .AddCounter("process_cpu_seconds_total",
                                  "Total user and system CPU time spent in seconds.")
                      .WithLabels({});
  rss_bytes_ = &registry.AddGauge("process_resident_memory_bytes", "Resident memory size in bytes.")
                    .WithLabels({});
  open_fds_ =
      &registry.AddGauge("process_open_fds", "Number of open file descriptors.").WithLabels({});
  registry
      .AddGauge("process_start_time_seconds",
                "Start time of the process since unix epoch in seconds.")
      .WithLabels({})
      .Set(static_cast<double>(std::time(nullptr)));
  scrape_duration_ =
      &registry
           .AddHistogram("fabricwatch_scrape_duration_seconds", "Time taken to render /metrics.",
                         {}, {0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1})
           .WithLabels({});
  registry.AddBeforeRender([this] { Refresh(); });
}

void SelfMetrics::Refresh() {
  double cpu = 0, rss = 0;
  if (ReadProcessUsage(&cpu, &rss)) {
    cpu_seconds_->Set(cpu);
    rss_bytes_->Set(rss);
  }
  int fds = 0;
  if (DIR* d = opendir("/proc/self/fd")) {
    while (readdir(d) != nullptr) ++fds;
    closedir(d);
    open_fds_->Set(fds - 2);  // "." and ".."
  }
}

}  // namespace fw::metrics
