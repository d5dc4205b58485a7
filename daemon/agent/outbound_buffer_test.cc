// Sequence numbers, acks, resend after reconnect, and overflow accounting.
#include "daemon/agent/outbound_buffer.h"

#include <gtest/gtest.h>

namespace fw::agent {
namespace {

fabricwatch::v1::ProbeBatch Batch(uint64_t id) {
  fabricwatch::v1::ProbeBatch b;
  b.set_test_id(id);
  return b;
}

TEST(OutboundBufferTest, SequencesAckAndResend) {
  OutboundBuffer buf(100, 1 << 20);
  for (int i = 1; i <= 5; ++i) EXPECT_EQ(buf.Push(Batch(i)), static_cast<uint64_t>(i));
  auto first = buf.TakeUnsent(3);
  ASSERT_EQ(first.size(), 3u);
  EXPECT_EQ(first[0].seq(), 1u);
  EXPECT_EQ(buf.TakeUnsent(10).size(), 2u);
  EXPECT_TRUE(buf.TakeUnsent(10).empty());
  buf.Ack(2);
  EXPECT_EQ(buf.size(), 3u);
  // The connection broke before 3..5 were acknowledged: they go out again, in order.
  buf.RewindForResend();
  auto again = buf.TakeUnsent(10);
  ASSERT_EQ(again.size(), 3u);
  EXPECT_EQ(again[0].seq(), 3u);
  EXPECT_EQ(again[2].test_id(), 5u);
  buf.Ack(5);
  EXPECT_EQ(buf.size(), 0u);
  EXPECT_EQ(buf.bytes(), 0u);
}

// The aggregator sends one ack for several batches (docs/durability.md, "Acks per stream"): one
// cumulative ack releases every batch up to it, also after a reconnect lost the ack in flight.
TEST(OutboundBufferTest, OneAckReleasesEveryBatchUpToItAlsoAfterAReconnect) {
  OutboundBuffer buf(100, 1 << 20);
  for (int i = 1; i <= 6; ++i) buf.Push(Batch(i));
  EXPECT_EQ(buf.TakeUnsent(64).size(), 6u);  // sent without waiting for any ack
  buf.Ack(4);
  EXPECT_EQ(buf.size(), 2u);
  // The ack of 5 and 6 was lost with the connection: both go out again, and the new session's
  // resume point (6: the aggregator stored them) releases both; nothing is left to send.
  buf.RewindForResend();
  auto again = buf.TakeUnsent(64);
  ASSERT_EQ(again.size(), 2u);
  EXPECT_EQ(again[0].seq(), 5u);
  buf.Ack(6);
  EXPECT_EQ(buf.size(), 0u);
  EXPECT_EQ(buf.bytes(), 0u);
  EXPECT_EQ(buf.acked(), 6u);
  EXPECT_TRUE(buf.TakeUnsent(64).empty());
}

TEST(OutboundBufferTest, OverflowDropsOldestAndCounts) {
  OutboundBuffer buf(3, 1 << 20);
  for (int i = 1; i <= 5; ++i) buf.Push(Batch(i));
  EXPECT_EQ(buf.size(), 3u);
  EXPECT_EQ(buf.dropped(), 2u);
  auto left = buf.TakeUnsent(10);
  ASSERT_EQ(left.size(), 3u);
  EXPECT_EQ(left[0].seq(), 3u);  // the aggregator will see a gap of 2
}

TEST(OutboundBufferTest, ByteBudget) {
  OutboundBuffer buf(1000, 64);
  fabricwatch::v1::ProbeBatch big;
  for (int i = 0; i < 10; ++i) big.add_results()->set_peer("peer-node-with-a-long-name");
  buf.Push(big);
  buf.Push(big);
  EXPECT_EQ(buf.size(), 1u);  // the newest batch always stays, even if alone over budget
  EXPECT_EQ(buf.dropped(), 1u);
}

TEST(OutboundBufferTest, StaleAckIsHarmless) {
  OutboundBuffer buf(10, 1 << 20);
  buf.Push(Batch(1));
  buf.Push(Batch(2));
  buf.Ack(2);
  buf.Ack(1);
  EXPECT_EQ(buf.acked(), 2u);
  buf.RewindForResend();
  EXPECT_TRUE(buf.TakeUnsent(10).empty());
}

}  // namespace
}  // namespace fw::agent
