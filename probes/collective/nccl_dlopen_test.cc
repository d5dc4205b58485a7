// The real dlopen path of the NCCL probe on this machine: a hidden library says "unavailable"; the
// installed NCCL and CUDA runtime without a driver (CUDA error 35) say "no driver". Neither
// crashes or leaves a thread behind.
#include <gtest/gtest.h>

#include <filesystem>

#include "probes/collective/nccl_backend.h"
#include "probes/collective/thread_count_for_test.h"

namespace fw::collective {
namespace {

using testing::ThreadCount;
using testing::ThreadCountSettledAt;

TEST(NcclDlopen, HiddenLibraryIsUnavailable) {
  const size_t threads = ThreadCount();
  NcclLibraryOptions options;
  options.nccl_library = "/nonexistent/fabricwatch-hidden/libnccl.so.2";
  std::unique_ptr<NcclLibrary> lib;
  const NcclAvailability a = LoadAndCheckNccl(options, &lib);
  EXPECT_EQ(a.state, NcclState::kUnavailable);
  EXPECT_EQ(a.ToString().rfind("nccl: unavailable (", 0), 0u) << a.ToString();
  EXPECT_NE(a.detail.find("fabricwatch-hidden"), std::string::npos);
  EXPECT_EQ(lib, nullptr);
  EXPECT_EQ(ThreadCountSettledAt(threads), threads);
}

TEST(NcclDlopen, InstalledLibraryWithoutDriverSaysNoDriver) {
  const size_t threads = ThreadCount();
  std::unique_ptr<NcclLibrary> lib;
  const NcclAvailability a = LoadAndCheckNccl({}, &lib);
  if (a.state == NcclState::kUnavailable) GTEST_SKIP() << "NCCL not installed: " << a.ToString();
  if (std::filesystem::exists("/dev/nvidiactl")) GTEST_SKIP() << "a driver is present";
  ASSERT_NE(lib, nullptr);
  EXPECT_EQ(a.state, NcclState::kNoDriver) << a.ToString();
  EXPECT_EQ(a.cuda_error, 35);
  EXPECT_GT(a.nccl_version, 20000);
  EXPECT_NE(a.ToString().find("nccl: no driver (cudaGetDeviceCount: CUDA error 35"),
            std::string::npos)
      << a.ToString();
  EXPECT_EQ(ThreadCountSettledAt(threads), threads);
}

}  // namespace
}  // namespace fw::collective
