// Parse plus decode cost per result: a 39-result batch as results[] versus as columns.
#include <benchmark/benchmark.h>

#include <string>

#include "daemon/aggregator/ingest/probe_batch_decoder.h"

namespace fw::aggregator {
namespace {

namespace v1 = fabricwatch::v1;

constexpr int kResults = 39;  // the simulator's agent: 31 in-leaf flows and 8 inter-leaf ones

std::string Peer(int i) { return "node" + std::to_string(10000 + i); }

std::string RowsWire() {
  v1::ProbeBatch b;
  b.set_seq(1);
  for (int i = 0; i < kResults; ++i) {
    v1::ProbeResult* r = b.add_results();
    r->set_peer(Peer(i));
    r->set_src_nic("mlx5_0");
    r->set_dst_nic("mlx5_0");
    r->set_transport(v1::TRANSPORT_UDP);
    r->set_src_port(40000 + i);
    r->set_dst_port(9753);
    r->set_flow_id(i % 8);
    r->set_probe_seq(123456);
    r->set_rtt_ns(14'000 + i);
    r->set_sent_unix_ns(1'700'000'000'000'000'000 + i * 25'000'000);
  }
  return b.SerializeAsString();
}

std::string ColumnsWire() {
  v1::ProbeBatch b;
  b.set_seq(1);
  v1::ProbeColumns& c = *b.mutable_columns();
  for (int i = 0; i < kResults; ++i) {
    const std::string p = Peer(i);
    c.mutable_names()->append(p);
    c.add_name_lengths(static_cast<uint32_t>(p.size()));
  }
  c.mutable_names()->append("mlx5_0");
  c.add_name_lengths(6);
  for (int i = 0; i < kResults; ++i) {
    c.add_peer(static_cast<uint32_t>(i));
    c.add_src_nic(kResults);
    c.add_dst_nic(kResults);
    c.add_transport(v1::TRANSPORT_UDP);
    c.add_src_port(static_cast<uint32_t>(40000 + i));
    c.add_dst_port(9753);
    c.add_flow_id(static_cast<uint32_t>(i % 8));
    c.add_probe_seq(123456);
    c.add_lost(false);
    c.add_rtt_ns(static_cast<uint64_t>(14'000 + i));
    c.add_sent_unix_ns_delta(i == 0 ? 1'700'000'000'000'000'000 : 25'000'000);
  }
  return b.SerializeAsString();
}

// Parses into one reused message, as the aggregator's reactor does, then decodes.
void Run(benchmark::State& state, const std::string& wire) {
  v1::ProbeBatch batch;
  std::vector<ReportedProbe> out;
  const PeerFilter any = [](std::string_view) { return true; };
  for (auto _ : state) {
    batch.ParseFromString(wire);
    benchmark::DoNotOptimize(DecodeProbeBatch("node00001", batch, any, out));
  }
  state.SetItemsProcessed(state.iterations() * kResults);
  state.counters["wire_bytes_per_result"] = static_cast<double>(wire.size()) / kResults;
}

void BM_DecodeResults(benchmark::State& state) { Run(state, RowsWire()); }
void BM_DecodeColumns(benchmark::State& state) { Run(state, ColumnsWire()); }
BENCHMARK(BM_DecodeResults);
BENCHMARK(BM_DecodeColumns);

}  // namespace
}  // namespace fw::aggregator

BENCHMARK_MAIN();
