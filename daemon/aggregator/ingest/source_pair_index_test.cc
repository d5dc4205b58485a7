// SourcePairIndex: remembers, replaces, grows, and is cleared instead of growing with stale
// entries.
#include "daemon/aggregator/ingest/source_pair_index.h"

#include <gtest/gtest.h>

namespace fw::aggregator {
namespace {

TEST(SourcePairIndexTest, FindsWhatWasPutByDestinationAndTransport) {
  SourcePairIndex idx;
  EXPECT_EQ(idx.Find(3, Transport::kUdp), nullptr);
  for (NodeId d = 0; d < 1000; ++d) idx.Put(d, Transport::kUdp, {d * 2, d + 1}, 2000);
  idx.Put(7, Transport::kTcpBw, {99, 5}, 2000);
  EXPECT_EQ(idx.size(), 1001u);
  EXPECT_LE(idx.size() * 2, idx.capacity());
  for (NodeId d = 0; d < 1000; ++d) {
    const SourcePairIndex::Hit* h = idx.Find(d, Transport::kUdp);
    ASSERT_NE(h, nullptr) << d;
    EXPECT_EQ(h->index, d * 2);
    EXPECT_EQ(h->generation, d + 1);
  }
  ASSERT_NE(idx.Find(7, Transport::kTcpBw), nullptr);
  EXPECT_EQ(idx.Find(7, Transport::kTcpBw)->index, 99u);
  EXPECT_EQ(idx.Find(1000, Transport::kUdp), nullptr);
  EXPECT_EQ(idx.Find(8, Transport::kTcpBw), nullptr);
  // A second Put of a key replaces its hit.
  idx.Put(5, Transport::kUdp, {1, 9}, 2000);
  EXPECT_EQ(idx.size(), 1001u);
  EXPECT_EQ(idx.Find(5, Transport::kUdp)->generation, 9u);
}

TEST(SourcePairIndexTest, StaleEntriesAreClearedNotAccumulated) {
  // A source with 4 live pairs whose destinations keep changing (re-plans): the table stays
  // bounded by its live pairs, and the newest entry is always found.
  SourcePairIndex idx;
  for (NodeId d = 0; d < 100'000; ++d) {
    idx.Put(d, Transport::kUdp, {d, 1}, 4);
    ASSERT_NE(idx.Find(d, Transport::kUdp), nullptr);
  }
  EXPECT_LE(idx.capacity(), 64u);
}

}  // namespace
}  // namespace fw::aggregator
