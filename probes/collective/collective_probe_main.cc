// fw_collective_probe: run one collective probe from the command line and print key=value lines.
// `nccl` runs an all-reduce over every local GPU through the agent's real NCCL path (dlopen), or
// with --store-dir this process's GPUs (--gpus) as ranks --first-rank.. of a group of --ranks whose
// processes share the unique id through files, for tests/device/nccl_check.sh; `gloo` runs N ranks
// as threads on loopback, or with --rank one rank of a group whose processes rendezvous through
// files in --store-dir (tests/bench/collective).
#include <CLI/CLI.hpp>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "probes/collective/collective.h"
#include "probes/collective/kv_store.h"
#include "probes/collective/nccl_backend.h"
#ifdef FW_HAVE_GLOO
#include "probes/collective/gloo_backend.h"
#endif

namespace {

using namespace fw::collective;

void Print(const char* backend, const OpSpec& op, const GroupSummary& s) {
  std::printf(
      "backend=%s op=%s bytes=%llu ranks=%d time_us=%.1f comm_time_us=%.1f algbw_GBps=%.3f "
      "busbw_GBps=%.3f latest_rank=%d\n",
      backend, std::string(OpKindName(op.kind)).c_str(), static_cast<unsigned long long>(op.bytes),
      s.ranks, s.median_group_seconds * 1e6, s.median_comm_seconds * 1e6,
      s.algbw_bytes_per_s * 1e-9, s.busbw_bytes_per_s * 1e-9, s.latest_rank);
}

// A KvStore on a directory that every rank's process sees (one file per key, named by the key's
// hex bytes, written to a temporary name and renamed, so a reader never sees half a value). For the
// command line's multi-process mode only; the agent rendezvouses through the aggregator.
class DirectoryKvStore final : public KvStore {
 public:
  explicit DirectoryKvStore(std::filesystem::path dir) : dir_(std::move(dir)) {}
  fw::Status Set(std::string_view key, std::string value) override {
    if (fw::Status s = ValidateKvEntry(key, value.size()); !s.ok()) return s;
    const std::filesystem::path final_path = Path(key);
    const std::filesystem::path tmp = final_path.string() + ".tmp";
    {
      std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
      out.write(value.data(), static_cast<std::streamsize>(value.size()));
      if (!out) return fw::Status::Unavailable("cannot write " + tmp.string());
    }
    std::error_code ec;
    std::filesystem::rename(tmp, final_path, ec);
    if (ec) return fw::Status::Unavailable("cannot rename " + tmp.string() + ": " + ec.message());
    return fw::Status::Ok();
  }
  fw::StatusOr<std::string> Get(std::string_view key, std::chrono::milliseconds timeout) override {
    if (fw::Status s = ValidateKvEntry(key, 0); !s.ok()) return s;
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (true) {
      std::ifstream in(Path(key), std::ios::binary);
      if (in) {
        std::ostringstream v;
        v << in.rdbuf();
        return v.str();
      }
      if (std::chrono::steady_clock::now() >= deadline) {
        return fw::Status::Unavailable("timed out waiting for key '" + std::string(key) + "'");
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  }
  size_t ErasePrefix(std::string_view) override { return 0; }  // the caller removes the directory

 private:
  std::filesystem::path Path(std::string_view key) const {
    std::string name;
    for (unsigned char c : key) {
      static constexpr char kHex[] = "0123456789abcdef";
      name += kHex[c >> 4];
      name += kHex[c & 15];
    }
    return dir_ / name;
  }
  std::filesystem::path dir_;
};

int Fail(const fw::Status& s) {
  std::fprintf(stderr, "fw_collective_probe: %s\n", s.ToString().c_str());
  return 2;
}

int RunNccl(const OpSpec& op, const NcclLibraryOptions& lib_options) {
  std::unique_ptr<NcclLibrary> lib;
  const NcclAvailability a = LoadAndCheckNccl(lib_options, &lib);
  std::printf("%s\n", a.ToString().c_str());
  if (a.state != NcclState::kReady) return 1;
  NcclOptions options;
  for (int d = 0; d < a.devices; ++d) options.devices.push_back(d);
  InMemoryKvStore kv;
  NcclCounters counters;
  auto comm = ConnectNccl(lib->api(), {"cli", a.devices, 0}, kv, options, counters);
  if (!comm.ok()) return Fail(comm.status());
  auto results = RunOperation(**comm, op);
  if (!results.ok()) return Fail(results.status());
  auto sum = SummarizeGroup(*results);
  if (!sum.ok()) return Fail(sum.status());
  Print("nccl", op, *sum);
  return 0;
}

// This process's GPUs as ranks first_rank.. of a multi-process NCCL group; the member holding rank
// 0 writes the unique id to `store_dir`, the others read it (as the agent does through the
// aggregator). Prints this process's slowest rank.
int RunNcclRanks(const OpSpec& op, const NcclLibraryOptions& lib_options, int ranks, int first_rank,
                 const std::vector<int>& gpus, const std::string& store_dir,
                 const std::string& group) {
  std::unique_ptr<NcclLibrary> lib;
  const NcclAvailability a = LoadAndCheckNccl(lib_options, &lib);
  std::printf("%s\n", a.ToString().c_str());
  if (a.state != NcclState::kReady) return 1;
  NcclOptions options;
  options.devices = gpus;
  DirectoryKvStore kv(store_dir);
  NcclCounters counters;
  auto comm = ConnectNccl(lib->api(), {group, ranks, first_rank}, kv, options, counters);
  if (!comm.ok()) return Fail(comm.status());
  auto results = RunOperation(**comm, op);
  if (!results.ok()) return Fail(results.status());
  const RankResult* slowest = &results->front();
  for (const RankResult& r : *results) {
    if (r.busbw_bytes_per_s < slowest->busbw_bytes_per_s) slowest = &r;
  }
  std::printf(
      "backend=nccl op=%s bytes=%llu ranks=%d first_rank=%d local_ranks=%zu time_us=%.1f "
      "busbw_GBps=%.3f\n",
      std::string(OpKindName(op.kind)).c_str(), static_cast<unsigned long long>(slowest->bytes),
      ranks, first_rank, results->size(), slowest->median_seconds * 1e6,
      slowest->busbw_bytes_per_s * 1e-9);
  return 0;
}

// One rank of a multi-process group: prints this rank's own figures (the group's busbw is the
// lowest of its ranks').
int RunGlooRank(const OpSpec& op, int ranks, int rank, const std::string& address,
                const std::string& store_dir, const std::string& group) {
#ifdef FW_HAVE_GLOO
  DirectoryKvStore kv(store_dir);
  auto comm = ConnectGloo({group, ranks, rank}, kv, {.tcp_address = address});
  if (!comm.ok()) return Fail(comm.status());
  auto res = RunOperation(**comm, op);
  if (!res.ok()) return Fail(res.status());
  const RankResult& r = res->front();
  std::printf(
      "backend=gloo op=%s bytes=%llu ranks=%d rank=%d time_us=%.1f min_time_us=%.1f "
      "algbw_GBps=%.3f busbw_GBps=%.3f\n",
      std::string(OpKindName(op.kind)).c_str(), static_cast<unsigned long long>(op.bytes), ranks,
      rank, r.median_seconds * 1e6, r.min_seconds * 1e6, r.algbw_bytes_per_s * 1e-9,
      r.busbw_bytes_per_s * 1e-9);
  return 0;
#else
  (void)op, (void)ranks, (void)rank, (void)address, (void)store_dir, (void)group;
  return Fail(fw::Status::Unimplemented("built without libgloo-dev"));
#endif
}

int RunGloo(const OpSpec& op, int ranks) {
#ifdef FW_HAVE_GLOO
  InMemoryKvStore kv;
  std::vector<RankResult> all(static_cast<size_t>(ranks));
  std::vector<fw::Status> errors(static_cast<size_t>(ranks));
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r) {
    threads.emplace_back([&, r] {
      auto comm = ConnectGloo({"cli", ranks, r}, kv, {});
      if (!comm.ok()) {
        errors[static_cast<size_t>(r)] = comm.status();
        return;
      }
      auto res = RunOperation(**comm, op);
      if (!res.ok()) {
        errors[static_cast<size_t>(r)] = res.status();
        return;
      }
      all[static_cast<size_t>(r)] = res->front();
    });
  }
  for (auto& t : threads) t.join();
  for (const fw::Status& s : errors) {
    if (!s.ok()) return Fail(s);
  }
  auto sum = SummarizeGroup(all);
  if (!sum.ok()) return Fail(sum.status());
  Print("gloo", op, *sum);
  return 0;
#else
  (void)op;
  (void)ranks;
  return Fail(fw::Status::Unimplemented("built without libgloo-dev"));
#endif
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"fabricwatch collective probe: one all-reduce or all-gather, key=value output"};
  app.require_subcommand(1);
  OpSpec op;
  std::string kind = "all_reduce";
  int ranks = 4;
  NcclLibraryOptions lib_options;
  int timeout_ms = 10000;
  for (CLI::App* sub : {app.add_subcommand("nccl", "every local GPU, one process (dlopen)"),
                        app.add_subcommand("gloo", "N ranks as threads on 127.0.0.1")}) {
    sub->add_option("--bytes", op.bytes, "nccl-tests size in bytes")->capture_default_str();
    sub->add_option("--iterations", op.iterations)->capture_default_str();
    sub->add_option("--warmup", op.warmup)->capture_default_str();
    sub->add_option("--op", kind, "all_reduce | all_gather")->capture_default_str();
    sub->add_option("--timeout-ms", timeout_ms, "bound on one operation")->capture_default_str();
  }
  int rank = -1;
  std::string address = "127.0.0.1", store_dir, group = "cli";
  CLI::App* gloo = app.get_subcommand("gloo");
  gloo->add_option("--ranks", ranks)->capture_default_str();
  gloo->add_option("--rank", rank, "run only this rank (one process per rank; needs --store-dir)");
  gloo->add_option("--address", address, "with --rank: the address to bind")->capture_default_str();
  gloo->add_option("--store-dir", store_dir,
                   "with --rank: rendezvous directory shared by the ranks");
  gloo->add_option("--group", group, "with --rank: group id (a fresh one per run)")
      ->capture_default_str();
  CLI::App* nccl = app.get_subcommand("nccl");
  nccl->add_option("--nccl-library", lib_options.nccl_library)->capture_default_str();
  int nccl_ranks = 0, first_rank = 0;
  std::vector<int> gpus;
  nccl->add_option("--ranks", nccl_ranks, "with --store-dir: ranks in the whole group");
  nccl->add_option("--first-rank", first_rank, "with --store-dir: this process's first rank");
  nccl->add_option("--gpus", gpus, "with --store-dir: this process's GPUs, one rank each")
      ->delimiter(',');
  nccl->add_option("--store-dir", store_dir,
                   "several processes: rendezvous directory they share (the unique id)");
  nccl->add_option("--group", group, "with --store-dir: group id (a fresh one per run)")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  op.kind = kind == "all_gather" ? OpKind::kAllGather : OpKind::kAllReduce;
  op.timeout = std::chrono::milliseconds(timeout_ms);
  if (app.got_subcommand("nccl") && !store_dir.empty()) {
    if (gpus.empty() || first_rank < 0 || first_rank + static_cast<int>(gpus.size()) > nccl_ranks) {
      std::fprintf(stderr,
                   "fw_collective_probe: nccl --store-dir needs --gpus and --ranks >= "
                   "--first-rank + GPUs\n");
      return 2;
    }
    return RunNcclRanks(op, lib_options, nccl_ranks, first_rank, gpus, store_dir, group);
  }
  if (app.got_subcommand("nccl")) return RunNccl(op, lib_options);
  if (rank >= 0) {
    if (store_dir.empty() || rank >= ranks) {
      std::fprintf(stderr, "fw_collective_probe: --rank needs --store-dir and rank < --ranks\n");
      return 2;
    }
    return RunGlooRank(op, ranks, rank, address, store_dir, group);
  }
  return RunGloo(op, ranks);
}
