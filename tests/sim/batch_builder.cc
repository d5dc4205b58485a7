// Per-second batch filling.
#include "tests/sim/batch_builder.h"

#include <algorithm>
#include <map>
#include <string>
#include <string_view>

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
                        Rng& rng, v1::ProbeBatch& batch, int seconds, uint64_t* layout) const {
  bool rebuild = false;
  if (layout != nullptr) {
    const uint64_t key = LayoutKey(flows, seconds);
    rebuild = key != *layout;
    *layout = key;
  }
  if (encoding_ == BatchEncoding::kColumns || seconds > 1) {
    FillColumns(flows, second, second_unix_ns, rng, batch, std::max(1, seconds), rebuild);
  } else {
    FillResults(flows, second, second_unix_ns, rng, batch, rebuild);
  }
}

uint64_t BatchBuilder::LayoutKey(const std::vector<Flow>& flows, int seconds) {
  // FNV-1a over what the static fields hold.
  uint64_t h = 0xcbf29ce484222325ULL;
  auto mix = [&h](uint64_t v) {
    h ^= v;
    h *= 0x100000001b3ULL;
  };
  mix(static_cast<uint64_t>(seconds));
  mix(flows.size());
  for (const Flow& f : flows) {
    mix(f.dst_host);
    mix(uint64_t{f.rail} << 32 | uint64_t{f.src_port} << 16);
    mix(f.flow_id);
  }
  return h == 0 ? 1 : h;
}

void BatchBuilder::BuildColumns(const std::vector<Flow>& flows, int slots, int seconds,
                                v1::ProbeColumns& c) const {
  c.Clear();
  // Name table: every peer and NIC once, peers first in flow order.
  std::map<std::string, uint32_t, std::less<>> index;
  auto name = [&](std::string_view s) {
    auto it = index.find(s);
    if (it != index.end()) return it->second;
    const auto i = static_cast<uint32_t>(index.size());
    index.emplace(std::string(s), i);
    c.mutable_names()->append(s);
    c.add_name_lengths(static_cast<uint32_t>(s.size()));
    return i;
  };
  // The per-row columns that stay fixed: the bandwidth rows' entries are rewritten every second.
  const int n = static_cast<int>(flows.size());
  const int rows = (n + slots) * seconds;
  for (int row = 0; row < rows; ++row) {
    const int i = row % (n + slots);
    const Flow& f = flows[static_cast<size_t>(i < n ? i : (i - n) % n)];
    c.add_peer(name(tree_.NodeName(static_cast<int>(f.dst_host))));
    c.add_transport(i < n ? v1::TRANSPORT_UDP : v1::TRANSPORT_TCP_BW);
    c.add_src_port(f.src_port);
    c.add_dst_port(kProbePort);
    c.add_flow_id(f.flow_id);
    c.add_src_nic(name(tree_.NicName(f.rail)));
    c.add_dst_nic(name(tree_.NicName(f.rail)));
  }
  // The columns rewritten every second, sized once.
  c.mutable_probe_seq()->Resize(rows, 0);
  c.mutable_lost()->Resize(rows, false);
  c.mutable_rtt_ns()->Resize(rows, 0);
  c.mutable_sent_unix_ns_delta()->Resize(rows, 0);
  if (slots > 0) {
    c.mutable_bytes()->Resize(rows, 0);
    c.mutable_goodput_bps()->Resize(rows, 0.0);
    c.mutable_cpu_busy_permille()->Resize(rows, 0);
    c.mutable_cpu_peak_permille()->Resize(rows, 0);
  }
}

void BatchBuilder::FillColumns(const std::vector<Flow>& flows, int64_t last_second,
                               int64_t last_second_unix_ns, Rng& rng, v1::ProbeBatch& batch,
                               int seconds, bool rebuild) const {
  const int n = static_cast<int>(flows.size());
  const int slots = n > 0 ? bandwidth_slots_ : 0;
  v1::ProbeColumns& c = *batch.mutable_columns();
  if (rebuild || c.peer_size() != (n + slots) * seconds) BuildColumns(flows, slots, seconds, c);
  const int64_t spacing_ns = n > 0 ? 1'000'000'000 / n : 0;
  int64_t prev_sent = 0;
  for (int block = 0; block < seconds; ++block) {
    const int64_t back = seconds - 1 - block;
    const int64_t second = last_second - back;
    const int64_t second_unix_ns = last_second_unix_ns - back * 1'000'000'000;
    const int base = block * (n + slots);
    for (int i = 0; i < n; ++i) {
      LatencySample s = model_.SampleLatency(flows[static_cast<size_t>(i)], rng);
      const int64_t sent = second_unix_ns + i * spacing_ns;
      c.set_probe_seq(base + i, static_cast<uint64_t>(second));
      c.set_sent_unix_ns_delta(base + i, sent - prev_sent);
      prev_sent = sent;
      c.set_lost(base + i, s.lost);
      c.set_rtt_ns(base + i, s.lost ? 0 : s.rtt_ns);
    }
    for (int k = 0; k < slots; ++k) {
      const int row = base + n + k;
      const int fi = static_cast<int>((second * slots + k) % n);
      const Flow& f = flows[static_cast<size_t>(fi)];
      // Peer and NIC indices: flow fi's row carries the same names.
      c.set_peer(row, c.peer(fi));
      c.set_src_nic(row, c.src_nic(fi));
      c.set_dst_nic(row, c.dst_nic(fi));
      c.set_src_port(row, f.src_port);
      c.set_flow_id(row, f.flow_id);
      BandwidthSample b = model_.SampleBandwidth(f, kBandwidthBytes, rng);
      const int64_t sent = second_unix_ns + k * 1000;
      c.set_probe_seq(row, static_cast<uint64_t>(second));
      c.set_sent_unix_ns_delta(row, sent - prev_sent);
      prev_sent = sent;
      c.set_lost(row, b.lost);
      c.set_bytes(row, b.lost ? 0 : kBandwidthBytes);
      c.set_goodput_bps(row, b.lost ? 0 : b.goodput_bps);
      c.set_rtt_ns(row, b.lost ? 0 : b.duration_ns);
      c.set_cpu_busy_permille(row, b.lost ? 0 : b.cpu_busy_permille);
      c.set_cpu_peak_permille(row, b.lost ? 0 : b.cpu_peak_permille);
    }
  }
}

void BatchBuilder::FillHeld(const std::vector<HeldResult>& held, int64_t epoch_ns,
                            v1::ProbeBatch& batch) const {
  auto sent_ns = [epoch_ns](const HeldResult& h) {
    return epoch_ns + static_cast<int64_t>(h.sent_s * 1e9);
  };
  auto transport = [](const HeldResult& h) {
    return h.bandwidth ? v1::TRANSPORT_TCP_BW : v1::TRANSPORT_UDP;
  };
  if (encoding_ == BatchEncoding::kResults) {
    batch.clear_columns();
    batch.clear_results();
    for (const HeldResult& h : held) {
      v1::ProbeResult* r = batch.add_results();
      SetStatic(*h.flow, transport(h), r);
      r->set_probe_seq(h.seq);
      r->set_sent_unix_ns(sent_ns(h));
      r->set_lost(h.lost);
      r->set_rtt_ns(h.lost ? 0 : h.rtt_ns);
      if (h.late) r->set_late(true);
      if (h.bandwidth && !h.lost) {
        r->set_bytes(kBandwidthBytes);
        r->set_goodput_bps(h.goodput_bps);
        r->set_cpu_busy_permille(h.cpu_busy_permille);
        r->set_cpu_peak_permille(h.cpu_peak_permille);
      }
    }
    return;
  }
  batch.clear_results();
  v1::ProbeColumns& c = *batch.mutable_columns();
  c.Clear();
  // Name table: each peer and NIC once, in first-use order.
  std::map<std::string_view, uint32_t> index;
  auto name = [&](std::string_view s) {
    auto it = index.find(s);
    if (it != index.end()) return it->second;
    const auto i = static_cast<uint32_t>(index.size());
    index.emplace(s, i);
    c.mutable_names()->append(s);
    c.add_name_lengths(static_cast<uint32_t>(s.size()));
    return i;
  };
  int64_t prev_sent = 0;
  // The late column only when some row is late, as the agent sends it.
  const bool late = std::any_of(held.begin(), held.end(), [](const HeldResult& h) { return h.late; });
  for (const HeldResult& h : held) {
    const Flow& f = *h.flow;
    if (late) c.add_late(h.late);
    c.add_peer(name(tree_.NodeName(static_cast<int>(f.dst_host))));
    c.add_transport(transport(h));
    c.add_src_port(f.src_port);
    c.add_dst_port(kProbePort);
    c.add_flow_id(f.flow_id);
    c.add_src_nic(name(tree_.NicName(f.rail)));
    c.add_dst_nic(name(tree_.NicName(f.rail)));
    c.add_probe_seq(h.seq);
    const int64_t sent = sent_ns(h);
    c.add_sent_unix_ns_delta(sent - prev_sent);
    prev_sent = sent;
    c.add_lost(h.lost);
    c.add_rtt_ns(h.lost ? 0 : h.rtt_ns);
    const bool burst = h.bandwidth && !h.lost;
    c.add_bytes(burst ? kBandwidthBytes : 0);
    c.add_goodput_bps(burst ? h.goodput_bps : 0.0);
    c.add_cpu_busy_permille(burst ? h.cpu_busy_permille : 0);
    c.add_cpu_peak_permille(burst ? h.cpu_peak_permille : 0);
  }
}

void BatchBuilder::FillResults(const std::vector<Flow>& flows, int64_t second,
                               int64_t second_unix_ns, Rng& rng, v1::ProbeBatch& batch,
                               bool rebuild) const {
  const int n = static_cast<int>(flows.size());
  const int slots = n > 0 ? bandwidth_slots_ : 0;
  if (rebuild || batch.results_size() != n + slots) {
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
    r->set_cpu_busy_permille(b.lost ? 0 : b.cpu_busy_permille);
    r->set_cpu_peak_permille(b.lost ? 0 : b.cpu_peak_permille);
  }
}

}  // namespace fw::sim
