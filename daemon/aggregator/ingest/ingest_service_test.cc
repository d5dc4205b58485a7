// The Aggregator service on the async API, through a real server on 127.0.0.1 and a real client:
// the unary calls (Qualify, ListFindings: answers, refusals, many calls at once, and a shutdown with
// calls still waiting for their answer), and a Connect stream's durable acks (paced: one ack for
// several batches, an ack lost with its stream answered by the resume point).
#include "daemon/aggregator/ingest/ingest_service.h"

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "common/mutex.h"
#include "common/testing/temp_dir.h"
#include "daemon/aggregator/ingest/ingest_journal.h"
#include "exporter/registry.h"
#include "fabricwatch.grpc.pb.h"

namespace fw::aggregator {
namespace {

namespace v1 = fabricwatch::v1;

using QualifyDone = std::function<void(Status, const v1::QualifyReport&)>;

// Keeps every Qualify's request and `done` for the test to answer (or never answer) later.
class HoldingSink final : public IngestSink {
 public:
  void OnProbeBatch(const std::string&, const v1::ProbeBatch&) override {}
  void OnCounterBatch(const std::string&, const v1::CounterBatch&) override {}
  void OnCheckReport(const std::string&, const v1::CheckReport&) override {}
  std::optional<v1::ProbePlan> PlanFor(const std::string&) override { return std::nullopt; }
  void Qualify(const v1::QualifyRequest& request, QualifyDone done) override {
    MutexLock lock(mu_);
    held_.emplace_back(request, std::move(done));
    cv_.NotifyAll();
  }
  // Waits until `n` calls are held (at most 10 s) and takes them.
  std::vector<std::pair<v1::QualifyRequest, QualifyDone>> Take(size_t n) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    MutexLock lock(mu_);
    while (held_.size() < n && cv_.WaitUntil(mu_, deadline)) {
    }
    auto out = std::move(held_);
    held_.clear();
    return out;
  }

 private:
  Mutex mu_;
  CondVar cv_;
  std::vector<std::pair<v1::QualifyRequest, QualifyDone>> held_ FW_GUARDED_BY(mu_);
};

v1::QualifyReport ReportFor(const v1::QualifyRequest& r) {
  v1::QualifyReport out;
  out.set_job(r.job());
  out.set_state("done");
  out.add_nodes()->set_node(r.nodes_size() > 0 ? r.nodes(0) : "");
  return out;
}

class IngestServiceUnaryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    GrpcServer::Options o;
    o.listen = "127.0.0.1:0";
    auto s = GrpcServer::Start(o, fleet_, sink_, registry_);
    ASSERT_TRUE(s.ok()) << s.status().message();
    server_ = std::move(*s);
    channel_ = grpc::CreateChannel("127.0.0.1:" + std::to_string(server_->port()),
                                   grpc::InsecureChannelCredentials());
    stub_ = v1::Aggregator::NewStub(channel_);
  }
  void TearDown() override {
    if (server_) server_->Shutdown(0.5);
  }

  // A blocking Qualify with a deadline: its status, and the report in `out`.
  grpc::Status Qualify(const std::string& job, v1::QualifyReport* out, int deadline_s = 20) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(deadline_s));
    v1::QualifyRequest req;
    req.set_job(job);
    req.add_nodes("node-" + job);
    return stub_->Qualify(&ctx, req, out);
  }

  RealClock& clock_ = RealClock::Get();
  metrics::Registry registry_;
  FleetState fleet_{clock_, registry_, {}};
  HoldingSink sink_;
  std::unique_ptr<GrpcServer> server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Aggregator::Stub> stub_;
};

TEST_F(IngestServiceUnaryTest, QualifyIsAnsweredFromAnotherThread) {
  v1::QualifyReport report;
  grpc::Status st;
  std::thread client([&] { st = Qualify("j1", &report); });
  auto held = sink_.Take(1);
  ASSERT_EQ(held.size(), 1u);
  EXPECT_EQ(held[0].first.job(), "j1");
  std::thread([h = std::move(held[0])] { h.second(Status::Ok(), ReportFor(h.first)); }).join();
  client.join();
  ASSERT_TRUE(st.ok()) << st.error_message();
  EXPECT_EQ(report.job(), "j1");
  EXPECT_EQ(report.state(), "done");
  ASSERT_EQ(report.nodes_size(), 1);
  EXPECT_EQ(report.nodes(0).node(), "node-j1");
}

TEST_F(IngestServiceUnaryTest, RefusalsKeepTheirCodeAndAnswerOnlyOnce) {
  v1::QualifyReport report;
  grpc::Status st;
  std::thread client([&] { st = Qualify("bad", &report); });
  auto held = sink_.Take(1);
  ASSERT_EQ(held.size(), 1u);
  held[0].second(Status::InvalidArgument("no such profile"), {});
  // A second answer to the same call is dropped.
  held[0].second(Status::Ok(), ReportFor(held[0].first));
  client.join();
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(st.error_message(), "no such profile");

  grpc::ClientContext ctx;
  v1::ListFindingsRequest req;
  v1::ListFindingsResponse resp;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
  grpc::Status lf = stub_->ListFindings(&ctx, req, &resp);
  EXPECT_EQ(lf.error_code(), grpc::StatusCode::UNIMPLEMENTED);
  EXPECT_NE(lf.error_message().find("/api/v1/findings"), std::string::npos);
}

TEST_F(IngestServiceUnaryTest, ManyConcurrentCallsEachGetTheirOwnAnswer) {
  constexpr int kCalls = 64;
  std::vector<grpc::Status> st(kCalls);
  std::vector<v1::QualifyReport> reports(kCalls);
  std::vector<std::thread> clients;
  for (int i = 0; i < kCalls; ++i) {
    clients.emplace_back([&, i] { st[i] = Qualify(std::to_string(i), &reports[i]); });
  }
  // Every call reaches the sink before any is answered: none waits on another's answer.
  auto held = sink_.Take(kCalls);
  ASSERT_EQ(held.size(), static_cast<size_t>(kCalls));
  // Answered in reverse order, from four threads.
  std::vector<std::thread> answerers;
  for (int t = 0; t < 4; ++t) {
    answerers.emplace_back([&, t] {
      for (int i = kCalls - 1 - t; i >= 0; i -= 4) {
        held[static_cast<size_t>(i)].second(Status::Ok(),
                                            ReportFor(held[static_cast<size_t>(i)].first));
      }
    });
  }
  for (auto& a : answerers) a.join();
  for (auto& c : clients) c.join();
  for (int i = 0; i < kCalls; ++i) {
    ASSERT_TRUE(st[i].ok()) << i << ": " << st[i].error_message();
    EXPECT_EQ(reports[i].job(), std::to_string(i));
  }
}

TEST_F(IngestServiceUnaryTest, ShutdownAnswersCallsInFlightAndLateAnswersAreDropped) {
  constexpr int kCalls = 8;
  std::vector<grpc::Status> st(kCalls);
  std::vector<std::thread> clients;
  for (int i = 0; i < kCalls; ++i) {
    clients.emplace_back([&, i] {
      v1::QualifyReport r;
      st[i] = Qualify(std::to_string(i), &r);
    });
  }
  auto held = sink_.Take(kCalls);
  ASSERT_EQ(held.size(), static_cast<size_t>(kCalls));
  // One is answered while the server runs; the rest still wait when it stops.
  const int answered = std::stoi(held[0].first.job());
  held[0].second(Status::Ok(), ReportFor(held[0].first));
  const auto t0 = std::chrono::steady_clock::now();
  server_->Shutdown(0.5);
  const double shutdown_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  for (auto& c : clients) c.join();
  EXPECT_LT(shutdown_s, 10.0);
  for (int i = 0; i < kCalls; ++i) {
    if (i == answered) {
      EXPECT_TRUE(st[i].ok()) << st[i].error_message();
    } else {
      EXPECT_EQ(st[i].error_code(), grpc::StatusCode::UNAVAILABLE) << i << ": "
                                                                   << st[i].error_message();
    }
  }
  // The suites answer after the server is gone (and destroyed): nothing is touched.
  server_.reset();
  for (int i = 1; i < kCalls; ++i) {
    held[static_cast<size_t>(i)].second(Status::Ok(),
                                        ReportFor(held[static_cast<size_t>(i)].first));
  }
}

// Counts every probe batch the service stores, by seq.
class CountingSink final : public IngestSink {
 public:
  void OnProbeBatch(const std::string&, const v1::ProbeBatch& b) override {
    MutexLock lock(mu_);
    ++stored_[b.seq()];
  }
  void OnCounterBatch(const std::string&, const v1::CounterBatch&) override {}
  void OnCheckReport(const std::string&, const v1::CheckReport&) override {}
  std::optional<v1::ProbePlan> PlanFor(const std::string&) override { return std::nullopt; }
  std::map<uint64_t, int> stored() {
    MutexLock lock(mu_);
    return stored_;
  }

 private:
  Mutex mu_;
  std::map<uint64_t, int> stored_ FW_GUARDED_BY(mu_);
};

// A server with the durable journal, so every ack goes through the committer and its pacing; on
// one completion queue (a fleet of up to GrpcServer::kOneQueueNodes) and on the most.
class IngestServiceStreamTest : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override {
    auto j = IngestJournal::Open(IngestJournalPath(dir_.path()), 0);
    ASSERT_TRUE(j.ok()) << j.status().message();
    GrpcServer::Options o;
    o.listen = "127.0.0.1:0";
    o.journal = std::shared_ptr<IngestJournal>(std::move(*j));
    o.completion_queues = GetParam();
    auto s = GrpcServer::Start(o, fleet_, sink_, registry_);
    ASSERT_TRUE(s.ok()) << s.status().message();
    server_ = std::move(*s);
    stub_ = v1::Aggregator::NewStub(grpc::CreateChannel(
        "127.0.0.1:" + std::to_string(server_->port()), grpc::InsecureChannelCredentials()));
  }
  void TearDown() override {
    if (server_) server_->Shutdown(0.5);
  }

  struct Stream {
    grpc::ClientContext ctx;
    std::unique_ptr<grpc::ClientReaderWriter<v1::AgentMessage, v1::AggregatorMessage>> rw;
  };
  std::unique_ptr<Stream> Open() {
    auto st = std::make_unique<Stream>();
    st->ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    st->rw = stub_->Connect(&st->ctx);
    return st;
  }
  static bool Hello(Stream& st, uint64_t next_seq) {
    v1::AgentMessage m;
    m.mutable_hello()->set_node("n1");
    m.mutable_hello()->set_session_id(77);
    m.mutable_hello()->set_next_seq(next_seq);
    return st.rw->Write(m);
  }
  static bool Batch(Stream& st, uint64_t seq) {
    v1::AgentMessage m;
    m.mutable_probe_batch()->set_seq(seq);
    return st.rw->Write(m);
  }
  // Reads acks until one covers `seq`; returns every ack read (empty if the stream ended first).
  static std::vector<uint64_t> AcksThrough(Stream& st, uint64_t seq) {
    std::vector<uint64_t> acks;
    v1::AggregatorMessage in;
    while (st.rw->Read(&in)) {
      if (!in.has_ack()) continue;
      acks.push_back(in.ack().seq());
      if (in.ack().seq() >= seq) return acks;
    }
    return {};
  }

  // Waits up to 10 s until the sink holds batch `seq`.
  void WaitStored(uint64_t seq) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (sink_.stored().count(seq) == 0 && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }

  fw::testing::TempDir dir_{"fw-ingest-acks"};
  RealClock& clock_ = RealClock::Get();
  metrics::Registry registry_;
  FleetState fleet_{clock_, registry_, {}};
  CountingSink sink_;
  std::unique_ptr<GrpcServer> server_;
  std::unique_ptr<v1::Aggregator::Stub> stub_;
};

TEST_P(IngestServiceStreamTest, SeveralBatchesGetFewerAcksAndTheLastCoversThemAll) {
  auto st = Open();
  ASSERT_TRUE(Hello(*st, 0));
  // The resume point comes without waiting for pacing: the agent sends nothing before it.
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<uint64_t> resume = AcksThrough(*st, 0);
  ASSERT_EQ(resume, std::vector<uint64_t>{0});
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(900));
  for (uint64_t seq = 1; seq <= 5; ++seq) ASSERT_TRUE(Batch(*st, seq));
  std::vector<uint64_t> acks = AcksThrough(*st, 5);
  ASSERT_FALSE(acks.empty());
  EXPECT_EQ(acks.back(), 5u);
  // Two batches per ack at most, the odd one after its delay: never one ack per batch.
  EXPECT_LE(acks.size(), 3u);
  for (size_t i = 1; i < acks.size(); ++i) EXPECT_GT(acks[i], acks[i - 1]);
  std::map<uint64_t, int> stored = sink_.stored();
  EXPECT_EQ(stored.size(), 5u);
  for (const auto& [seq, n] : stored) EXPECT_EQ(n, 1) << seq;
  st->rw->WritesDone();
  EXPECT_TRUE(st->rw->Finish().ok());
}

TEST_P(IngestServiceStreamTest, AnAckLostWithItsStreamIsAnsweredByTheResumePointAndNotStoredTwice) {
  {
    auto st = Open();
    ASSERT_TRUE(Hello(*st, 0));
    ASSERT_EQ(AcksThrough(*st, 0), std::vector<uint64_t>{0});
    ASSERT_TRUE(Batch(*st, 1));
    ASSERT_TRUE(Batch(*st, 2));
    ASSERT_EQ(AcksThrough(*st, 2).back(), 2u);
    // Batch 3 alone waits for its delay: the stream goes before its ack does.
    ASSERT_TRUE(Batch(*st, 3));
    WaitStored(3);
    ASSERT_EQ(sink_.stored().count(3), 1u);
    st->ctx.TryCancel();
    st->rw->Finish();
  }
  // The agent still holds 3 (never acknowledged) and reconnects: the resume point covers it, so
  // the agent drops it; an agent that resends it anyway gets it acknowledged, not stored twice.
  auto st = Open();
  ASSERT_TRUE(Hello(*st, 3));
  ASSERT_EQ(AcksThrough(*st, 0), std::vector<uint64_t>{3});
  ASSERT_TRUE(Batch(*st, 3));
  ASSERT_TRUE(Batch(*st, 4));
  std::vector<uint64_t> acks = AcksThrough(*st, 4);
  ASSERT_FALSE(acks.empty());
  EXPECT_EQ(acks.back(), 4u);
  std::map<uint64_t, int> stored = sink_.stored();
  EXPECT_EQ(stored, (std::map<uint64_t, int>{{1, 1}, {2, 1}, {3, 1}, {4, 1}}));
  st->rw->WritesDone();
  EXPECT_TRUE(st->rw->Finish().ok());
}

// An ack still held for pacing when the server stops is durable and goes out before the stream
// ends (the agent drops that batch instead of resending it).
TEST_P(IngestServiceStreamTest, AShutdownSendsTheHeldAck) {
  auto st = Open();
  ASSERT_TRUE(Hello(*st, 0));
  ASSERT_EQ(AcksThrough(*st, 0), std::vector<uint64_t>{0});
  ASSERT_TRUE(Batch(*st, 1));
  WaitStored(1);
  std::thread stop([&] { server_->Shutdown(5); });
  std::vector<uint64_t> acks = AcksThrough(*st, 1);
  stop.join();
  server_.reset();
  ASSERT_FALSE(acks.empty());
  EXPECT_EQ(acks.back(), 1u);
}

INSTANTIATE_TEST_SUITE_P(Queues, IngestServiceStreamTest,
                         ::testing::Values(1, GrpcServer::kMaxCompletionQueues));

TEST(IngestServiceQueues, OneQueueForASmallFleetTheMostForALargeOrUnknownOne) {
  EXPECT_EQ(GrpcServer::CompletionQueuesFor(1), 1);
  EXPECT_EQ(GrpcServer::CompletionQueuesFor(4000), 1);
  EXPECT_EQ(GrpcServer::CompletionQueuesFor(GrpcServer::kOneQueueNodes), 1);
  EXPECT_EQ(GrpcServer::CompletionQueuesFor(GrpcServer::kOneQueueNodes + 1),
            GrpcServer::kMaxCompletionQueues);
  EXPECT_EQ(GrpcServer::CompletionQueuesFor(16000), GrpcServer::kMaxCompletionQueues);
  EXPECT_EQ(GrpcServer::CompletionQueuesFor(0), GrpcServer::kMaxCompletionQueues);
}

}  // namespace
}  // namespace fw::aggregator
