// The unary calls of the Aggregator service (Qualify, ListFindings) on the async API, through a real
// server on 127.0.0.1 and a real client: answers, refusals, many calls at once, and a shutdown with
// calls still waiting for their answer.
#include "daemon/aggregator/ingest/ingest_service.h"

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "common/mutex.h"
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

}  // namespace
}  // namespace fw::aggregator
