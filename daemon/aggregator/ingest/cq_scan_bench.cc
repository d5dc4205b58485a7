// The suspected libgrpc scan in isolation (issue 19, docs/performance.md): the cost of one
// completion on a completion queue that has N other operations outstanding.
//
// N grpc::Alarm objects are set an hour ahead on one CompletionQueue (each an outstanding operation
// with its own tag), then each iteration sets one more, cancels it and takes its event with
// Next(). With a libgrpc built without NDEBUG, the queue keeps every outstanding tag in an array
// and searches it on each completion, so the time per completion grows with N; in a release build
// it does not.
#include <benchmark/benchmark.h>
#include <grpcpp/alarm.h>
#include <grpcpp/grpcpp.h>

#include <chrono>
#include <memory>
#include <vector>

namespace {

void BM_CompletionWithOutstandingOps(benchmark::State& state) {
  grpc::CompletionQueue cq;
  const auto later = std::chrono::system_clock::now() + std::chrono::hours(1);
  std::vector<std::unique_ptr<grpc::Alarm>> parked;
  for (int64_t i = 0; i < state.range(0); ++i) {
    parked.push_back(std::make_unique<grpc::Alarm>());
    parked.back()->Set(&cq, later, parked.back().get());
  }
  void* tag = nullptr;
  bool ok = false;
  for (auto _ : state) {
    // Cancel() completes the operation on this thread, so the timer thread plays no part.
    grpc::Alarm alarm;
    alarm.Set(&cq, later, &alarm);
    alarm.Cancel();
    if (!cq.Next(&tag, &ok) || tag != &alarm) state.SkipWithError("unexpected event");
  }
  // Cancelled alarms complete with ok=false; drain them before the queue goes.
  for (auto& a : parked) a->Cancel();
  for (size_t i = 0; i < parked.size(); ++i) cq.Next(&tag, &ok);
  cq.Shutdown();
  while (cq.Next(&tag, &ok)) {
  }
  state.counters["outstanding"] = static_cast<double>(state.range(0));
}
BENCHMARK(BM_CompletionWithOutstandingOps)
    ->Arg(0)
    ->Arg(1000)
    ->Arg(4000)
    ->Arg(16000)
    ->Arg(64000)
    ->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
