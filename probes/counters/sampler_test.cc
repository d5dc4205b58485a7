// The sampler on the real H100 tree and on synthetic trees for every edge case.
#include "probes/counters/sampler.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <thread>

#include "probes/counters/fake_sysfs.h"

namespace fw::counters {
namespace {

using namespace std::chrono_literals;
using testing::FakeSysfs;

std::string H100Root() {
  const char* dir = std::getenv("FW_TESTDATA");
  return std::string(dir ? dir : "tests/testdata") + "/sysfs/gpud-h100";
}

const PortSample* Port(const std::vector<PortSample>& s, const std::string& dev) {
  for (const auto& p : s) {
    if (p.device == dev) return &p;
  }
  return nullptr;
}

const CounterReading* Counter(const PortSample& p, const std::string& name) {
  for (const auto& c : p.counters) {
    if (c.name == name) return &c;
  }
  return nullptr;
}

TEST(SamplerH100, EightNdrPortsAndAnEthernetBond) {
  FakeClock clock;
  Sampler sampler({.sysfs_root = H100Root()}, clock);
  const auto& s = sampler.SampleOnce();
  ASSERT_EQ(s.size(), 9u);
  for (const char* dev :
       {"mlx5_0", "mlx5_1", "mlx5_4", "mlx5_5", "mlx5_6", "mlx5_7", "mlx5_8", "mlx5_9"}) {
    const PortSample* p = Port(s, dev);
    ASSERT_NE(p, nullptr) << dev;
    EXPECT_EQ(p->port, 1);
    EXPECT_EQ(p->state_id, 4);
    EXPECT_EQ(p->state, "ACTIVE");
    EXPECT_EQ(p->phys_state_id, 5);
    EXPECT_EQ(p->phys_state, "LinkUp");
    EXPECT_EQ(p->rate_gbps, 400.0);
    EXPECT_EQ(p->link_layer, "InfiniBand");
    EXPECT_EQ(p->hca_type, "MT4129");
    EXPECT_EQ(p->fw_ver, "28.41.1000");
    EXPECT_EQ(p->counters.size(), 21u + 26u);
    EXPECT_EQ(p->Find(CounterRole::kXmitWait)->value, 2489603687u);
    EXPECT_FALSE(p->Find(CounterRole::kXmitWait)->saturated);
    EXPECT_EQ(p->Find(CounterRole::kXmitData)->value, 230442669431839u);
    EXPECT_EQ(p->Find(CounterRole::kXmitData)->Scaled(), 4.0 * 230442669431839.0);
    EXPECT_FALSE(p->xmit_bytes_per_s.has_value());  // one pass: no rate yet
  }
  const PortSample* bond = Port(s, "mlx5_bond_0");
  ASSERT_NE(bond, nullptr);
  EXPECT_EQ(bond->link_layer, "Ethernet");
  EXPECT_EQ(bond->rate_gbps, 200.0);
  EXPECT_EQ(bond->hca_type, "MT41692");
  // mlx5_1's link_downed is stuck at the 8-bit maximum.
  const CounterReading* ld = Port(s, "mlx5_1")->Find(CounterRole::kLinkDowned);
  EXPECT_EQ(ld->value, 255u);
  EXPECT_TRUE(ld->saturated);
  EXPECT_FALSE(Port(s, "mlx5_0")->Find(CounterRole::kLinkDowned)->saturated);
  EXPECT_EQ(Port(s, "mlx5_1")->Find(CounterRole::kRcvData)->value, 205128687774249u);
  EXPECT_EQ(sampler.stats().unparsable + sampler.stats().missing + sampler.stats().io_errors, 0u);

  clock.Advance(1s);
  const auto& s2 = sampler.SampleOnce();  // nothing moves in a static tree
  const PortSample* p0 = Port(s2, "mlx5_0");
  EXPECT_DOUBLE_EQ(p0->interval_s, 1.0);
  EXPECT_EQ(p0->xmit_bytes_per_s, 0.0);
  EXPECT_EQ(p0->xmit_wait_ratio, 0.0);
  EXPECT_EQ(Counter(*Port(s2, "mlx5_1"), "link_downed")->delta.kind, DeltaKind::kSaturated);
  EXPECT_FALSE(Counter(*Port(s2, "mlx5_1"), "link_downed")->rate.has_value());  // unknown, not 0
}

class SamplerSynthetic : public ::testing::Test {
 protected:
  void SetUp() override {
    fs_.AddPort("mlx5_0", 1);
    fs_.Counter("mlx5_0", 1, "port_xmit_data", "1000");
    fs_.Counter("mlx5_0", 1, "port_xmit_wait", "0");
    fs_.Counter("mlx5_0", 1, "symbol_error", "100");
    fs_.Counter("mlx5_0", 1, "link_downed", "3");
    fs_.HwCounter("mlx5_0", 1, "out_of_sequence", "4294967000");
    fs_.HwCounter("mlx5_0", 1, "rp_cnp_handled", "0");
    fs_.HwCounter("mlx5_0", 1, "out_of_buffer", "65535");
  }
  const PortSample& Pass() {
    const auto& s = sampler_.SampleOnce();
    EXPECT_EQ(s.size(), 1u);
    return s.front();
  }
  FakeSysfs fs_;
  FakeClock clock_;
  Sampler sampler_{{.sysfs_root = fs_.root()}, clock_};
};

TEST_F(SamplerSynthetic, RatesWrapResetAndStuckCounters) {
  Pass();
  fs_.Counter("mlx5_0", 1, "port_xmit_data", "1250");       // 250 words = 1000 bytes
  fs_.Counter("mlx5_0", 1, "port_xmit_wait", "625000000");  // 5e9 bytes of 50e9 B/s line time
  fs_.Counter("mlx5_0", 1, "symbol_error", "5");            // cleared by someone
  fs_.HwCounter("mlx5_0", 1, "out_of_sequence", "200");     // wrapped at 2^32
  fs_.HwCounter("mlx5_0", 1, "rp_cnp_handled", "5000");
  clock_.Advance(1s);
  const PortSample& p = Pass();
  EXPECT_DOUBLE_EQ(*p.xmit_bytes_per_s, 1000.0);
  EXPECT_DOUBLE_EQ(*p.xmit_wait_ratio, 0.1);
  EXPECT_DOUBLE_EQ(*p.cnp_handled_per_s, 5000.0);
  const CounterReading* sym = Counter(p, "symbol_error");
  EXPECT_EQ(sym->delta.kind, DeltaKind::kReset);
  EXPECT_FALSE(sym->rate.has_value());
  const CounterReading* oos = Counter(p, "out_of_sequence");
  EXPECT_EQ(oos->delta.kind, DeltaKind::kWrapped);
  EXPECT_DOUBLE_EQ(*oos->rate, 496.0);
  // out_of_buffer sat at 65535 on both passes: an unknown-width counter stuck at 2^16-1.
  EXPECT_TRUE(Counter(p, "out_of_buffer")->saturated);
  EXPECT_EQ(sampler_.stats().resets, 1u);
  EXPECT_EQ(sampler_.stats().wraps, 1u);
  // After the reset, the next increase has a rate again.
  fs_.Counter("mlx5_0", 1, "symbol_error", "7");
  clock_.Advance(2s);
  EXPECT_DOUBLE_EQ(*Counter(Pass(), "symbol_error")->rate, 1.0);
}

TEST_F(SamplerSynthetic, GarbageNotAvailableAndMissingFiles) {
  fs_.Counter("mlx5_0", 1, "symbol_error", "N/A (no PMA)");
  fs_.Counter("mlx5_0", 1, "link_downed", "lots");
  fs_.Write(fs_.PortDir("mlx5_0", 1) + "/rate", "fast\n");
  const PortSample& p = Pass();
  const CounterReading* sym = Counter(p, "symbol_error");
  EXPECT_FALSE(sym->valid);
  EXPECT_EQ(sym->error, ReadError::kUnavailable);
  EXPECT_EQ(Counter(p, "link_downed")->error, ReadError::kUnparsable);
  EXPECT_FALSE(p.rate_gbps.has_value());
  EXPECT_EQ(sampler_.stats().unavailable, 1u);
  EXPECT_EQ(sampler_.stats().unparsable, 2u);
  fs_.Remove(fs_.PortDir("mlx5_0", 1) + "/counters/port_xmit_data");
  fs_.Counter("mlx5_0", 1, "link_downed", "4");
  clock_.Advance(1s);
  const PortSample& p2 = Pass();
  EXPECT_FALSE(p2.vanished);
  EXPECT_EQ(Counter(p2, "port_xmit_data")->error, ReadError::kMissing);
  EXPECT_FALSE(p2.xmit_bytes_per_s.has_value());
  // link_downed recovered from garbage: a fresh baseline, not a bogus delta.
  EXPECT_EQ(Counter(p2, "link_downed")->delta.kind, DeltaKind::kFirst);
  EXPECT_EQ(sampler_.stats().missing, 1u);
}

TEST_F(SamplerSynthetic, DeviceVanishesAndComesBack) {
  fs_.AddPort("mlx5_1", 1);
  fs_.Counter("mlx5_1", 1, "symbol_error", "0");
  ASSERT_EQ(sampler_.SampleOnce().size(), 2u);
  fs_.Remove("class/infiniband/mlx5_1");
  clock_.Advance(1s);
  const auto& s = sampler_.SampleOnce();
  ASSERT_EQ(s.size(), 2u);
  EXPECT_FALSE(Port(s, "mlx5_0")->vanished);
  EXPECT_TRUE(Port(s, "mlx5_1")->vanished);
  EXPECT_EQ(Counter(*Port(s, "mlx5_1"), "symbol_error")->error, ReadError::kGone);
  EXPECT_EQ(sampler_.stats().vanished, 1u);
  clock_.Advance(1s);
  const auto& s3 = sampler_.SampleOnce();  // rescanned without it
  ASSERT_EQ(s3.size(), 1u);
  // mlx5_0 kept its history across the rescan: a delta, not a fresh baseline.
  EXPECT_EQ(Counter(s3.front(), "symbol_error")->delta.kind, DeltaKind::kOk);
  fs_.AddPort("mlx5_1", 1);
  fs_.Counter("mlx5_1", 1, "symbol_error", "0");
  Sampler fresh({.sysfs_root = fs_.root(), .rescan_every = 1}, clock_);
  EXPECT_EQ(fresh.SampleOnce().size(), 2u);
}

size_t OpenFdCount() {
  size_t n = 0;
  std::error_code ec;
  for (auto it = std::filesystem::directory_iterator("/proc/self/fd", ec);
       !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
    ++n;
  }
  return n;
}

TEST_F(SamplerSynthetic, KeptDescriptorsRereadNewValuesWithinTheirCap) {
  // The fixture's sampler keeps every counter file open (7 < 512): values written later must
  // still be read, since each pass reads from offset 0.
  Pass();
  fs_.Counter("mlx5_0", 1, "port_xmit_data", "2000");
  clock_.Advance(1s);
  EXPECT_DOUBLE_EQ(*Pass().xmit_bytes_per_s, 4000.0);
  // A sampler allowed 3 open files keeps 3 and opens and closes the rest each pass.
  const size_t before = OpenFdCount();
  Sampler capped({.sysfs_root = fs_.root(), .max_open_files = 3}, clock_);
  capped.SampleOnce();
  const size_t dirs = 3;   // the port, counters/ and hw_counters/ directories
  const size_t state = 4;  // state, phys_state, rate and link_layer, always kept
  EXPECT_EQ(OpenFdCount(), before + dirs + state + 3);
  fs_.Counter("mlx5_0", 1, "port_xmit_data", "3000");
  fs_.HwCounter("mlx5_0", 1, "rp_cnp_handled", "10");
  clock_.Advance(1s);
  const PortSample& p = capped.SampleOnce().front();
  EXPECT_DOUBLE_EQ(*p.xmit_bytes_per_s, 4000.0);
  EXPECT_DOUBLE_EQ(*p.cnp_handled_per_s, 10.0);
  EXPECT_EQ(OpenFdCount(), before + dirs + state + 3);
}

TEST_F(SamplerSynthetic, SlowTierIsReadEveryNthPassWithRatesOverItsOwnInterval) {
  fs_.HwCounter("mlx5_0", 1, "rx_write_requests", "100");  // no role: slow tier
  Sampler tiered({.sysfs_root = fs_.root(), .slow_every = 3}, clock_);
  const PortSample& p1 = tiered.SampleOnce().front();
  for (const CounterReading& c : p1.counters) EXPECT_TRUE(c.fresh) << c.name;  // all on pass 1
  EXPECT_TRUE(Counter(p1, "rx_write_requests")->slow_tier);
  EXPECT_TRUE(Counter(p1, "out_of_buffer")->slow_tier);
  for (const char* fast : {"port_xmit_data", "port_xmit_wait", "symbol_error", "link_downed",
                           "out_of_sequence", "rp_cnp_handled"}) {
    EXPECT_FALSE(Counter(p1, fast)->slow_tier) << fast;
  }
  const uint64_t all_files = tiered.stats().files_read;
  EXPECT_EQ(all_files, 2u + 2u + 8u);  // state, phys_state, rate, link_layer, 8 counters

  // Passes 2 and 3 read the fast tier only: the slow counter keeps its last reading, and the
  // rate and link_layer files are not read while the state stays.
  fs_.HwCounter("mlx5_0", 1, "rx_write_requests", "160");
  fs_.Write(fs_.PortDir("mlx5_0", 1) + "/rate", "200 Gb/sec (4X HDR)\n");
  for (int pass = 2; pass <= 3; ++pass) {
    fs_.Counter("mlx5_0", 1, "port_xmit_data", std::to_string(1000 + 250 * (pass - 1)));
    clock_.Advance(1s);
    const uint64_t files_before = tiered.stats().files_read;
    const PortSample& p = tiered.SampleOnce().front();
    EXPECT_EQ(tiered.stats().files_read - files_before, 2u + 6u) << pass;
    EXPECT_DOUBLE_EQ(*p.xmit_bytes_per_s, 1000.0) << pass;  // over the 1 s pass interval
    const CounterReading* slow = Counter(p, "rx_write_requests");
    EXPECT_FALSE(slow->fresh);
    EXPECT_TRUE(slow->valid);
    EXPECT_EQ(slow->value, 100u);
    EXPECT_EQ(p.rate_gbps, 400.0);
  }
  // Pass 4 reads everything again; the slow counter's rate runs over the 3 s since its last read.
  clock_.Advance(1s);
  const PortSample& p4 = tiered.SampleOnce().front();
  const CounterReading* slow = Counter(p4, "rx_write_requests");
  EXPECT_TRUE(slow->fresh);
  EXPECT_EQ(slow->value, 160u);
  EXPECT_EQ(slow->delta.kind, DeltaKind::kOk);
  EXPECT_EQ(slow->delta.raw, 60u);
  EXPECT_DOUBLE_EQ(*slow->rate, 20.0);
  EXPECT_DOUBLE_EQ(p4.interval_s, 1.0);
  EXPECT_EQ(p4.rate_gbps, 200.0);
  EXPECT_TRUE(Counter(p4, "out_of_buffer")->saturated);  // stuck at 65535 across the 3 s

  // A slow counter cleared between its reads reads as a reset, counted once.
  fs_.HwCounter("mlx5_0", 1, "rx_write_requests", "7");
  const uint64_t resets = tiered.stats().resets;
  for (int pass = 5; pass <= 7; ++pass) {
    clock_.Advance(1s);
    const PortSample& p = tiered.SampleOnce().front();
    EXPECT_EQ(Counter(p, "rx_write_requests")->fresh, pass == 7) << pass;
  }
  EXPECT_EQ(Counter(tiered.SampleOnce().front(), "rx_write_requests")->delta.kind,
            DeltaKind::kReset);
  EXPECT_EQ(tiered.stats().resets, resets + 1);
}

TEST_F(SamplerSynthetic, AStateChangeRereadsTheRateAtOnce) {
  Sampler tiered({.sysfs_root = fs_.root(), .slow_every = 10}, clock_);
  EXPECT_EQ(tiered.SampleOnce().front().rate_gbps, 400.0);
  // The link retrains at a lower speed: state and phys_state move, and the rate follows in the
  // same pass although the slow tier is not due.
  fs_.Write(fs_.PortDir("mlx5_0", 1) + "/state", "1: DOWN\n");
  fs_.Write(fs_.PortDir("mlx5_0", 1) + "/phys_state", "2: Polling\n");
  fs_.Write(fs_.PortDir("mlx5_0", 1) + "/rate", "10 Gb/sec (4X SDR)\n");
  clock_.Advance(1s);
  const PortSample& down = tiered.SampleOnce().front();
  EXPECT_EQ(down.state, "DOWN");
  EXPECT_EQ(down.phys_state, "Polling");
  EXPECT_EQ(down.rate_gbps, 10.0);
  // The port's kept state descriptor sees a removed port: the port vanished, slow tier included.
  fs_.Remove("class/infiniband/mlx5_0");
  clock_.Advance(1s);
  const PortSample& gone = tiered.SampleOnce().front();
  EXPECT_TRUE(gone.vanished);
  EXPECT_EQ(Counter(gone, "out_of_buffer")->error, ReadError::kGone);
}

// A kept descriptor outside sysfs serves an unlinked file; the sampler fstat()s kept files only
// in a directory that changed since its last look, or that had changed less than a second before.
TEST_F(SamplerSynthetic, UnlinkChecksOnlyWhereADirectoryChanged) {
  std::this_thread::sleep_for(1100ms);  // the fixture's directories are now quiet
  Pass();                               // first look: every file checked
  const SamplerStats first = sampler_.stats();
  EXPECT_EQ(first.unlink_checks, first.files_read);
  EXPECT_EQ(first.files_opened, first.files_read);
  clock_.Advance(1s);
  fs_.Counter("mlx5_0", 1, "port_xmit_data", "1250");  // rewritten in place: no directory change
  EXPECT_DOUBLE_EQ(*Pass().xmit_bytes_per_s, 1000.0);
  const SamplerStats quiet = sampler_.stats();
  EXPECT_EQ(quiet.files_read - first.files_read, first.files_read);  // rate, link_layer too
  EXPECT_EQ(quiet.unlink_checks, first.unlink_checks);
  EXPECT_EQ(quiet.files_opened, first.files_opened);

  // One counter file unlinked, one hw counter replaced by a rename: their directories changed,
  // so their files are checked (the port directory's are not); the unlinked one reads missing at
  // once and the replaced one reads its new file, not the kept old one.
  fs_.Remove(fs_.PortDir("mlx5_0", 1) + "/counters/symbol_error");
  fs_.Write(fs_.PortDir("mlx5_0", 1) + "/hw_counters/.new", "5000\n");
  std::filesystem::rename(
      std::filesystem::path(fs_.root()) / fs_.PortDir("mlx5_0", 1) / "hw_counters/.new",
      std::filesystem::path(fs_.root()) / fs_.PortDir("mlx5_0", 1) / "hw_counters/rp_cnp_handled");
  clock_.Advance(1s);
  const PortSample& p = Pass();
  EXPECT_EQ(Counter(p, "symbol_error")->error, ReadError::kMissing);
  EXPECT_FALSE(p.vanished);
  const SamplerStats changed = sampler_.stats();
  EXPECT_EQ(changed.unlink_checks - quiet.unlink_checks, 7u);  // 4 counters/ + 3 hw_counters/
  // rp_cnp_handled: the replaced file reads missing once (its kept descriptor is dropped), then
  // the new file is opened and read.
  EXPECT_EQ(Counter(p, "rp_cnp_handled")->error, ReadError::kMissing);
  clock_.Advance(1s);
  EXPECT_EQ(Counter(Pass(), "rp_cnp_handled")->value, 5000u);
}

// A file read only on slow passes (rate, a slow-tier counter) and replaced while a fast pass
// sees its directory change is still checked on the next slow pass, not read through the kept
// descriptor of the old file.
TEST_F(SamplerSynthetic, AFileOfTheSlowTierReplacedBeforeAFastPassIsReadAnewOnTheNextSlowPass) {
  fs_.HwCounter("mlx5_0", 1, "rx_write_requests", "100");  // no role: slow tier
  Sampler tiered({.sysfs_root = fs_.root(), .slow_every = 3}, clock_);
  std::this_thread::sleep_for(1100ms);  // the directories are quiet
  tiered.SampleOnce();                  // pass 1, slow: every file opened and kept
  const std::string port = fs_.PortDir("mlx5_0", 1);
  const std::filesystem::path root(fs_.root());
  fs_.Write(port + "/.rate", "200 Gb/sec (4X HDR)\n");
  std::filesystem::rename(root / port / ".rate", root / port / "rate");
  fs_.Write(port + "/hw_counters/.new", "160\n");
  std::filesystem::rename(root / port / "hw_counters/.new",
                          root / port / "hw_counters/rx_write_requests");
  std::this_thread::sleep_for(1100ms);  // quiet again before the fast pass looks
  clock_.Advance(1s);
  const PortSample& p2 = tiered.SampleOnce().front();  // fast: sees both directories changed
  EXPECT_FALSE(Counter(p2, "rx_write_requests")->fresh);
  clock_.Advance(1s);
  tiered.SampleOnce();  // fast
  clock_.Advance(1s);
  // Pass 4, slow: both files are checked, and their kept (old) descriptors dropped: each reads
  // missing once, never the old file's value, as in UnlinkChecksOnlyWhereADirectoryChanged.
  const PortSample& p4 = tiered.SampleOnce().front();
  EXPECT_FALSE(p4.rate_gbps.has_value());
  EXPECT_EQ(Counter(p4, "rx_write_requests")->error, ReadError::kMissing);
  for (int pass = 5; pass <= 6; ++pass) {
    clock_.Advance(1s);
    tiered.SampleOnce();
  }
  clock_.Advance(1s);
  // Pass 7, slow: the new files, opened afresh.
  const PortSample& p7 = tiered.SampleOnce().front();
  EXPECT_EQ(p7.rate_gbps, 200.0);
  const CounterReading* slow = Counter(p7, "rx_write_requests");
  EXPECT_TRUE(slow->fresh);
  EXPECT_EQ(slow->value, 160u);
}

TEST_F(SamplerSynthetic, ARescanKeepsTheDescriptorsOfAPortInTheSameDirectories) {
  Sampler rescanning({.sysfs_root = fs_.root(), .rescan_every = 1}, clock_);
  rescanning.SampleOnce();
  const SamplerStats first = rescanning.stats();
  fs_.Counter("mlx5_0", 1, "port_xmit_data", "1250");
  clock_.Advance(1s);
  const PortSample& p = rescanning.SampleOnce().front();
  EXPECT_EQ(rescanning.stats().rescans, first.rescans + 1);
  EXPECT_EQ(rescanning.stats().files_opened, first.files_opened);  // nothing opened again
  EXPECT_DOUBLE_EQ(*p.xmit_bytes_per_s, 1000.0);                   // history kept as before
  // The port's directory replaced by a new one: nothing carries over, the new files are read.
  fs_.Remove("class/infiniband/mlx5_0");
  fs_.AddPort("mlx5_0", 1);
  fs_.Counter("mlx5_0", 1, "port_xmit_data", "2000");
  clock_.Advance(1s);
  const uint64_t opened = rescanning.stats().files_opened;
  const PortSample& q = rescanning.SampleOnce().front();
  EXPECT_FALSE(q.vanished);
  EXPECT_EQ(Counter(q, "port_xmit_data")->value, 2000u);
  EXPECT_EQ(q.state, "ACTIVE");
  EXPECT_EQ(rescanning.stats().files_opened - opened, 5u);  // state, phys_state, rate, link, 1
}

TEST(SamplerEmpty, NoInfinibandClassMeansNoPorts) {
  FakeSysfs fs;
  FakeClock clock;
  Sampler sampler({.sysfs_root = fs.root()}, clock);
  EXPECT_TRUE(sampler.SampleOnce().empty());
  Sampler nowhere({.sysfs_root = "/nonexistent/fw"}, clock);
  EXPECT_TRUE(nowhere.SampleOnce().empty());
}

class FakePause : public EthernetStatsSource {
 public:
  Status Read(std::string_view netdev,
              std::vector<std::pair<std::string, uint64_t>>& out) override {
    if (netdev != "eth2") return Status::NotFound("no such netdev");
    out = {{"rx_prio3_pause", rx_}, {"tx_prio3_pause", 7}, {"rx_bytes", 1}};
    return Status::Ok();
  }
  uint64_t rx_ = 100;
};

TEST(SamplerEthtool, PauseCountersFromTheSeam) {
  FakeSysfs fs;
  fs.AddPort("mlx5_2", 1, "200 Gb/sec (4X HDR)", "Ethernet");
  fs.Write("class/infiniband/mlx5_2/device/net/eth2/mtu", "9000\n");
  FakeClock clock;
  FakePause pause;
  Sampler sampler({.sysfs_root = fs.root(), .ethernet_stats = &pause}, clock);
  const PortSample& p = sampler.SampleOnce().front();
  EXPECT_EQ(p.netdev, "eth2");
  ASSERT_EQ(p.counters.size(), 2u);  // rx_bytes is not a pause counter
  EXPECT_EQ(p.counters[0].name, "rx_prio3_pause");
  EXPECT_EQ(p.counters[0].group, CounterGroup::kEthtool);
  EXPECT_EQ(p.counters[0].value, 100u);
  pause.rx_ = 160;
  clock.Advance(2s);
  EXPECT_DOUBLE_EQ(*sampler.SampleOnce().front().counters[0].rate, 30.0);
}

}  // namespace
}  // namespace fw::counters
