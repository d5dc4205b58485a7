// NCCL backend against the fake library seam: availability states, a grouped init and verified
// collectives timed by CUDA events, and the failure paths (run-time errors counted and torn down,
// hung init and hung collectives aborted after their timeout).
#include "probes/collective/nccl_backend.h"

#include <gtest/gtest.h>

#include "probes/collective/fake_nccl.h"

namespace fw::collective {
namespace {

using std::chrono::milliseconds;
using testing::FakeNcclApi;
using testing::FakeNcclState;
using testing::ResetFakeNccl;

class NcclFake : public ::testing::Test {
 protected:
  FakeNcclState& fake_ = ResetFakeNccl();
  NcclApi api_ = FakeNcclApi();
  InMemoryKvStore kv_;
  NcclCounters counters_;

  StatusOr<std::unique_ptr<Communicator>> Connect(int size = 2, int rank = 0,
                                                  milliseconds timeout = milliseconds(2000)) {
    NcclOptions options;
    options.devices = {0, 1};
    options.rendezvous_timeout = timeout;
    return ConnectNccl(api_, {"job-1", size, rank}, kv_, options, counters_);
  }
};

TEST_F(NcclFake, NoDriverIsItsOwnState) {
  fake_.device_count_error = 35;
  const NcclAvailability a = CheckNccl(api_);
  EXPECT_EQ(a.state, NcclState::kNoDriver);
  EXPECT_EQ(a.cuda_error, 35);
  EXPECT_EQ(a.ToString(),
            "nccl: no driver (cudaGetDeviceCount: CUDA error 35: CUDA driver version is "
            "insufficient for CUDA runtime version; NCCL 2.28.9)");
}

TEST_F(NcclFake, NoDeviceAndReady) {
  fake_.device_count_error = 100;
  EXPECT_EQ(CheckNccl(api_).state, NcclState::kNoDevice);
  fake_.device_count_error = 0;
  fake_.devices = 0;
  EXPECT_EQ(CheckNccl(api_).state, NcclState::kNoDevice);
  fake_.devices = 8;
  const NcclAvailability a = CheckNccl(api_);
  EXPECT_EQ(a.state, NcclState::kReady);
  EXPECT_EQ(a.ToString(), "nccl: ready (NCCL 2.28.9, 8 GPUs)");
}

TEST_F(NcclFake, AllReduceOverTwoLocalGpusVerifiesAndTearsDownCleanly) {
  {
    auto comm = Connect();
    ASSERT_TRUE(comm.ok()) << comm.status().ToString();
    EXPECT_EQ(fake_.comms_created, 2);
    EXPECT_EQ(fake_.streams, 2);
    EXPECT_EQ(fake_.last_stream_priority, 0);  // the least priority the device offers
    EXPECT_EQ(kv_.Get("collective/job-1/nccl/unique_id", milliseconds(0))->size(), 128u);
    OpSpec op;
    op.bytes = 1 << 20;
    op.iterations = 4;
    op.warmup = 1;
    auto res = RunOperation(**comm, op);
    ASSERT_TRUE(res.ok()) << res.status().ToString();
    ASSERT_EQ(res->size(), 2u);
    EXPECT_EQ((*res)[1].rank, 1);
    EXPECT_EQ((*res)[0].iterations.size(), 4u);
    EXPECT_NEAR((*res)[0].median_seconds, 0.002, 1e-6);  // the CUDA events' reading
    EXPECT_NEAR((*res)[0].busbw_bytes_per_s, (1 << 20) / 0.002 * 1.0, 1e3);
    EXPECT_EQ(fake_.collectives, 10);  // 5 runs x 2 GPUs
    EXPECT_EQ(counters_.operations.load(), 5u);
  }
  EXPECT_EQ(fake_.comms_finalized, 2);
  EXPECT_EQ(fake_.comms_destroyed, 2);
  EXPECT_EQ(fake_.comms_aborted, 0);
  EXPECT_EQ(fake_.frees, fake_.mallocs);
  EXPECT_EQ(fake_.streams_destroyed, 2);
  EXPECT_EQ(fake_.events_destroyed, fake_.events);
}

TEST_F(NcclFake, AllGatherVerifies) {
  auto comm = Connect();
  ASSERT_TRUE(comm.ok()) << comm.status().ToString();
  OpSpec op;
  op.kind = OpKind::kAllGather;
  op.bytes = 64 << 10;
  op.iterations = 2;
  auto res = RunOperation(**comm, op);
  ASSERT_TRUE(res.ok()) << res.status().ToString();
  EXPECT_NEAR((*res)[0].busbw_bytes_per_s, (64 << 10) / 0.002 * 0.5, 1e3);
}

TEST_F(NcclFake, HungCollectiveIsAbortedAfterTheTimeout) {
  auto comm = Connect();
  ASSERT_TRUE(comm.ok()) << comm.status().ToString();
  fake_.collective_hangs = true;
  OpSpec op;
  op.timeout = milliseconds(150);
  op.warmup = 0;
  const auto t0 = std::chrono::steady_clock::now();
  auto res = RunOperation(**comm, op);
  const auto took = std::chrono::steady_clock::now() - t0;
  ASSERT_FALSE(res.ok());
  EXPECT_EQ(res.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(res.status().message().find("aborted"), std::string::npos) << res.status().ToString();
  EXPECT_GE(took, milliseconds(150));
  EXPECT_LT(took, milliseconds(2000));
  EXPECT_EQ(counters_.timeouts.load(), 1u);
  EXPECT_EQ(fake_.comms_aborted, 2);
  std::vector<IterationSample> s(2);
  EXPECT_EQ((*comm)->RunOnce(s).code(), StatusCode::kFailedPrecondition);
  comm->reset();
  EXPECT_EQ(fake_.comms_destroyed, 0);  // aborted communicators are not destroyed again
  EXPECT_EQ(fake_.frees, fake_.mallocs);
}

TEST_F(NcclFake, RunTimeErrorsAreCountedAndTearDown) {
  auto comm = Connect();
  ASSERT_TRUE(comm.ok());
  fake_.collective_result = 1;  // ncclUnhandledCudaError
  auto res = RunOperation(**comm, OpSpec{});
  ASSERT_FALSE(res.ok());
  EXPECT_NE(res.status().message().find("ncclAllReduce"), std::string::npos);
  EXPECT_EQ(counters_.nccl_errors.load(), 1u);
  EXPECT_EQ(fake_.comms_aborted, 2);
}

TEST_F(NcclFake, AsynchronousErrorIsCounted) {
  auto comm = Connect();
  ASSERT_TRUE(comm.ok());
  fake_.async_error = 6;  // ncclRemoteError
  auto res = RunOperation(**comm, OpSpec{});
  ASSERT_FALSE(res.ok());
  EXPECT_NE(res.status().message().find("asynchronous"), std::string::npos);
  EXPECT_GE(counters_.nccl_errors.load(), 1u);
  EXPECT_EQ(fake_.comms_aborted, 2);
}

TEST_F(NcclFake, CudaErrorInPrepareIsCounted) {
  auto comm = Connect();
  ASSERT_TRUE(comm.ok());
  fake_.malloc_error = 2;  // cudaErrorMemoryAllocation
  auto res = RunOperation(**comm, OpSpec{});
  ASSERT_FALSE(res.ok());
  EXPECT_NE(res.status().message().find("cudaMalloc"), std::string::npos);
  EXPECT_EQ(counters_.cuda_errors.load(), 1u);
  EXPECT_EQ(fake_.comms_aborted, 2);
}

TEST_F(NcclFake, HungInitIsAborted) {
  fake_.init_hangs = true;
  auto comm = Connect(2, 0, milliseconds(150));
  ASSERT_FALSE(comm.ok());
  EXPECT_NE(comm.status().message().find("communicator init"), std::string::npos);
  EXPECT_EQ(counters_.timeouts.load(), 1u);
  EXPECT_EQ(fake_.comms_aborted, 2);
  EXPECT_EQ(fake_.streams_destroyed, 2);
}

TEST_F(NcclFake, MemberWaitsForTheUniqueIdAndRejectsABadOne) {
  auto late = Connect(4, 2, milliseconds(100));  // nobody holds rank 0
  ASSERT_FALSE(late.ok());
  EXPECT_NE(late.status().message().find("rendezvous"), std::string::npos);
  ASSERT_TRUE(kv_.Set("collective/job-1/nccl/unique_id", "short").ok());
  auto bad = Connect(4, 2, milliseconds(100));
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(fake_.comms_created, 0);
}

TEST_F(NcclFake, RanksBeyondTheGroupAreRefused) {
  auto comm = Connect(2, 1);  // ranks 1..2 in a group of 2
  ASSERT_FALSE(comm.ok());
  EXPECT_EQ(comm.status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace fw::collective
