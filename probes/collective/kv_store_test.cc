// Tests for the in-memory rendezvous store: waiting reads, timeouts, bounds.
#include "probes/collective/kv_store.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

namespace fw::collective {
namespace {

using std::chrono::milliseconds;

TEST(InMemoryKvStore, GetWaitsForALaterSet) {
  InMemoryKvStore kv;
  std::thread setter([&] {
    std::this_thread::sleep_for(milliseconds(50));
    ASSERT_TRUE(kv.Set("g/rank1", "addr").ok());
  });
  const auto t0 = std::chrono::steady_clock::now();
  auto v = kv.Get("g/rank1", milliseconds(5000));
  setter.join();
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  EXPECT_EQ(*v, "addr");
  EXPECT_LT(std::chrono::steady_clock::now() - t0, milliseconds(2000));
}

TEST(InMemoryKvStore, GetTimesOutWithAClearError) {
  InMemoryKvStore kv;
  const auto t0 = std::chrono::steady_clock::now();
  auto v = kv.Get("g/missing", milliseconds(100));
  const auto waited = std::chrono::steady_clock::now() - t0;
  ASSERT_FALSE(v.ok());
  EXPECT_EQ(v.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(v.status().message().find("g/missing"), std::string::npos);
  EXPECT_GE(waited, milliseconds(100));
  EXPECT_LT(waited, milliseconds(2000));
}

TEST(InMemoryKvStore, EnforcesBounds) {
  InMemoryKvStore kv(2);
  EXPECT_EQ(kv.Set("", "x").code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(kv.Set(std::string(kMaxKvKeyBytes + 1, 'k'), "x").code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(kv.Set("k", std::string(kMaxKvValueBytes + 1, 'v')).code(),
            StatusCode::kInvalidArgument);
  EXPECT_TRUE(kv.Set("a", "1").ok());
  EXPECT_TRUE(kv.Set("b", "2").ok());
  EXPECT_EQ(kv.Set("c", "3").code(), StatusCode::kResourceExhausted);
  EXPECT_TRUE(kv.Set("a", "replaced").ok());  // replacing needs no new slot
  EXPECT_EQ(*kv.Get("a", milliseconds(0)), "replaced");
}

TEST(InMemoryKvStore, ErasePrefixDropsOneGroup) {
  InMemoryKvStore kv;
  ASSERT_TRUE(kv.Set("g1/a", "1").ok());
  ASSERT_TRUE(kv.Set("g1/b", "2").ok());
  ASSERT_TRUE(kv.Set("g2/a", "3").ok());
  EXPECT_EQ(kv.ErasePrefix("g1/"), 2u);
  EXPECT_EQ(kv.size(), 1u);
  EXPECT_TRUE(kv.Get("g2/a", milliseconds(0)).ok());
}

}  // namespace
}  // namespace fw::collective
