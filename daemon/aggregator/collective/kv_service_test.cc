// The aggregator's rendezvous key-value service: parked gets released by a set, timeouts,
// membership checks, bounds, and a group's end.
#include "daemon/aggregator/collective/kv_service.h"

#include <gtest/gtest.h>

namespace fw::aggregator::collective {
namespace {

constexpr int64_t kS = 1'000'000'000;

TEST(KvService, ParkedGetIsReleasedBySet) {
  KvService kv;
  kv.OpenGroup("j1", {"a", "b", "c"}, 100 * kS);
  auto r = kv.Handle("b", "collective/j1/gloo/0", "", 1 * kS);
  EXPECT_TRUE(r.empty());  // parked
  r = kv.Handle("c", "collective/j1/gloo/0", "", 1 * kS);
  EXPECT_TRUE(r.empty());
  EXPECT_EQ(kv.waiters(), 2u);
  r = kv.Handle("a", "collective/j1/gloo/0", "addr-a", 2 * kS);
  ASSERT_EQ(r.size(), 3u);
  EXPECT_EQ(r[0].node, "a");  // the set's acknowledgement first
  EXPECT_TRUE(r[0].found);
  EXPECT_TRUE(r[0].value.empty());
  for (size_t i = 1; i < 3; ++i) {
    EXPECT_TRUE(r[i].found);
    EXPECT_EQ(r[i].value, "addr-a");
  }
  EXPECT_EQ(kv.waiters(), 0u);
  r = kv.Handle("b", "collective/j1/gloo/0", "", 3 * kS);  // already there: answered at once
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].value, "addr-a");
}

TEST(KvService, ParkedGetTimesOut) {
  KvService kv({.get_timeout_ns = 5 * kS});
  kv.OpenGroup("j1", {"a", "b"}, 100 * kS);
  EXPECT_TRUE(kv.Handle("a", "collective/j1/nccl/unique_id", "", 10 * kS).empty());
  EXPECT_TRUE(kv.Expire(14 * kS).empty());
  auto r = kv.Expire(15 * kS);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].node, "a");
  EXPECT_FALSE(r[0].found);
  EXPECT_EQ(kv.counters().timeouts, 1u);
}

TEST(KvService, RefusesNonMembersAndBadKeys) {
  KvService kv;
  kv.OpenGroup("j1", {"a", "b"}, 100 * kS);
  auto r = kv.Handle("mallory", "collective/j1/gloo/0", "evil", kS);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_FALSE(r[0].found);
  EXPECT_EQ(kv.keys(), 0u);
  for (const std::string& key :
       {std::string("other/j1/x"), std::string("collective/j1"), std::string("collective//x"),
        std::string("collective/j1/"), "collective/j1/" + std::string(300, 'k')}) {
    r = kv.Handle("a", key, "v", kS);
    ASSERT_EQ(r.size(), 1u) << key;
    EXPECT_FALSE(r[0].found) << key;
  }
  r = kv.Handle("a", "collective/nope/x", "v", kS);  // no such group
  EXPECT_FALSE(r[0].found);
  const auto c = kv.counters();
  EXPECT_EQ(c.refused_not_member, 2u);
  EXPECT_EQ(c.refused_bad_key, 5u);
  EXPECT_EQ(kv.keys(), 0u);
}

TEST(KvService, BoundsKeysAndWaiters) {
  KvService kv({.max_keys = 2, .max_waiters = 1});
  kv.OpenGroup("j1", {"a"}, 100 * kS);
  EXPECT_TRUE(kv.Handle("a", "collective/j1/k1", "v", kS)[0].found);
  EXPECT_TRUE(kv.Handle("a", "collective/j1/k2", "v", kS)[0].found);
  EXPECT_FALSE(kv.Handle("a", "collective/j1/k3", "v", kS)[0].found);
  EXPECT_TRUE(kv.Handle("a", "collective/j1/k1", "v2", kS)[0].found);  // replacing is fine
  EXPECT_TRUE(kv.Handle("a", "collective/j1/w1", "", kS).empty());
  auto r = kv.Handle("a", "collective/j1/w2", "", kS);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_FALSE(r[0].found);
  EXPECT_EQ(kv.counters().refused_full, 2u);
}

TEST(KvService, GroupEndErasesKeysAndAnswersWaiters) {
  KvService kv;
  kv.OpenGroup("j1", {"a", "b"}, 10 * kS);
  kv.OpenGroup("j2", {"a"}, 100 * kS);
  ASSERT_TRUE(kv.Handle("a", "collective/j1/x", "1", kS)[0].found);
  ASSERT_TRUE(kv.Handle("a", "collective/j2/x", "1", kS)[0].found);
  EXPECT_TRUE(kv.Handle("b", "collective/j1/y", "", kS).empty());
  auto r = kv.Expire(10 * kS);  // j1 expires
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].node, "b");
  EXPECT_FALSE(r[0].found);
  EXPECT_EQ(kv.keys(), 1u);
  EXPECT_FALSE(kv.Handle("a", "collective/j1/x", "", 11 * kS)[0].found);  // closed group
  EXPECT_TRUE(kv.CloseGroup("j2").empty());
  EXPECT_EQ(kv.keys(), 0u);
}

}  // namespace
}  // namespace fw::aggregator::collective
