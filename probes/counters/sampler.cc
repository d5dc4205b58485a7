// The sampling pass: directory descriptors opened once per scan, value files kept open and re-read.
#include "probes/counters/sampler.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <filesystem>
#include <map>

#include "probes/counters/sysfs_value.h"

namespace fw::counters {
namespace {

namespace fs = std::filesystem;

constexpr size_t kBuf = 128;

int OpenDir(const fs::path& p) { return open(p.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC); }

void CloseFd(int& fd) {
  if (fd >= 0 && close(fd) != 0) {
    // Nothing useful to do: the descriptor is released either way on Linux.
  }
  fd = -1;
}

std::string ReadText(const fs::path& p) {
  int dir = OpenDir(p.parent_path());
  if (dir < 0) return "";
  char buf[kBuf];
  size_t len = 0;
  int err = 0;
  std::string out;
  if (ReadSmallFileAt(dir, p.filename().c_str(), buf, sizeof(buf), len, err) == ReadResult::kOk) {
    out.assign(buf, len);
    while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.pop_back();
  }
  CloseFd(dir);
  return out;
}

std::vector<std::string> ListDir(const fs::path& p, bool dirs_only) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(p, ec)) {
    std::error_code ec2;
    if (dirs_only && !e.is_directory(ec2)) continue;
    if (!dirs_only && !e.is_regular_file(ec2)) continue;
    out.push_back(e.path().filename().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

// What a directory looked like at the last look, to tell whether any of its files can have been
// unlinked or replaced since (either changes the directory's mtime and ctime).
struct DirStamp {
  bool valid = false;
  bool quiet = false;  // at that look, the ctime was at least kQuiet old
  dev_t dev = 0;
  ino_t ino = 0;
  nlink_t nlink = 0;
  timespec mtime{}, ctime{};
  // The directory changed since the last slow pass, which is the first pass that reads (and so
  // checks) every file of it.
  bool dirty = false;
};

// File timestamps come from a coarse clock (a tick of several ms), so a change made in the same
// tick as a look can leave them equal; a directory whose ctime was this old at a look cannot.
// This assumes timestamps at most this coarse and from this host's clock, as on a local
// filesystem (only trees outside sysfs, test trees, are checked this way); a network filesystem
// whose server clock lags could make a change look quiet.
constexpr int64_t kQuietNs = 1'000'000'000;

int64_t Ns(const timespec& t) { return static_cast<int64_t>(t.tv_sec) * 1'000'000'000 + t.tv_nsec; }

// Whether directory `fd` is as it was at the last look and was quiet then: no file in it was
// unlinked, renamed over or added since. Updates the stamp. False on the first look and when the
// directory cannot be stat()ed.
bool DirUnchanged(int fd, DirStamp& s) {
  struct stat st {};
  if (fd < 0 || fstat(fd, &st) != 0) {
    s = DirStamp{};
    return false;
  }
  const bool same = s.valid && s.quiet && s.dev == st.st_dev && s.ino == st.st_ino &&
                    s.nlink == st.st_nlink && Ns(s.mtime) == Ns(st.st_mtim) &&
                    Ns(s.ctime) == Ns(st.st_ctim);
  timespec now{};
  clock_gettime(CLOCK_REALTIME, &now);
  s.valid = true;
  s.quiet = Ns(now) - std::max(Ns(st.st_mtim), Ns(st.st_ctim)) >= kQuietNs;
  s.dev = st.st_dev;
  s.ino = st.st_ino;
  s.nlink = st.st_nlink;
  s.mtime = st.st_mtim;
  s.ctime = st.st_ctim;
  return same;
}

// The same directory (device and inode) behind both descriptors.
bool SameDir(int a, int b) {
  struct stat sa {
  }, sb{};
  if (a < 0 || b < 0) return a < 0 && b < 0;
  return fstat(a, &sa) == 0 && fstat(b, &sb) == 0 && sa.st_dev == sb.st_dev &&
         sa.st_ino == sb.st_ino;
}

}  // namespace

const char* ReadErrorName(ReadError e) {
  switch (e) {
    case ReadError::kNone:
      return "none";
    case ReadError::kMissing:
      return "missing";
    case ReadError::kUnavailable:
      return "unavailable";
    case ReadError::kUnparsable:
      return "unparsable";
    case ReadError::kIoError:
      return "io_error";
    case ReadError::kGone:
      return "gone";
  }
  return "io_error";
}

bool IsPauseCounterName(std::string_view name) {
  return name.find("pause") != std::string_view::npos;
}

const CounterReading* PortSample::Find(CounterRole role) const {
  const int i = by_role[static_cast<size_t>(role)];
  return i >= 0 ? &counters[static_cast<size_t>(i)] : nullptr;
}

struct Sampler::PortHandle {
  int port_fd = -1, counters_fd = -1, hw_fd = -1;
  int state_fd = -1, phys_fd = -1;            // kept open, re-read with pread
  int rate_fd = -1, link_fd = -1;             // likewise
  bool on_sysfs = false;                      // see RereadFileAt's check_unlinked
  DirStamp port_stamp, counters_stamp, hw_stamp;  // outside sysfs only
  std::vector<std::optional<uint64_t>> prev;  // parallel to PortSample::counters
  std::vector<int> fds;                       // parallel to PortSample::counters; -1 when closed
  int64_t prev_mono_ns = 0;       // the previous pass of this port
  int64_t slow_prev_mono_ns = 0;  // the previous pass that read the slow tier
  int slow_wait = 0;              // passes before the slow tier is read again; 0: this one
  size_t ethtool_begin = 0;  // index of the first ethtool reading in PortSample::counters

  PortHandle() = default;
  PortHandle(PortHandle&& o) noexcept { *this = std::move(o); }
  PortHandle& operator=(PortHandle&& o) noexcept {
    std::swap(port_fd, o.port_fd);
    std::swap(counters_fd, o.counters_fd);
    std::swap(hw_fd, o.hw_fd);
    std::swap(state_fd, o.state_fd);
    std::swap(phys_fd, o.phys_fd);
    std::swap(rate_fd, o.rate_fd);
    std::swap(link_fd, o.link_fd);
    std::swap(fds, o.fds);
    on_sysfs = o.on_sysfs;
    port_stamp = o.port_stamp;
    counters_stamp = o.counters_stamp;
    hw_stamp = o.hw_stamp;
    prev = std::move(o.prev);
    prev_mono_ns = o.prev_mono_ns;
    slow_prev_mono_ns = o.slow_prev_mono_ns;
    slow_wait = o.slow_wait;
    ethtool_begin = o.ethtool_begin;
    return *this;
  }
  ~PortHandle() {
    CloseFd(port_fd);
    CloseFd(counters_fd);
    CloseFd(hw_fd);
    CloseFd(state_fd);
    CloseFd(phys_fd);
    CloseFd(rate_fd);
    CloseFd(link_fd);
    for (int& fd : fds) CloseFd(fd);
  }
};

Sampler::Sampler(SamplerOptions options, const Clock& clock)
    : options_(std::move(options)), clock_(clock) {}

Sampler::~Sampler() = default;

void Sampler::Rescan() {
  ++stats_.rescans;
  need_rescan_ = false;
  // Keep history for ports that survive the rescan.
  std::map<std::pair<std::string, int>, std::pair<PortHandle, PortSample>> old;
  for (size_t i = 0; i < handles_.size(); ++i) {
    if (samples_[i].vanished) continue;
    auto key = std::make_pair(samples_[i].device, samples_[i].port);  // before the moves below
    old.emplace(std::move(key), std::make_pair(std::move(handles_[i]), std::move(samples_[i])));
  }
  handles_.clear();
  samples_.clear();
  open_files_ = 0;  // counts the descriptors carried over below; the rest close with `old`
  const fs::path ib = fs::path(options_.sysfs_root) / "class" / "infiniband";
  for (const std::string& dev : ListDir(ib, true)) {
    const fs::path dev_dir = ib / dev;
    std::string netdev;
    if (auto nets = ListDir(dev_dir / "device" / "net", true); !nets.empty()) netdev = nets.front();
    std::vector<std::string> ports = ListDir(dev_dir / "ports", true);
    std::sort(ports.begin(), ports.end(), [](const std::string& a, const std::string& b) {
      return a.size() != b.size() ? a.size() < b.size() : a < b;
    });
    for (const std::string& port_name : ports) {
      int port = 0;
      const auto [ptr, ec] =
          std::from_chars(port_name.data(), port_name.data() + port_name.size(), port);
      if (ec != std::errc() || ptr != port_name.data() + port_name.size()) continue;
      const fs::path port_dir = dev_dir / "ports" / port_name;
      PortHandle h;
      PortSample s;
      h.port_fd = OpenDir(port_dir);
      if (h.port_fd < 0) {
        ++stats_.vanished;
        continue;
      }
      h.counters_fd = OpenDir(port_dir / "counters");
      h.hw_fd = OpenDir(port_dir / "hw_counters");
      h.on_sysfs = IsOnSysfs(h.port_fd);
      s.device = dev;
      s.port = port;
      s.netdev = netdev;
      s.hca_type = ReadText(dev_dir / "hca_type");
      s.fw_ver = ReadText(dev_dir / "fw_ver");
      s.board_id = ReadText(dev_dir / "board_id");
      auto add = [&](CounterGroup g, const std::string& name) {
        CounterReading r;
        r.name = name;
        r.group = g;
        r.spec = SpecFor(g, name);
        r.slow_tier = g != CounterGroup::kEthtool && r.spec.role == CounterRole::kOther &&
                      !r.spec.error;
        s.counters.push_back(std::move(r));
      };
      for (const std::string& n : ListDir(port_dir / "counters", false))
        add(CounterGroup::kCounters, n);
      for (const std::string& n : ListDir(port_dir / "hw_counters", false))
        add(CounterGroup::kHwCounters, n);
      h.ethtool_begin = s.counters.size();
      if (options_.ethernet_stats != nullptr && !netdev.empty() &&
          options_.ethernet_stats->Read(netdev, ethtool_scratch_).ok()) {
        for (const auto& [name, value] : ethtool_scratch_) {
          if (IsPauseCounterName(name)) add(CounterGroup::kEthtool, name);
        }
      }
      s.by_role.fill(-1);
      for (size_t i = 0; i < s.counters.size(); ++i) {
        const auto role = static_cast<size_t>(s.counters[i].spec.role);
        if (s.counters[i].spec.role != CounterRole::kOther && s.by_role[role] < 0) {
          s.by_role[role] = static_cast<int>(i);
        }
      }
      h.prev.assign(s.counters.size(), std::nullopt);
      h.fds.assign(s.counters.size(), -1);
      if (auto it = old.find({dev, port}); it != old.end()) {
        const PortSample& before = it->second.second;
        PortHandle& bh = it->second.first;
        h.prev_mono_ns = bh.prev_mono_ns;
        h.slow_prev_mono_ns = bh.slow_prev_mono_ns;  // slow_wait stays 0: read it all first
        // In the same directories the kept descriptors carry over, so a rescan opens only what
        // is new. A file replaced meanwhile is noticed by its next read as on any pass (sysfs
        // fails it; elsewhere the fresh stamps make the first pass check every file).
        const bool same_dirs = SameDir(h.port_fd, bh.port_fd) &&
                               SameDir(h.counters_fd, bh.counters_fd) && SameDir(h.hw_fd, bh.hw_fd);
        if (same_dirs) {
          std::swap(h.state_fd, bh.state_fd);
          std::swap(h.phys_fd, bh.phys_fd);
          std::swap(h.rate_fd, bh.rate_fd);
          std::swap(h.link_fd, bh.link_fd);
        }
        for (size_t i = 0; i < s.counters.size(); ++i) {
          for (size_t j = 0; j < before.counters.size(); ++j) {
            if (before.counters[j].name == s.counters[i].name &&
                before.counters[j].group == s.counters[i].group) {
              h.prev[i] = bh.prev[j];
              if (same_dirs && j < bh.fds.size() && bh.fds[j] >= 0) {
                std::swap(h.fds[i], bh.fds[j]);
                ++open_files_;
              }
              break;
            }
          }
        }
      }
      handles_.push_back(std::move(h));
      samples_.push_back(std::move(s));
    }
  }
}

void Sampler::ReadPort(PortHandle& h, PortSample& s) {
  char buf[kBuf];
  size_t len = 0;
  int err = 0;
  s.mono_ns = clock_.MonotonicNanos();
  s.interval_s = h.prev_mono_ns > 0 ? static_cast<double>(s.mono_ns - h.prev_mono_ns) * 1e-9 : 0;
  auto gone = [&](ReadResult r) { return r == ReadResult::kMissing || r == ReadResult::kGone; };

  // The slow tier is due on the first pass after a (re)scan and every slow_every passes.
  const bool slow_pass = h.slow_wait <= 0;
  h.slow_wait = slow_pass ? std::max(1, options_.slow_every) - 1 : h.slow_wait - 1;
  const double slow_interval_s =
      h.slow_prev_mono_ns > 0 ? static_cast<double>(s.mono_ns - h.slow_prev_mono_ns) * 1e-9 : 0;

  // Outside sysfs a kept descriptor keeps serving a file that was unlinked or replaced, so its
  // reads fstat() it: in a directory that changed since its last look (see DirUnchanged), and
  // until a slow pass has read every file of it, since a file of the slow tier (or rate,
  // link_layer) is not read on the fast pass that sees the change.
  auto needs_check = [&](int fd, DirStamp& stamp) {
    if (h.on_sysfs) return false;
    const bool changed = !DirUnchanged(fd, stamp);  // may reset the stamp, `dirty` included
    stamp.dirty = stamp.dirty || changed;
    return stamp.dirty;
  };
  const bool check_port = needs_check(h.port_fd, h.port_stamp);
  const bool check_counters = needs_check(h.counters_fd, h.counters_stamp);
  const bool check_hw = needs_check(h.hw_fd, h.hw_stamp);
  auto reread = [&](int dirfd, const char* name, int& fd, bool keep, bool check) {
    ++stats_.files_read;
    stats_.files_opened += fd < 0 ? 1 : 0;
    stats_.unlink_checks += check ? 1 : 0;
    return RereadFileAt(dirfd, name, fd, keep, check, buf, sizeof(buf), len, err);
  };

  // State, kept open. A missing state file means the port (or its device) is gone.
  const int state_before = s.state_id, phys_before = s.phys_state_id;
  ReadResult r = reread(h.port_fd, "state", h.state_fd, true, check_port);
  if (gone(r)) {
    s.vanished = true;
  } else if (r == ReadResult::kOk) {
    if (auto v = ParseEnumValue({buf, len}); v.ok()) {
      s.state_id = v->id;
      if (s.state != v->name) s.state.assign(v->name);
    } else {
      ++stats_.unparsable;
    }
  } else {
    ++stats_.io_errors;
  }
  if (!s.vanished) {
    if (reread(h.port_fd, "phys_state", h.phys_fd, true, check_port) == ReadResult::kOk) {
      if (auto v = ParseEnumValue({buf, len}); v.ok()) {
        s.phys_state_id = v->id;
        if (s.phys_state != v->name) s.phys_state.assign(v->name);
      } else {
        ++stats_.unparsable;
      }
    }
    // The signalling rate changes only when the link retrains, which moves state or phys_state.
    if (slow_pass || s.state_id != state_before || s.phys_state_id != phys_before) {
      s.rate_gbps.reset();
      if (reread(h.port_fd, "rate", h.rate_fd, true, check_port) == ReadResult::kOk) {
        if (auto v = ParseRateGbps({buf, len}); v.ok()) {
          s.rate_gbps = *v;
        } else {
          ++stats_.unparsable;
        }
      }
    }
    if (slow_pass) {
      if (reread(h.port_fd, "link_layer", h.link_fd, true, check_port) == ReadResult::kOk) {
        std::string_view t(buf, len);
        while (!t.empty() && (t.back() == '\n' || t.back() == ' ')) t.remove_suffix(1);
        if (s.link_layer != t) s.link_layer.assign(t);
      }
    }
  }

  const bool have_ethtool = h.ethtool_begin < s.counters.size();
  bool ethtool_ok = false;
  if (have_ethtool && !s.vanished) {
    ethtool_ok = options_.ethernet_stats->Read(s.netdev, ethtool_scratch_).ok();
  }
  for (size_t i = 0; i < s.counters.size(); ++i) {
    CounterReading& c = s.counters[i];
    if (c.slow_tier && !slow_pass && !s.vanished) {
      c.fresh = false;  // everything else stays as its last read left it
      continue;
    }
    c.fresh = true;
    const std::optional<uint64_t> prev = h.prev[i];
    const double interval_s = c.slow_tier ? slow_interval_s : s.interval_s;
    c.valid = false;
    c.error = ReadError::kNone;
    c.saturated = false;
    c.rate.reset();
    if (s.vanished) {
      c.error = ReadError::kGone;
    } else if (c.group == CounterGroup::kEthtool) {
      c.error = ReadError::kUnavailable;
      if (ethtool_ok) {
        for (const auto& [name, value] : ethtool_scratch_) {
          if (name == c.name) {
            c.value = value;
            c.valid = true;
            c.error = ReadError::kNone;
            break;
          }
        }
      }
    } else {
      const bool in_counters = c.group == CounterGroup::kCounters;
      const int dir = in_counters ? h.counters_fd : h.hw_fd;
      int& fd = h.fds[i];
      const bool was_open = fd >= 0;
      if (dir < 0) {
        ++stats_.files_read;
        r = ReadResult::kMissing;
      } else {
        r = reread(dir, c.name.c_str(), fd, was_open || open_files_ < options_.max_open_files,
                   in_counters ? check_counters : check_hw);
      }
      open_files_ += (fd >= 0 ? 1 : 0) - (was_open ? 1 : 0);
      if (r == ReadResult::kOk) {
        auto v = ParseCounterValue({buf, len});
        if (v.ok()) {
          c.value = *v;
          c.valid = true;
        } else {
          c.error = v.status().code() == StatusCode::kUnavailable ? ReadError::kUnavailable
                                                                  : ReadError::kUnparsable;
        }
      } else if (gone(r)) {
        // The file went away: if the port directory went too, the whole device vanished.
        const bool port_gone =
            gone(ReadSmallFileAt(h.port_fd, "state", buf, sizeof(buf), len, err));
        c.error = port_gone ? ReadError::kGone : ReadError::kMissing;
        if (port_gone) s.vanished = true;
      } else {
        c.error = ReadError::kIoError;
      }
    }
    switch (c.error) {
      case ReadError::kMissing:
        ++stats_.missing;
        break;
      case ReadError::kUnavailable:
        ++stats_.unavailable;
        break;
      case ReadError::kUnparsable:
        ++stats_.unparsable;
        break;
      case ReadError::kIoError:
        ++stats_.io_errors;
        break;
      default:
        break;
    }
    if (!c.valid) {
      c.delta = Delta{DeltaKind::kInvalid, 0};
      h.prev[i].reset();  // the next good read starts a fresh baseline
      continue;
    }
    c.delta = ComputeDelta(c.spec, prev, c.value);
    c.saturated = c.delta.kind == DeltaKind::kSaturated;
    if (c.delta.kind == DeltaKind::kReset) ++stats_.resets;
    if (c.delta.kind == DeltaKind::kWrapped) ++stats_.wraps;
    if (c.delta.known() && interval_s > 0) {
      c.rate = static_cast<double>(c.delta.raw) * c.spec.scale / interval_s;
    }
    h.prev[i] = c.value;
  }
  if (s.vanished) {
    ++stats_.vanished;
    need_rescan_ = true;
  }
  h.prev_mono_ns = s.mono_ns;
  if (slow_pass) h.slow_prev_mono_ns = s.mono_ns;
  if (slow_pass && !s.vanished) {
    h.port_stamp.dirty = h.counters_stamp.dirty = h.hw_stamp.dirty = false;
  }

  auto rate_of = [&](CounterRole role) -> std::optional<double> {
    const CounterReading* c = s.Find(role);
    return c != nullptr ? c->rate : std::nullopt;
  };
  s.xmit_bytes_per_s = rate_of(CounterRole::kXmitData);
  s.rcv_bytes_per_s = rate_of(CounterRole::kRcvData);
  s.cnp_sent_per_s = rate_of(CounterRole::kCnpSent);
  s.cnp_handled_per_s = rate_of(CounterRole::kCnpHandled);
  s.ecn_marked_per_s = rate_of(CounterRole::kEcnMarked);
  s.xmit_wait_ratio.reset();
  if (auto wait = rate_of(CounterRole::kXmitWait); wait && s.rate_gbps && *s.rate_gbps > 0) {
    const double line_bytes_per_s = *s.rate_gbps * 1e9 / 8.0;
    s.xmit_wait_ratio =
        std::clamp(*wait * options_.xmit_wait_tick_bytes / line_bytes_per_s, 0.0, 1.0);
  }
}

const std::vector<PortSample>& Sampler::SampleOnce() {
  if (need_rescan_ || (options_.rescan_every > 0 && stats_.passes > 0 &&
                       stats_.passes % static_cast<uint64_t>(options_.rescan_every) == 0)) {
    Rescan();
  }
  ++stats_.passes;
  for (size_t i = 0; i < handles_.size(); ++i) {
    samples_[i].vanished = false;
    ReadPort(handles_[i], samples_[i]);
  }
  return samples_;
}

}  // namespace fw::counters
