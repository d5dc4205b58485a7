// Benchmark: the Gloo collective probe on loopback against Gloo called directly (the reference),
// at the probe's sizes. The difference is what the probe's interface costs; the bus bandwidth is
// what loopback TCP gives a ring all-reduce on this machine.
#include <benchmark/benchmark.h>
#include <gloo/allreduce.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/hash_store.h>
#include <gloo/transport/tcp/device.h>
#include <sys/resource.h>
#include <sys/socket.h>

#include <functional>
#include <thread>

#include "probes/collective/gloo_backend.h"

namespace {

using fw::collective::BusBandwidthFactor;
using fw::collective::OpKind;

double ProcessCpuSeconds() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
         static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1e-6;
}

// Runs `body(rank)` on `ranks` threads at once (rendezvous needs every member concurrently).
void OnEveryRank(int ranks, const std::function<void(int)>& body) {
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r) threads.emplace_back(body, r);
  for (auto& t : threads) t.join();
}

void Report(benchmark::State& state, int ranks, uint64_t bytes, double cpu_seconds) {
  const double ops = static_cast<double>(state.iterations());
  state.counters["busbw_GBps"] = benchmark::Counter(
      static_cast<double>(bytes) * BusBandwidthFactor(OpKind::kAllReduce, ranks) * ops / 1e9,
      benchmark::Counter::kIsRate);
  state.counters["cpu_ms_per_op_per_rank"] = cpu_seconds * 1e3 / ops / ranks;
}

// The probe: ConnectGloo through the KvStore, then Communicator::RunOnce per iteration.
void BM_GlooProbeAllReduce(benchmark::State& state) {
  const int ranks = static_cast<int>(state.range(0));
  const uint64_t bytes = static_cast<uint64_t>(state.range(1));
  static int seq = 0;
  const fw::collective::GroupSpec base{"bench-" + std::to_string(seq++), ranks, 0};
  fw::collective::InMemoryKvStore kv;
  std::vector<std::unique_ptr<fw::collective::Communicator>> comms(static_cast<size_t>(ranks));
  fw::collective::OpSpec op;
  op.bytes = bytes;
  OnEveryRank(ranks, [&](int r) {
    fw::collective::GroupSpec g = base;
    g.rank = r;
    auto c = fw::collective::ConnectGloo(g, kv, {});
    if (c.ok() && (*c)->Prepare(op).ok()) comms[static_cast<size_t>(r)] = std::move(*c);
  });
  for (const auto& c : comms) {
    if (!c) {
      state.SkipWithError("gloo rendezvous failed");
      return;
    }
  }
  const int64_t iterations = state.max_iterations;
  std::vector<std::thread> helpers;
  for (int r = 1; r < ranks; ++r) {
    helpers.emplace_back([&, r] {
      fw::collective::IterationSample s;
      for (int64_t i = 0; i < iterations; ++i) {
        if (!comms[static_cast<size_t>(r)]->RunOnce({&s, 1}).ok()) return;
      }
    });
  }
  const double cpu0 = ProcessCpuSeconds();
  fw::collective::IterationSample s;
  for (auto _ : state) {
    if (!comms[0]->RunOnce({&s, 1}).ok()) {
      state.SkipWithError("all-reduce failed");
      break;
    }
  }
  const double cpu = ProcessCpuSeconds() - cpu0;
  for (auto& t : helpers) t.join();
  Report(state, ranks, bytes, cpu);
}

// The reference: the same ring all-reduce through Gloo's own API and in-process HashStore.
void BM_GlooDirectAllReduce(benchmark::State& state) {
  const int ranks = static_cast<int>(state.range(0));
  const size_t count = static_cast<size_t>(state.range(1)) / 4;
  gloo::rendezvous::HashStore store;
  std::vector<std::shared_ptr<gloo::rendezvous::Context>> ctx(static_cast<size_t>(ranks));
  std::vector<std::vector<float>> in(static_cast<size_t>(ranks), std::vector<float>(count, 1));
  std::vector<std::vector<float>> out(static_cast<size_t>(ranks), std::vector<float>(count));
  OnEveryRank(ranks, [&](int r) {
    gloo::transport::tcp::attr attr("127.0.0.1");
    attr.ai_family = AF_INET;
    auto dev = gloo::transport::tcp::CreateDevice(attr);
    auto c = std::make_shared<gloo::rendezvous::Context>(r, ranks);
    c->connectFullMesh(store, dev);
    ctx[static_cast<size_t>(r)] = c;
  });
  auto once = [&](int r, uint32_t tag) {
    gloo::AllreduceOptions opts(ctx[static_cast<size_t>(r)]);
    opts.setInput(in[static_cast<size_t>(r)].data(), count);
    opts.setOutput(out[static_cast<size_t>(r)].data(), count);
    opts.setReduceFunction(
        static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<float>));
    opts.setTag(tag);
    gloo::allreduce(opts);
  };
  const int64_t iterations = state.max_iterations;
  std::vector<std::thread> helpers;
  for (int r = 1; r < ranks; ++r) {
    helpers.emplace_back([&, r] {
      for (int64_t i = 0; i < iterations; ++i) once(r, static_cast<uint32_t>(i));
    });
  }
  const double cpu0 = ProcessCpuSeconds();
  uint32_t tag = 0;
  for (auto _ : state) once(0, tag++);
  const double cpu = ProcessCpuSeconds() - cpu0;
  for (auto& t : helpers) t.join();
  Report(state, ranks, count * 4, cpu);
}

void Sizes(benchmark::internal::Benchmark* b) {
  for (int64_t ranks : {2, 4}) {
    for (int64_t bytes : {64 << 10, 1 << 20, 8 << 20}) b->Args({ranks, bytes});
  }
  b->Iterations(40)->UseRealTime()->Unit(benchmark::kMicrosecond);
}

BENCHMARK(BM_GlooProbeAllReduce)->Apply(Sizes);
BENCHMARK(BM_GlooDirectAllReduce)->Apply(Sizes);

}  // namespace

BENCHMARK_MAIN();
