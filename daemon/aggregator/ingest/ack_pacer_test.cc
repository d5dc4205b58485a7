// AckPacer: several durable batches of a stream leave as one ack with the highest seq; an ack waits
// at most its delay; the resume point goes at once; nothing is handed out twice or lost.
#include "daemon/aggregator/ingest/ack_pacer.h"

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <utility>
#include <vector>

namespace fw::aggregator {
namespace {

using Stream = std::shared_ptr<int>;
using Pacer = AckPacer<Stream>;
using Due = std::vector<std::pair<Stream, uint64_t>>;
using std::chrono::milliseconds;

constexpr milliseconds kDelay{1000};
const Pacer::Clock::time_point kT0 = Pacer::Clock::time_point() + std::chrono::hours(1);

TEST(AckPacerTest, TwoBatchesLeaveAsOneAckWithTheHighestSeq) {
  Pacer p(kDelay, 2);
  Stream a = std::make_shared<int>(1);
  Due due;
  p.Add(a, 7, false, kT0);
  p.TakeDue(kT0, due);
  EXPECT_TRUE(due.empty());  // one batch waits for a second one or for its delay
  p.Add(a, 8, false, kT0 + milliseconds(250));
  p.TakeDue(kT0 + milliseconds(250), due);
  ASSERT_EQ(due.size(), 1u);
  EXPECT_EQ(due[0].first, a);
  EXPECT_EQ(due[0].second, 8u);
  EXPECT_EQ(p.held(), 0u);
  // Its age entry is stale now: nothing more comes out of it, at any time.
  due.clear();
  p.TakeDue(kT0 + std::chrono::hours(1), due);
  EXPECT_TRUE(due.empty());
  EXPECT_FALSE(p.NextDue().has_value());
}

TEST(AckPacerTest, ManyAcksOfOneCommitFoldIntoOneMessageEvenOutOfOrder) {
  Pacer p(kDelay, 2);
  Stream a = std::make_shared<int>(1);
  Stream b = std::make_shared<int>(2);
  for (uint64_t seq : {3, 9, 5, 4}) p.Add(a, seq, false, kT0);
  p.Add(b, 1, false, kT0);
  Due due;
  p.TakeDue(kT0, due);
  ASSERT_EQ(due.size(), 1u);  // a: four batches, one ack; b: one batch, held
  EXPECT_EQ(due[0].first, a);
  EXPECT_EQ(due[0].second, 9u);
  EXPECT_EQ(p.held(), 1u);
}

TEST(AckPacerTest, AnAckWaitsAtMostItsDelayAndTheOldestFallsDueFirst) {
  Pacer p(kDelay, 4);
  Stream a = std::make_shared<int>(1);
  Stream b = std::make_shared<int>(2);
  p.Add(a, 1, false, kT0);
  p.Add(b, 1, false, kT0 + milliseconds(300));
  p.Add(a, 2, false, kT0 + milliseconds(600));  // joins a's held ack: its age is its oldest batch's
  ASSERT_TRUE(p.NextDue().has_value());
  EXPECT_EQ(*p.NextDue(), kT0 + kDelay);
  Due due;
  p.TakeDue(kT0 + kDelay - milliseconds(1), due);
  EXPECT_TRUE(due.empty());
  p.TakeDue(kT0 + kDelay, due);
  ASSERT_EQ(due.size(), 1u);
  EXPECT_EQ(due[0].first, a);
  EXPECT_EQ(due[0].second, 2u);
  EXPECT_EQ(*p.NextDue(), kT0 + milliseconds(300) + kDelay);
  due.clear();
  p.TakeDue(kT0 + milliseconds(1300), due);
  ASSERT_EQ(due.size(), 1u);
  EXPECT_EQ(due[0].first, b);
  EXPECT_FALSE(p.NextDue().has_value());
}

TEST(AckPacerTest, TheResumePointGoesAtOnceWithWhateverWaitsWithIt) {
  Pacer p(kDelay, 2);
  Stream a = std::make_shared<int>(1);
  p.Add(a, 41, true, kT0);
  Due due;
  p.TakeDue(kT0, due);
  ASSERT_EQ(due.size(), 1u);
  EXPECT_EQ(due[0].second, 41u);
  // After an ack went out, a new hold starts its own clock and count.
  due.clear();
  p.Add(a, 42, false, kT0 + milliseconds(500));
  p.TakeDue(kT0 + milliseconds(1400), due);
  EXPECT_TRUE(due.empty());
  EXPECT_EQ(*p.NextDue(), kT0 + milliseconds(1500));
  p.TakeDue(kT0 + milliseconds(1500), due);
  ASSERT_EQ(due.size(), 1u);
  EXPECT_EQ(due[0].second, 42u);
}

TEST(AckPacerTest, TakeAllHandsOutEveryHeldAckAndReleasesTheStreams) {
  Pacer p(kDelay, 8);
  std::vector<Stream> streams;
  for (int i = 0; i < 100; ++i) {
    streams.push_back(std::make_shared<int>(i));
    p.Add(streams.back(), static_cast<uint64_t>(i + 1), false, kT0 + milliseconds(i));
  }
  for (const Stream& s : streams) EXPECT_EQ(s.use_count(), 2);  // held by the pacer
  Due due;
  p.TakeAll(due);
  ASSERT_EQ(due.size(), 100u);
  EXPECT_EQ(p.held(), 0u);
  EXPECT_FALSE(p.NextDue().has_value());
  uint64_t sum = 0;
  for (const auto& [s, seq] : due) sum += seq - static_cast<uint64_t>(*s);
  EXPECT_EQ(sum, 100u);  // each stream's own seq (i + 1)
  due.clear();
  for (const Stream& s : streams) EXPECT_EQ(s.use_count(), 1);
}

// A model check: random adds over many streams and times; every Added seq is covered by exactly
// the next ack of its stream, no ack goes out later than its oldest batch's delay, and no stream
// gets an ack that covers nothing new.
TEST(AckPacerTest, EveryAddedSeqIsAckedInTimeAndOnlyOnce) {
  constexpr int kStreams = 20;
  Pacer p(milliseconds(100), 3);
  std::vector<Stream> streams;
  for (int i = 0; i < kStreams; ++i) streams.push_back(std::make_shared<int>(i));
  std::vector<uint64_t> added(kStreams, 0), acked(kStreams, 0);
  std::vector<std::optional<Pacer::Clock::time_point>> oldest(kStreams);
  uint64_t state = 12345;
  auto rnd = [&] {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    return static_cast<uint32_t>(state >> 33);
  };
  Pacer::Clock::time_point now = kT0;
  Due due;
  int acks = 0, batches = 0;
  auto check = [&] {
    for (auto& [s, seq] : due) {
      const int i = *s;
      EXPECT_GT(seq, acked[i]);
      EXPECT_EQ(seq, added[i]);  // covers everything added to it so far
      ASSERT_TRUE(oldest[i].has_value());
      EXPECT_LE(now, *oldest[i] + milliseconds(100));
      acked[i] = seq;
      oldest[i].reset();
      ++acks;
    }
    due.clear();
  };
  for (int step = 0; step < 5000; ++step) {
    now += milliseconds(rnd() % 7);
    if (auto next = p.NextDue(); next && *next < now) now = *next;  // the committer's timed wake
    const int n = static_cast<int>(rnd() % 4);
    for (int k = 0; k < n; ++k) {
      const int i = static_cast<int>(rnd() % kStreams);
      p.Add(streams[i], ++added[i], false, now);
      if (!oldest[i]) oldest[i] = now;
      ++batches;
    }
    p.TakeDue(now, due);
    check();
  }
  p.TakeAll(due);
  check();
  for (int i = 0; i < kStreams; ++i) EXPECT_EQ(acked[i], added[i]);
  EXPECT_LT(acks, batches / 2);  // about one ack per 2-3 batches here
}

}  // namespace
}  // namespace fw::aggregator
