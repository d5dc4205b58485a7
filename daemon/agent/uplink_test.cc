// The uplink against an in-process aggregator stand-in: hand-overs held and released.
#include "daemon/agent/uplink.h"

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "common/mutex.h"
#include "fabricwatch.grpc.pb.h"

namespace fw::agent {
namespace {

namespace v1 = fabricwatch::v1;
using namespace std::chrono_literals;

// Answers Hello with ack 0 and each probe batch with its ack; records what arrives, in order.
class FakeAggregator final : public v1::Aggregator::Service {
 public:
  grpc::Status Connect(
      grpc::ServerContext*,
      grpc::ServerReaderWriter<v1::AggregatorMessage, v1::AgentMessage>* stream) override {
    v1::AgentMessage in;
    while (stream->Read(&in)) {
      {
        MutexLock lock(mu_);
        received_.push_back(in.body_case());
      }
      v1::AggregatorMessage out;
      if (in.has_hello()) {
        out.mutable_ack()->set_seq(0);
      } else if (in.has_probe_batch()) {
        out.mutable_ack()->set_seq(in.probe_batch().seq());
      } else {
        continue;
      }
      if (!stream->Write(out)) break;
    }
    return grpc::Status::OK;
  }

  std::vector<v1::AgentMessage::BodyCase> Received() {
    MutexLock lock(mu_);
    return received_;
  }

 private:
  Mutex mu_;
  std::vector<v1::AgentMessage::BodyCase> received_ FW_GUARDED_BY(mu_);
};

template <typename Pred>
bool Eventually(Pred pred, std::chrono::milliseconds wait) {
  const auto deadline = std::chrono::steady_clock::now() + wait;
  while (std::chrono::steady_clock::now() < deadline) {
    if (pred()) return true;
    std::this_thread::sleep_for(5ms);
  }
  return pred();
}

class UplinkTest : public ::testing::Test {
 protected:
  void SetUp() override {
    grpc::ServerBuilder b;
    b.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    b.RegisterService(&service_);
    server_ = b.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    ASSERT_GT(port_, 0);
    Uplink::Options o;
    o.aggregator = "127.0.0.1:" + std::to_string(port_);
    o.heartbeat_interval_s = 3600;  // no heartbeat inside the test
    uplink_ = std::make_unique<Uplink>(
        o, buffer_, [] { return v1::Hello(); }, nullptr, registry_);
    uplink_->Start();
    ASSERT_TRUE(Eventually([&] { return uplink_->connected(); }, 10s));
  }

  void TearDown() override {
    if (uplink_) uplink_->Stop();
    if (server_) server_->Shutdown(std::chrono::system_clock::now() + 1s);
  }

  static v1::AgentMessage Counters() {
    v1::AgentMessage m;
    m.mutable_counter_batch()->set_sampled_unix_ns(1);
    return m;
  }
  static v1::AgentMessage Check() {
    v1::AgentMessage m;
    m.mutable_check_report()->set_exit_code(0);
    return m;
  }
  void PushBatch() {
    v1::ProbeBatch b;
    b.add_results()->set_peer("p");
    buffer_.Push(std::move(b));
  }

  FakeAggregator service_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  OutboundBuffer buffer_{64, 1 << 20};
  metrics::Registry registry_;
  std::unique_ptr<Uplink> uplink_;
};

using Case = v1::AgentMessage::BodyCase;

// What the report loop hands over in one wakeup (a probe batch, the counter batch, a check
// report) reaches the uplink's thread as one wake-up when the loop holds the uplink across it,
// and goes out in the order handed over. Unheld, a hand-over goes out at once.
TEST_F(UplinkTest, AHoldHandsOverAWakeupsMessagesWithOneWake) {
  // Hello, then the session's first heartbeat (due at once; the next in an hour).
  ASSERT_TRUE(Eventually([&] { return service_.Received().size() == 2; }, 5s));
  const size_t hello = 2;
  const uint64_t wakes = uplink_->handover_wakes();
  {
    Uplink::WakeHold hold(*uplink_);
    PushBatch();
    uplink_->Notify();
    uplink_->SendBestEffort(Counters());
    {
      Uplink::WakeHold nested(*uplink_);
      uplink_->SendBestEffort(Check());
    }
    std::this_thread::sleep_for(100ms);
    EXPECT_EQ(service_.Received().size(), hello) << "held: nothing may go out yet";
    EXPECT_EQ(uplink_->handover_wakes(), wakes);
  }
  ASSERT_TRUE(Eventually([&] { return service_.Received().size() == hello + 3; }, 5s));
  EXPECT_EQ(uplink_->handover_wakes(), wakes + 1);
  const auto got = service_.Received();
  EXPECT_EQ(got[0], Case::kHello);
  EXPECT_EQ(got[1], Case::kHeartbeat);
  EXPECT_EQ(got[2], Case::kProbeBatch);
  EXPECT_EQ(got[3], Case::kCounterBatch);
  EXPECT_EQ(got[4], Case::kCheckReport);
  ASSERT_TRUE(Eventually([&] { return buffer_.acked() == 1; }, 5s));

  // A hold with nothing handed over wakes nothing; unheld, each hand-over goes out by itself.
  { Uplink::WakeHold idle(*uplink_); }
  EXPECT_EQ(uplink_->handover_wakes(), wakes + 1);
  uplink_->SendBestEffort(Counters());
  ASSERT_TRUE(Eventually([&] { return service_.Received().size() == hello + 4; }, 5s));
  EXPECT_EQ(uplink_->handover_wakes(), wakes + 2);
}

}  // namespace
}  // namespace fw::agent
