// Per-second batch filling.
#include "tests/sim/batch_builder.h"

namespace fw::sim {

namespace v1 = fabricwatch::v1;

void BatchBuilder::SetStatic(const Flow& f, v1::Transport t, v1::ProbeResult* r) const {
  // String assignment reuses the existing capacity: names of one kind have one length.
  r->set_peer(tree_.NodeName(static_cast<int>(f.dst_host)));
  r->set_src_nic(tree_.NicName(f.rail));
  r->set_dst_nic(tree_.NicName(f.rail));
  r->set_transport(t);
  r->set_src_port(f.src_port);
  r->set_dst_port(kProbePort);
  r->set_flow_id(f.flow_id);
}

void BatchBuilder::Fill(const std::vector<Flow>& flows, int64_t second, int64_t second_unix_ns,
                        Rng& rng, v1::ProbeBatch& batch) const {
  const int n = static_cast<int>(flows.size());
  const int slots = n > 0 ? bandwidth_slots_ : 0;
  if (batch.results_size() != n + slots) {
    batch.clear_results();
    for (int i = 0; i < n; ++i) {
      SetStatic(flows[static_cast<size_t>(i)], v1::TRANSPORT_UDP, batch.add_results());
    }
    for (int k = 0; k < slots; ++k) batch.add_results()->set_transport(v1::TRANSPORT_TCP_BW);
  }
  // Probes of one flow are spread evenly over the second, as a paced prober sends them.
  const int64_t spacing_ns = n > 0 ? 1'000'000'000 / n : 0;
  for (int i = 0; i < n; ++i) {
    v1::ProbeResult* r = batch.mutable_results(i);
    LatencySample s = model_.SampleLatency(flows[static_cast<size_t>(i)], rng);
    r->set_probe_seq(static_cast<uint64_t>(second));
    r->set_sent_unix_ns(second_unix_ns + i * spacing_ns);
    r->set_lost(s.lost);
    r->set_rtt_ns(s.lost ? 0 : s.rtt_ns);
  }
  for (int k = 0; k < slots; ++k) {
    int fi = static_cast<int>((second * slots + k) % n);
    const Flow& f = flows[static_cast<size_t>(fi)];
    v1::ProbeResult* r = batch.mutable_results(n + k);
    SetStatic(f, v1::TRANSPORT_TCP_BW, r);
    BandwidthSample b = model_.SampleBandwidth(f, kBandwidthBytes, rng);
    r->set_probe_seq(static_cast<uint64_t>(second));
    r->set_sent_unix_ns(second_unix_ns + k * 1000);
    r->set_lost(b.lost);
    r->set_bytes(b.lost ? 0 : kBandwidthBytes);
    r->set_goodput_bps(b.lost ? 0 : b.goodput_bps);
    r->set_rtt_ns(b.lost ? 0 : b.duration_ns);
  }
}

}  // namespace fw::sim
