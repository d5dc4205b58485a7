// Tests of the verbs seam's value types and of the real libibverbs path on this machine.
#include "probes/rdma/verbs.h"

#include <gtest/gtest.h>

#include "probes/rdma/verbs_ibv.h"

namespace fw::rdma {
namespace {

TEST(Gid, ParsesAndPrintsTheSysfsForm) {
  auto g = Gid::Parse("0000:0000:0000:0000:0000:ffff:c612:0102\n");
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  EXPECT_TRUE(g->IsIpv4Mapped());
  EXPECT_FALSE(g->IsLinkLocal());
  EXPECT_EQ(g->raw[12], 198);
  EXPECT_EQ(g->raw[15], 2);
  EXPECT_EQ(g->ToString(), "0000:0000:0000:0000:0000:ffff:c612:0102");

  auto ll = Gid::Parse("fe80:0000:0000:0000:0ac0:ebff:fe1a:2b3c");
  ASSERT_TRUE(ll.ok());
  EXPECT_TRUE(ll->IsLinkLocal());
  EXPECT_FALSE(ll->IsIpv4Mapped());
}

TEST(Gid, RejectsMalformedText) {
  EXPECT_FALSE(Gid::Parse("").ok());
  EXPECT_FALSE(Gid::Parse("fe80::1").ok());
  EXPECT_FALSE(Gid::Parse("fe80-0000:0000:0000:0ac0:ebff:fe1a:2b3c").ok());
  EXPECT_FALSE(Gid::Parse("fe80:0000:0000:0000:0ac0:ebff:fe1a:2b3g").ok());
  EXPECT_FALSE(Gid::Parse("fe80:0000:0000:0000:0ac0:ebff:fe1a:2b3c0").ok());
}

// PLATFORM-NOTES: without kernel RDMA, ibv_get_device_list returns NULL with ENOSYS. The real
// seam must turn that into Unavailable (and a machine with RDMA into a list), never a crash.
TEST(Ibverbs, ListDevicesOnThisMachineIsAStatusNotACrash) {
  auto verbs = MakeIbverbs();
  auto list = verbs->ListDevices();
  if (list.ok()) {
    GTEST_SKIP() << "this machine has RDMA: " << list->size() << " devices";
  }
  EXPECT_EQ(list.status().code(), StatusCode::kUnavailable) << list.status().ToString();
  EXPECT_NE(list.status().message().find("ibv_get_device_list"), std::string::npos);
  auto ctx = verbs->Open("mlx5_0");
  EXPECT_FALSE(ctx.ok());
}

}  // namespace
}  // namespace fw::rdma
