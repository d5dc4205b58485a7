// The Gloo module seam (gloo_module.h): nothing of Gloo is mapped until the first connect, which
// loads libfabricwatch-gloo.so from the build tree and runs a real all-reduce through it; a folder
// without the module fails with the folders tried.
#include "probes/collective/gloo_module.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <thread>

namespace fw::collective {
namespace {

bool Mapped(const std::string& name) {
  std::ifstream maps("/proc/self/maps");
  std::stringstream text;
  text << maps.rdbuf();
  return text.str().find(name) != std::string::npos;
}

TEST(GlooModule, LoadsOnTheFirstConnectAndRunsAnAllReduce) {
  ASSERT_FALSE(Mapped("libgloo")) << "the loader must not link libgloo";
  ASSERT_FALSE(Mapped(kGlooModuleFile));
  EXPECT_EQ(GlooModulePath(), "");

  constexpr int kRanks = 2;
  InMemoryKvStore kv;
  OpSpec op;
  op.bytes = 64 << 10;
  op.iterations = 3;
  op.warmup = 1;
  std::vector<Status> status(kRanks);
  std::vector<std::vector<RankResult>> results(kRanks);
  std::vector<std::thread> threads;
  for (int r = 0; r < kRanks; ++r) {
    threads.emplace_back([&, r] {
      GlooOptions options;
      options.rendezvous_timeout = std::chrono::milliseconds(10000);
      auto comm = ConnectGlooModule({"module-test-" + std::to_string(getpid()), kRanks, r}, kv,
                                    options);
      if (!comm.ok()) {
        status[static_cast<size_t>(r)] = comm.status();
        return;
      }
      auto res = RunOperation(**comm, op);
      if (!res.ok()) {
        status[static_cast<size_t>(r)] = res.status();
        return;
      }
      results[static_cast<size_t>(r)] = std::move(*res);
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < kRanks; ++r) {
    ASSERT_TRUE(status[static_cast<size_t>(r)].ok()) << status[static_cast<size_t>(r)].ToString();
    ASSERT_EQ(results[static_cast<size_t>(r)].size(), 1u);
    EXPECT_EQ(results[static_cast<size_t>(r)][0].backend, "gloo");
    EXPECT_EQ(results[static_cast<size_t>(r)][0].iterations.size(), 3u);
  }
  EXPECT_TRUE(Mapped("libgloo"));
  EXPECT_NE(GlooModulePath().find(kGlooModuleFile), std::string::npos);
}

TEST(GlooModule, AFolderWithoutTheModuleNamesWhatWasTried) {
  auto loaded = LoadGlooModule({"/nonexistent-fw-dir"});
  ASSERT_FALSE(loaded.ok());
  EXPECT_EQ(loaded.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(loaded.status().message().find("/nonexistent-fw-dir/libfabricwatch-gloo.so"),
            std::string::npos)
      << loaded.status().ToString();
}

}  // namespace
}  // namespace fw::collective
