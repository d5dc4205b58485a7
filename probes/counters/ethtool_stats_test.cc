// The SIOCETHTOOL reader against a real kernel driver: a veth pair inside a network namespace this
// test creates and always deletes. Needs root and iproute2; skips otherwise.
#include "probes/counters/ethtool_stats.h"

#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <thread>

namespace fw::counters {
namespace {

using ::testing::Contains;
using ::testing::Key;

int Sh(const std::string& cmd) { return std::system((cmd + " >/dev/null 2>&1").c_str()); }

class Netns {
 public:
  explicit Netns(std::string name) : name_(std::move(name)) {
    ok_ = Sh("ip netns add " + name_) == 0;
  }
  ~Netns() {
    if (ok_ && Sh("ip netns del " + name_) != 0) ADD_FAILURE() << "could not delete " << name_;
  }
  bool ok() const { return ok_; }
  const std::string& name() const { return name_; }

 private:
  std::string name_;
  bool ok_ = false;
};

TEST(EthtoolStats, ReadsVethStatisticsInsideANamespace) {
  if (geteuid() != 0 || Sh("ip -V") != 0) GTEST_SKIP() << "needs root and iproute2";
  Netns ns("fwct" + std::to_string(getpid()));
  ASSERT_TRUE(ns.ok());
  ASSERT_EQ(Sh("ip -n " + ns.name() + " link add fwa type veth peer name fwb"), 0);
  Status status, missing;
  std::vector<std::pair<std::string, uint64_t>> stats;
  // setns() changes only this thread's namespace; the test's main thread stays where it was.
  std::thread t([&] {
    const int fd = open(("/var/run/netns/" + ns.name()).c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0 || setns(fd, CLONE_NEWNET) != 0) {
      status = Status::Internal("setns failed");
      if (fd >= 0) close(fd);
      return;
    }
    close(fd);
    EthtoolStatsReader reader;
    status = reader.Read("fwa", stats);
    std::vector<std::pair<std::string, uint64_t>> none;
    missing = reader.Read("fw-no-such", none);
  });
  t.join();
  ASSERT_TRUE(status.ok()) << status.ToString();
  EXPECT_THAT(stats, Contains(Key("peer_ifindex")));  // veth's first statistic
  for (const auto& [name, value] : stats) EXPECT_FALSE(IsPauseCounterName(name)) << name;
  EXPECT_EQ(missing.code(), StatusCode::kNotFound);
}

TEST(EthtoolStats, RejectsBadNames) {
  EthtoolStatsReader reader;
  std::vector<std::pair<std::string, uint64_t>> out;
  EXPECT_EQ(reader.Read("", out).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(reader.Read(std::string(40, 'x'), out).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(IsPauseCounterName("rx_prio3_pause"));
  EXPECT_TRUE(IsPauseCounterName("tx_pause_ctrl_phy"));
  EXPECT_FALSE(IsPauseCounterName("rx_bytes"));
}

}  // namespace
}  // namespace fw::counters
