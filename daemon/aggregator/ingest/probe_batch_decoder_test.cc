// ProbeBatch decoding: both encodings give the same results, and malformed columns are refused
// whole with the right reason.
#include "daemon/aggregator/ingest/probe_batch_decoder.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "daemon/aggregator/ingest/probe_ingest.h"
#include "exporter/registry.h"

namespace fw::aggregator {
namespace {

namespace v1 = fabricwatch::v1;

const PeerFilter kAnyPeer = [](std::string_view) { return true; };

// Appends name `s` to the table and returns its index.
uint32_t AddName(v1::ProbeColumns& c, const std::string& s) {
  c.mutable_names()->append(s);
  c.add_name_lengths(static_cast<uint32_t>(s.size()));
  return static_cast<uint32_t>(c.name_lengths_size() - 1);
}

// Three rows to two peers: UDP ok, UDP lost, and a bandwidth result.
v1::ProbeBatch ColumnBatch() {
  v1::ProbeBatch b;
  b.set_seq(7);
  v1::ProbeColumns& c = *b.mutable_columns();
  const uint32_t a = AddName(c, "node-a");
  const uint32_t bb = AddName(c, "node-b");
  const uint32_t nic = AddName(c, "mlx5_0");
  for (uint32_t p : {a, bb, a}) c.add_peer(p);
  c.add_transport(v1::TRANSPORT_UDP);
  c.add_transport(v1::TRANSPORT_UDP);
  c.add_transport(v1::TRANSPORT_TCP_BW);
  for (uint32_t p : {40001u, 40002u, 40003u}) c.add_src_port(p);
  for (uint32_t f : {0u, 1u, 2u}) c.add_flow_id(f);
  for (uint64_t s : {10u, 11u, 12u}) c.add_probe_seq(s);
  for (bool l : {false, true, false}) c.add_lost(l);
  for (uint64_t r : {15'000u, 0u, 2'000'000u}) c.add_rtt_ns(r);
  for (uint64_t by : {0u, 0u, 4u << 20}) c.add_bytes(by);
  for (double g : {0.0, 0.0, 9.5e9}) c.add_goodput_bps(g);
  for (int64_t d : {int64_t{1'700'000'000'000'000'000}, int64_t{1000}, int64_t{-5}}) {
    c.add_sent_unix_ns_delta(d);
  }
  for (int i = 0; i < 3; ++i) {
    c.add_src_nic(nic);
    c.add_dst_nic(nic);
  }
  // The burst's host CPU: 95.0 % over all CPUs, its busiest at 100 %; the latency rows have none.
  for (uint32_t v : {0u, 0u, 950u}) c.add_cpu_busy_permille(v);
  for (uint32_t v : {0u, 0u, 1000u}) c.add_cpu_peak_permille(v);
  // ...and its CPU pressure: runnable tasks waited for a CPU during 61.5 % of it.
  for (uint32_t v : {0u, 0u, 615u}) c.add_cpu_pressure_permille(v);
  return b;
}

// The same three results as ColumnBatch(), one sub-message each.
v1::ProbeBatch RowBatch() {
  const v1::ProbeBatch cols = ColumnBatch();
  const v1::ProbeColumns& c = cols.columns();
  const char* peers[] = {"node-a", "node-b", "node-a"};
  v1::ProbeBatch b;
  b.set_seq(7);
  for (int i = 0; i < 3; ++i) {
    v1::ProbeResult* r = b.add_results();
    r->set_peer(peers[i]);
    r->set_transport(static_cast<v1::Transport>(c.transport(i)));
    r->set_src_port(c.src_port(i));
    r->set_flow_id(c.flow_id(i));
    r->set_probe_seq(c.probe_seq(i));
    r->set_lost(c.lost(i));
    r->set_rtt_ns(c.rtt_ns(i));
    r->set_bytes(c.bytes(i));
    r->set_goodput_bps(c.goodput_bps(i));
    r->set_cpu_busy_permille(c.cpu_busy_permille(i));
    r->set_cpu_peak_permille(c.cpu_peak_permille(i));
    r->set_cpu_pressure_permille(c.cpu_pressure_permille(i));
  }
  return b;
}

void ExpectSame(const ReportedProbe& a, const ReportedProbe& b) {
  EXPECT_EQ(a.src_node, b.src_node);
  EXPECT_EQ(a.dst_node, b.dst_node);
  EXPECT_EQ(a.transport, b.transport);
  EXPECT_EQ(a.src_port, b.src_port);
  EXPECT_EQ(a.flow_id, b.flow_id);
  EXPECT_EQ(a.seq, b.seq);
  EXPECT_EQ(a.lost, b.lost);
  EXPECT_EQ(a.rtt_ns, b.rtt_ns);
  EXPECT_EQ(a.bytes, b.bytes);
  EXPECT_EQ(a.goodput_bps, b.goodput_bps);
  EXPECT_EQ(a.cpu_busy_permille, b.cpu_busy_permille);
  EXPECT_EQ(a.cpu_peak_permille, b.cpu_peak_permille);
  EXPECT_EQ(a.cpu_pressure_permille, b.cpu_pressure_permille);
}

TEST(ProbeBatchDecoderTest, ColumnsAndResultsDecodeToTheSameResults) {
  std::vector<ReportedProbe> from_cols, from_rows;
  const DecodeOutcome oc = DecodeProbeBatch("me", ColumnBatch(), kAnyPeer, from_cols);
  const DecodeOutcome orow = DecodeProbeBatch("me", RowBatch(), kAnyPeer, from_rows);
  ASSERT_EQ(oc.column_error, ColumnError::kNone);
  ASSERT_EQ(oc.appended, 3u);
  ASSERT_EQ(orow.appended, 3u);
  EXPECT_EQ(oc.invalid_results + orow.invalid_results, 0u);
  for (size_t i = 0; i < 3; ++i) ExpectSame(from_cols[i], from_rows[i]);
  EXPECT_EQ(from_cols[0].src_node, "me");
  EXPECT_EQ(from_cols[1].dst_node, "node-b");
  EXPECT_EQ(from_cols[2].transport, Transport::kTcpBw);
  EXPECT_EQ(from_cols[2].goodput_bps, 9.5e9);
  EXPECT_TRUE(from_cols[1].lost);
  // The CPU columns arrive (a decoder that dropped them would read "not measured").
  EXPECT_EQ(from_cols[2].cpu_busy_permille, 950);
  EXPECT_EQ(from_cols[2].cpu_peak_permille, 1000);
  EXPECT_EQ(from_cols[0].cpu_busy_permille, 0);
}

// A column block through its wire bytes and back: the CPU columns survive serialization, a
// malformed share (over 1000) is dropped alone, and a short CPU column refuses the block.
TEST(ProbeBatchDecoderTest, CpuColumnsSurviveTheWireAndAreChecked) {
  v1::ProbeBatch wire;
  ASSERT_TRUE(wire.ParseFromString(ColumnBatch().SerializeAsString()));
  std::vector<ReportedProbe> out;
  ASSERT_EQ(DecodeProbeBatch("me", wire, kAnyPeer, out).appended, 3u);
  EXPECT_EQ(out[2].cpu_busy_permille, 950);
  EXPECT_EQ(out[2].cpu_peak_permille, 1000);

  v1::ProbeBatch bad = ColumnBatch();
  bad.mutable_columns()->set_cpu_busy_permille(2, 5000);
  const DecodeOutcome o = DecodeProbeBatch("me", bad, kAnyPeer, out);
  ASSERT_EQ(o.appended, 3u);
  EXPECT_EQ(out[2].cpu_busy_permille, 0);  // not measured
  EXPECT_EQ(out[2].cpu_peak_permille, 1000);
  EXPECT_EQ(out[2].goodput_bps, 9.5e9);  // the goodput still counts

  v1::ProbeBatch short_col = ColumnBatch();
  short_col.mutable_columns()->mutable_cpu_peak_permille()->RemoveLast();
  EXPECT_EQ(DecodeProbeBatch("me", short_col, kAnyPeer, out).column_error,
            ColumnError::kColumnLength);

  // A reused slot does not keep an earlier row's CPU share.
  v1::ProbeBatch plain = ColumnBatch();
  plain.mutable_columns()->clear_cpu_busy_permille();
  plain.mutable_columns()->clear_cpu_peak_permille();
  ASSERT_EQ(DecodeProbeBatch("me", plain, kAnyPeer, out).appended, 3u);
  EXPECT_EQ(out[2].cpu_busy_permille, 0);
  EXPECT_EQ(out[2].cpu_peak_permille, 0);
}

// The CPU pressure column (ProbeColumns 18) and field (ProbeResult 19) through their wire bytes:
// kept when present, "not measured" when absent (agents older than the field) or malformed, and
// a column of the wrong length refuses the block like any other.
TEST(ProbeBatchDecoderTest, CpuPressureSurvivesTheWireAndOldAgentsAndGarbageReadNotMeasured) {
  std::vector<ReportedProbe> out;
  for (const v1::ProbeBatch& form : {ColumnBatch(), RowBatch()}) {
    v1::ProbeBatch wire;
    ASSERT_TRUE(wire.ParseFromString(form.SerializeAsString()));
    ASSERT_EQ(DecodeProbeBatch("me", wire, kAnyPeer, out).appended, 3u);
    EXPECT_EQ(out[2].cpu_pressure_permille, 615);
    EXPECT_EQ(out[0].cpu_pressure_permille, 0);
  }

  // An old agent: no pressure column, the busy columns as before. The reused slot is cleared.
  v1::ProbeBatch old_cols = ColumnBatch();
  old_cols.mutable_columns()->clear_cpu_pressure_permille();
  ASSERT_EQ(DecodeProbeBatch("me", old_cols, kAnyPeer, out).appended, 3u);
  EXPECT_EQ(out[2].cpu_pressure_permille, 0);
  EXPECT_EQ(out[2].cpu_busy_permille, 950);
  v1::ProbeBatch old_rows = RowBatch();
  for (v1::ProbeResult& r : *old_rows.mutable_results()) r.clear_cpu_pressure_permille();
  ASSERT_EQ(DecodeProbeBatch("me", old_rows, kAnyPeer, out).appended, 3u);
  EXPECT_EQ(out[2].cpu_pressure_permille, 0);

  // Garbage (over 1000) is dropped alone: the goodput and the busy share still count.
  v1::ProbeBatch bad_cols = ColumnBatch();
  bad_cols.mutable_columns()->set_cpu_pressure_permille(2, 70000);
  ASSERT_EQ(DecodeProbeBatch("me", bad_cols, kAnyPeer, out).appended, 3u);
  EXPECT_EQ(out[2].cpu_pressure_permille, 0);
  EXPECT_EQ(out[2].cpu_busy_permille, 950);
  EXPECT_EQ(out[2].goodput_bps, 9.5e9);
  v1::ProbeBatch bad_rows = RowBatch();
  bad_rows.mutable_results(2)->set_cpu_pressure_permille(1001);
  ASSERT_EQ(DecodeProbeBatch("me", bad_rows, kAnyPeer, out).appended, 3u);
  EXPECT_EQ(out[2].cpu_pressure_permille, 0);
  EXPECT_EQ(out[2].goodput_bps, 9.5e9);

  v1::ProbeBatch short_col = ColumnBatch();
  short_col.mutable_columns()->mutable_cpu_pressure_permille()->RemoveLast();
  EXPECT_EQ(DecodeProbeBatch("me", short_col, kAnyPeer, out).column_error,
            ColumnError::kColumnLength);
}

// The late column (ProbeColumns.late, ProbeResult.late): a UDP row that is not lost carries it;
// on a lost row or a burst it is dropped alone; a column of the wrong length refuses the batch.
TEST(ProbeBatchDecoderTest, LateRowsSurviveTheWireOnlyOnAnsweredUdpRows) {
  std::vector<ReportedProbe> out;
  v1::ProbeBatch cols = ColumnBatch();
  for (bool l : {true, true, true}) cols.mutable_columns()->add_late(l);
  ASSERT_EQ(DecodeProbeBatch("me", cols, kAnyPeer, out).appended, 3u);
  EXPECT_TRUE(out[0].late);   // udp, answered
  EXPECT_FALSE(out[1].late);  // udp, lost: a late echo is never lost
  EXPECT_FALSE(out[2].late);  // a burst
  v1::ProbeBatch rows = RowBatch();
  for (v1::ProbeResult& r : *rows.mutable_results()) r.set_late(true);
  ASSERT_EQ(DecodeProbeBatch("me", rows, kAnyPeer, out).appended, 3u);
  EXPECT_TRUE(out[0].late);
  EXPECT_FALSE(out[1].late);
  EXPECT_FALSE(out[2].late);
  // An agent before the field: no column, and a reused slot is not late.
  ASSERT_EQ(DecodeProbeBatch("me", ColumnBatch(), kAnyPeer, out).appended, 3u);
  EXPECT_FALSE(out[0].late);
  cols.mutable_columns()->mutable_late()->RemoveLast();
  EXPECT_EQ(DecodeProbeBatch("me", cols, kAnyPeer, out).column_error, ColumnError::kColumnLength);
}

TEST(ProbeBatchDecoderTest, ABatchWithBothFormsYieldsResultsThenRows) {
  v1::ProbeBatch b = ColumnBatch();
  *b.mutable_results() = RowBatch().results();
  std::vector<ReportedProbe> out;
  const DecodeOutcome o = DecodeProbeBatch("me", b, kAnyPeer, out);
  EXPECT_EQ(o.appended, 6u);
  for (size_t i = 0; i < 3; ++i) ExpectSame(out[i], out[i + 3]);
}

TEST(ProbeBatchDecoderTest, EmptyOptionalColumnsMeanDefaults) {
  v1::ProbeBatch b;
  v1::ProbeColumns& c = *b.mutable_columns();
  c.add_peer(AddName(c, "node-a"));
  c.add_transport(v1::TRANSPORT_UDP);
  std::vector<ReportedProbe> out;
  const DecodeOutcome o = DecodeProbeBatch("me", b, kAnyPeer, out);
  ASSERT_EQ(o.appended, 1u);
  EXPECT_EQ(out[0].src_port, 0);
  EXPECT_FALSE(out[0].lost);
  EXPECT_EQ(out[0].rtt_ns, 0);
}

TEST(ProbeBatchDecoderTest, BadRowsAreDroppedOneByOneAndTheFilterRunsOncePerName) {
  v1::ProbeBatch b;
  v1::ProbeColumns& c = *b.mutable_columns();
  const uint32_t self = AddName(c, "me");
  const uint32_t empty = AddName(c, "");
  const uint32_t stranger = AddName(c, "stranger");
  const uint32_t ok = AddName(c, "node-a");
  // self, empty name, refused peer, bad transport, port > 65535, then two good rows.
  const uint32_t peers[] = {self, empty, stranger, ok, ok, ok, ok};
  const int transports[] = {1, 1, 1, 99, 1, 1, 1};
  const uint32_t ports[] = {1, 1, 1, 1, 70'000, 2, 3};
  for (int i = 0; i < 7; ++i) {
    c.add_peer(peers[i]);
    c.add_transport(static_cast<v1::Transport>(transports[i]));
    c.add_src_port(ports[i]);
  }
  int asked = 0;
  const PeerFilter filter = [&](std::string_view p) {
    ++asked;
    return p != "stranger";
  };
  std::vector<ReportedProbe> out;
  const DecodeOutcome o = DecodeProbeBatch("me", b, filter, out);
  EXPECT_EQ(o.column_error, ColumnError::kNone);
  EXPECT_EQ(o.appended, 2u);
  EXPECT_EQ(o.invalid_results, 5u);
  EXPECT_EQ(asked, 2);  // "stranger" and "node-a", each once
  EXPECT_EQ(out[0].src_port, 2);
  EXPECT_EQ(out[1].src_port, 3);
}

// Each malformed block: nothing from the columns is taken, and the reason names the fault.
struct Malformed {
  const char* name;
  void (*mutate)(v1::ProbeColumns&);
  ColumnError want;
};

class MalformedColumnsTest : public ::testing::TestWithParam<Malformed> {};

TEST_P(MalformedColumnsTest, RefusedWholeWithItsReason) {
  v1::ProbeBatch b = ColumnBatch();
  *b.mutable_results() = RowBatch().results();  // rows in results[] still count
  GetParam().mutate(*b.mutable_columns());
  std::vector<ReportedProbe> out;
  const DecodeOutcome o = DecodeProbeBatch("me", b, kAnyPeer, out);
  EXPECT_EQ(o.column_error, GetParam().want) << ColumnErrorName(o.column_error);
  EXPECT_EQ(o.appended, 3u);
}

INSTANTIATE_TEST_SUITE_P(
    All, MalformedColumnsTest,
    ::testing::Values(
        Malformed{"short_column", [](v1::ProbeColumns& c) { c.mutable_rtt_ns()->RemoveLast(); },
                  ColumnError::kColumnLength},
        Malformed{"long_column", [](v1::ProbeColumns& c) { c.add_lost(true); },
                  ColumnError::kColumnLength},
        Malformed{"peer_index", [](v1::ProbeColumns& c) { c.set_peer(1, 3); },
                  ColumnError::kIndexOutOfRange},
        Malformed{"nic_index", [](v1::ProbeColumns& c) { c.set_dst_nic(2, 0xffffffffu); },
                  ColumnError::kIndexOutOfRange},
        Malformed{"lengths_past_blob", [](v1::ProbeColumns& c) { c.set_name_lengths(2, 1000); },
                  ColumnError::kNameTable},
        Malformed{"blob_longer_than_lengths",
                  [](v1::ProbeColumns& c) { c.mutable_names()->append("x"); },
                  ColumnError::kNameTable},
        Malformed{"name_too_long",
                  [](v1::ProbeColumns& c) {
                    c.mutable_names()->append(std::string(300, 'n'));
                    c.add_name_lengths(300);
                  },
                  ColumnError::kNameTable},
        Malformed{"invalid_utf8",
                  [](v1::ProbeColumns& c) {
                    c.mutable_names()->append("n\xff\xfe");
                    c.add_name_lengths(3);
                  },
                  ColumnError::kNameTable},
        Malformed{"control_character",
                  [](v1::ProbeColumns& c) {
                    c.mutable_names()->append("n\n1");
                    c.add_name_lengths(3);
                  },
                  ColumnError::kNameTable},
        Malformed{"too_many_names",
                  [](v1::ProbeColumns& c) {
                    for (size_t i = 0; i <= DecodeLimits::kMaxNames; ++i) c.add_name_lengths(0);
                  },
                  ColumnError::kTooLarge}),
    [](const ::testing::TestParamInfo<Malformed>& info) { return std::string(info.param.name); });

TEST(ProbeBatchDecoderTest, Utf8NamesAreAccepted) {
  v1::ProbeBatch b;
  v1::ProbeColumns& c = *b.mutable_columns();
  c.add_peer(AddName(c,
                     "n\xc3\xb6"
                     "de-\xe2\x82\xac"));  // "nöde-€"
  c.add_transport(v1::TRANSPORT_UDP);
  std::vector<ReportedProbe> out;
  const DecodeOutcome o = DecodeProbeBatch("me", b, kAnyPeer, out);
  EXPECT_EQ(o.column_error, ColumnError::kNone);
  ASSERT_EQ(o.appended, 1u);
  EXPECT_EQ(out[0].dst_node,
            "n\xc3\xb6"
            "de-\xe2\x82\xac");
}

TEST(ProbeBatchDecoderTest, OutputSlotsAreReusedAcrossBatches) {
  std::vector<ReportedProbe> out;
  DecodeProbeBatch("me", ColumnBatch(), kAnyPeer, out);
  const ReportedProbe* first = out.data();
  const size_t size = out.size();
  DecodeProbeBatch("me", ColumnBatch(), kAnyPeer, out);
  EXPECT_EQ(out.data(), first);
  EXPECT_EQ(out.size(), size);
}

// The id form: results carry the node's id and each peer's resolved id, and no names.
TEST(ProbeBatchDecoderTest, IdFormCarriesResolvedIdsInsteadOfNames) {
  NameInterner names;
  const NodeId me = names.Intern("me");
  const PeerResolver resolve = [&](std::string_view p) { return names.Intern(p); };
  std::vector<ReportedProbe> by_name, by_id;
  DecodeProbeBatch("me", ColumnBatch(), kAnyPeer, by_name);
  const DecodeOutcome o = DecodeProbeBatch("me", me, ColumnBatch(), resolve, by_id);
  ASSERT_EQ(o.appended, 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(by_id[i].src_id, me);
    EXPECT_EQ(names.NameOf(by_id[i].dst_id), by_name[i].dst_node);
    EXPECT_TRUE(by_id[i].src_node.empty());
    EXPECT_TRUE(by_id[i].dst_node.empty());
    EXPECT_EQ(by_id[i].rtt_ns, by_name[i].rtt_ns);
    EXPECT_EQ(by_name[i].src_id, kNoNode);
  }
  // results[] entries resolve too.
  std::vector<ReportedProbe> rows;
  ASSERT_EQ(DecodeProbeBatch("me", me, RowBatch(), resolve, rows).appended, 3u);
  EXPECT_EQ(rows[1].dst_id, by_id[1].dst_id);
}

// A column NIC name too long for a device (it passes the name table's own checks) is dropped from
// every row that names it, alone: the rows and their other NIC stay, in the by-name form, in the
// id form and on a cache hit, and a reused slot does not keep a NIC of an earlier row.
TEST(ProbeBatchDecoderTest, ABadColumnNicIsDroppedFromEveryRowThatNamesIt) {
  v1::ProbeBatch b;
  v1::ProbeColumns& c = *b.mutable_columns();
  const uint32_t peer = AddName(c, "node-a");
  const uint32_t good = AddName(c, "mlx5_1");
  const uint32_t bad = AddName(c, std::string(65, 'x'));
  for (int i = 0; i < 4; ++i) {
    c.add_peer(peer);
    c.add_transport(v1::TRANSPORT_UDP);
    c.add_src_nic(i % 2 == 0 ? good : bad);
    c.add_dst_nic(i % 2 == 0 ? bad : good);
  }
  auto check = [](const std::vector<ReportedProbe>& out, size_t n) {
    ASSERT_EQ(n, 4u);
    for (size_t i = 0; i < n; ++i) {
      EXPECT_EQ(out[i].src_nic, i % 2 == 0 ? "mlx5_1" : "") << i;
      EXPECT_EQ(out[i].dst_nic, i % 2 == 0 ? "" : "mlx5_1") << i;
    }
  };
  std::vector<ReportedProbe> out;
  check(out, DecodeProbeBatch("me", b, kAnyPeer, out).appended);
  NameInterner names;
  const PeerResolver resolve = [&](std::string_view p) { return names.Intern(p); };
  PeerNameCache cache;
  for (int round = 0; round < 2; ++round) {  // the second one hits the cache
    for (ReportedProbe& r : out) r.src_nic = r.dst_nic = "stale";
    check(out, DecodeProbeBatch("me", names.Intern("me"), b, resolve, out, &cache, 1).appended);
  }
}

// NIC names are checked for UTF-8 with the rest of the table (the rows only check their length):
// a table naming a NIC that is not clean UTF-8 is refused whole, also right after the source's
// previous, clean table was cached, and that cache does not answer for the bad one.
TEST(ProbeBatchDecoderTest, ANicNameThatIsNotUtf8RefusesTheTableAfterACachedOne) {
  auto batch_with_nic = [](const std::string& nic) {
    v1::ProbeBatch b;
    v1::ProbeColumns& c = *b.mutable_columns();
    const uint32_t peer = AddName(c, "node-a");
    const uint32_t n = AddName(c, nic);
    c.add_peer(peer);
    c.add_transport(v1::TRANSPORT_UDP);
    c.add_src_nic(n);
    c.add_dst_nic(n);
    return b;
  };
  NameInterner names;
  const PeerResolver resolve = [&](std::string_view p) { return names.Intern(p); };
  PeerNameCache cache;
  std::vector<ReportedProbe> out;
  const NodeId me = names.Intern("me");
  ASSERT_EQ(DecodeProbeBatch("me", me, batch_with_nic("mlx5_0"), resolve, out, &cache, 1).appended,
            1u);
  for (const std::string& bad :
       {std::string("mlx5\xff"), std::string("ml\x01x"), std::string("mlx5_\xc3")}) {
    const DecodeOutcome o =
        DecodeProbeBatch("me", me, batch_with_nic(bad), resolve, out, &cache, 1);
    EXPECT_EQ(o.column_error, ColumnError::kNameTable);
    EXPECT_EQ(o.appended, 0u);
    // And the clean table again: decoded as before.
    EXPECT_EQ(
        DecodeProbeBatch("me", me, batch_with_nic("mlx5_0"), resolve, out, &cache, 1).appended, 1u);
    EXPECT_EQ(out[0].src_nic, "mlx5_0");
  }
}

// A repeated name table resolves nothing again until the epoch changes; a changed table or a
// refused peer is handled as without the cache.
TEST(ProbeBatchDecoderTest, RepeatedNameTableIsResolvedOncePerEpoch) {
  NameInterner names;
  int asked = 0;
  bool refuse_b = false;
  const PeerResolver resolve = [&](std::string_view p) {
    ++asked;
    return refuse_b && p == "node-b" ? kNoNode : names.Intern(p);
  };
  PeerNameCache cache;
  std::vector<ReportedProbe> out;
  EXPECT_EQ(DecodeProbeBatch("me", 0, ColumnBatch(), resolve, out, &cache, 1).appended, 3u);
  EXPECT_EQ(asked, 2);  // node-a and node-b; the NIC name is never a peer
  EXPECT_EQ(DecodeProbeBatch("me", 0, ColumnBatch(), resolve, out, &cache, 1).appended, 3u);
  EXPECT_EQ(asked, 2);
  EXPECT_EQ(names.NameOf(out[1].dst_id), "node-b");

  // A re-plan refused node-b: the new epoch asks again.
  refuse_b = true;
  const DecodeOutcome o = DecodeProbeBatch("me", 0, ColumnBatch(), resolve, out, &cache, 2);
  EXPECT_EQ(asked, 4);
  EXPECT_EQ(o.appended, 2u);
  EXPECT_EQ(o.invalid_results, 1u);

  // Another table (same blob, other splits) is not mistaken for the cached one.
  v1::ProbeBatch b = ColumnBatch();
  b.mutable_columns()->set_name_lengths(0, 5);  // "node-" + "anode-b" + "mlx5_0"
  b.mutable_columns()->set_name_lengths(1, 7);
  std::vector<ReportedProbe> other;
  const DecodeOutcome o2 = DecodeProbeBatch("me", 0, b, resolve, other, &cache, 2);
  ASSERT_EQ(o2.appended, 3u);
  EXPECT_EQ(names.NameOf(other[0].dst_id), "node-");
  EXPECT_EQ(names.NameOf(other[1].dst_id), "anode-b");

  // A malformed table is refused and clears the cache; a good one after it decodes.
  v1::ProbeBatch bad = ColumnBatch();
  bad.mutable_columns()->set_peer(1, 7);
  EXPECT_EQ(DecodeProbeBatch("me", 0, bad, resolve, out, &cache, 2).column_error,
            ColumnError::kIndexOutOfRange);
  EXPECT_FALSE(cache.valid);
  EXPECT_EQ(DecodeProbeBatch("me", 0, ColumnBatch(), resolve, out, &cache, 2).appended, 2u);
}

// A repeated table whose rows now name a peer no earlier row named resolves that name then.
TEST(ProbeBatchDecoderTest, CacheHitResolvesANameFirstUsedNow) {
  NameInterner names;
  int asked = 0;
  const PeerResolver resolve = [&](std::string_view p) {
    ++asked;
    return names.Intern(p);
  };
  PeerNameCache cache;
  std::vector<ReportedProbe> out;
  DecodeProbeBatch("me", 0, ColumnBatch(), resolve, out, &cache, 1);
  v1::ProbeBatch b = ColumnBatch();
  b.mutable_columns()->set_peer(2, 2);  // the third name, so far only a NIC column's
  const DecodeOutcome o = DecodeProbeBatch("me", 0, b, resolve, out, &cache, 1);
  ASSERT_EQ(o.appended, 3u);
  EXPECT_EQ(asked, 3);
  EXPECT_EQ(names.NameOf(out[2].dst_id), "mlx5_0");
  EXPECT_EQ(names.NameOf(out[0].dst_id), "node-a");
}

// Tables that differ from batch to batch (other peers, other order) resolve each name once per
// epoch: the memo answers names an earlier table carried, with the ids resolve gave then.
TEST(ProbeBatchDecoderTest, OtherTablesResolveOnlyNamesNeverSentBefore) {
  NameInterner names;
  std::vector<std::string> asked;
  bool refuse_b = false;
  const PeerResolver resolve = [&](std::string_view p) {
    asked.emplace_back(p);
    return refuse_b && p == "node-b" ? kNoNode : names.Intern(p);
  };
  PeerNameCache cache;
  std::vector<ReportedProbe> out;
  ASSERT_EQ(DecodeProbeBatch("me", 0, ColumnBatch(), resolve, out, &cache, 1).appended, 3u);
  EXPECT_EQ(asked, (std::vector<std::string>{"node-a", "node-b"}));

  // node-c first, then node-b and node-a: another table, one new name.
  auto other_table = [] {
    v1::ProbeBatch b;
    v1::ProbeColumns& c = *b.mutable_columns();
    const uint32_t cc = AddName(c, "node-c");
    const uint32_t bb = AddName(c, "node-b");
    const uint32_t a = AddName(c, "node-a");
    for (uint32_t p : {cc, bb, a, bb}) {
      c.add_peer(p);
      c.add_transport(v1::TRANSPORT_UDP);
      c.add_rtt_ns(1000);
    }
    return b;
  };
  const DecodeOutcome o = DecodeProbeBatch("me", 0, other_table(), resolve, out, &cache, 1);
  ASSERT_EQ(o.appended, 4u);
  EXPECT_EQ(asked, (std::vector<std::string>{"node-a", "node-b", "node-c"}));
  EXPECT_EQ(names.NameOf(out[0].dst_id), "node-c");
  EXPECT_EQ(names.NameOf(out[1].dst_id), "node-b");
  EXPECT_EQ(names.NameOf(out[2].dst_id), "node-a");
  EXPECT_EQ(out[3].dst_id, out[1].dst_id);
  // Back to the first table: nothing new.
  ASSERT_EQ(DecodeProbeBatch("me", 0, ColumnBatch(), resolve, out, &cache, 1).appended, 3u);
  EXPECT_EQ(asked.size(), 3u);

  // A new epoch forgets every answer: node-b is refused now, in whichever table.
  refuse_b = true;
  const DecodeOutcome o2 = DecodeProbeBatch("me", 0, other_table(), resolve, out, &cache, 2);
  EXPECT_EQ(asked.size(), 6u);
  EXPECT_EQ(o2.appended, 2u);
  EXPECT_EQ(o2.invalid_results, 2u);
  const DecodeOutcome o3 = DecodeProbeBatch("me", 0, ColumnBatch(), resolve, out, &cache, 2);
  EXPECT_EQ(asked.size(), 6u);  // node-a and node-b (refused) came from the memo
  EXPECT_EQ(o3.appended, 2u);
  EXPECT_EQ(o3.invalid_results, 1u);
}

// The memo is bounded: a source that names ever new peers makes it start over, and every id
// stays right across the restarts.
TEST(ProbeBatchDecoderTest, NameMemoStartsOverPastItsBound) {
  NameInterner names;
  int asked = 0;
  const PeerResolver resolve = [&](std::string_view p) {
    ++asked;
    return names.Intern(p);
  };
  PeerNameCache cache;
  std::vector<ReportedProbe> out;
  const size_t rounds = PeerNameCache::kMinMemoNames * 3;
  for (size_t i = 0; i < rounds; ++i) {
    v1::ProbeBatch b;
    v1::ProbeColumns& c = *b.mutable_columns();
    // A fresh name, and one every batch repeats.
    c.add_peer(AddName(c, "peer-" + std::to_string(i)));
    c.add_peer(AddName(c, "always"));
    c.add_transport(v1::TRANSPORT_UDP);
    c.add_transport(v1::TRANSPORT_UDP);
    ASSERT_EQ(DecodeProbeBatch("me", 0, b, resolve, out, &cache, 1).appended, 2u);
    EXPECT_EQ(names.NameOf(out[0].dst_id), "peer-" + std::to_string(i));
    EXPECT_EQ(names.NameOf(out[1].dst_id), "always");
    EXPECT_LE(cache.memo.size(), PeerNameCache::kMinMemoNames);
  }
  // One resolve per fresh name, plus "always" once per fill of the memo.
  EXPECT_GT(asked, static_cast<int>(rounds));
  EXPECT_LT(asked, static_cast<int>(rounds + rounds / (PeerNameCache::kMinMemoNames / 2)));
}

// A cached table still checks each batch's columns: a bad peer index is refused, not read.
TEST(ProbeBatchDecoderTest, CacheHitStillChecksTheColumns) {
  NameInterner names;
  const PeerResolver resolve = [&](std::string_view p) { return names.Intern(p); };
  PeerNameCache cache;
  std::vector<ReportedProbe> out;
  DecodeProbeBatch("me", 0, ColumnBatch(), resolve, out, &cache, 1);
  v1::ProbeBatch b = ColumnBatch();
  b.mutable_columns()->set_peer(2, 3);
  const DecodeOutcome o = DecodeProbeBatch("me", 0, b, resolve, out, &cache, 1);
  EXPECT_EQ(o.column_error, ColumnError::kIndexOutOfRange);
  EXPECT_EQ(o.appended, 0u);
}

// rdma_ud results carry the host delays split off their network RTT (docs/rdma.md).
TEST(ProbeBatchDecoderTest, RdmaResultsCarryTheHostSplitAndReusedSlotsDoNot) {
  v1::ProbeBatch b;
  v1::ProbeResult* r = b.add_results();
  r->set_peer("node-a");
  r->set_transport(v1::TRANSPORT_RDMA_UD);
  r->set_rtt_ns(4'000);
  r->set_prober_host_ns(12'000);
  r->set_responder_host_ns(9'000);
  r->set_src_nic("mlx5_0");
  r->set_dst_nic("mlx5_1");
  v1::ProbeResult* bad = b.add_results();
  *bad = *r;
  bad->set_prober_host_ns(-5);               // never exported: dropped, the RTT kept
  bad->set_dst_nic(std::string(65, 'x'));    // longer than any device name
  bad->set_src_nic(std::string("ml\x01x"));  // a control character
  v1::ProbeResult* udp = b.add_results();
  *udp = *r;
  udp->set_transport(v1::TRANSPORT_UDP);  // the split means nothing elsewhere; the NICs do
  std::vector<ReportedProbe> out;
  ASSERT_EQ(DecodeProbeBatch("me", b, kAnyPeer, out).appended, 3u);
  EXPECT_EQ(out[0].rtt_ns, 4'000);
  EXPECT_EQ(out[0].prober_host_ns, 12'000);
  EXPECT_EQ(out[0].responder_host_ns, 9'000);
  EXPECT_EQ(out[0].src_nic, "mlx5_0");
  EXPECT_EQ(out[0].dst_nic, "mlx5_1");
  EXPECT_EQ(out[1].rtt_ns, 4'000);
  EXPECT_EQ(out[1].prober_host_ns, 0);
  EXPECT_EQ(out[1].responder_host_ns, 9'000);
  EXPECT_EQ(out[1].src_nic, "");
  EXPECT_EQ(out[1].dst_nic, "");
  EXPECT_EQ(out[2].prober_host_ns, 0);
  EXPECT_EQ(out[2].src_nic, "mlx5_0");  // every transport names its rail
  EXPECT_EQ(out[2].dst_nic, "mlx5_1");
  // The same slots, now rows of a columnar batch: nothing of the split survives, and the NICs are
  // the columns' own.
  DecodeProbeBatch("me", ColumnBatch(), kAnyPeer, out);
  EXPECT_EQ(out[0].prober_host_ns, 0);
  EXPECT_EQ(out[0].responder_host_ns, 0);
  EXPECT_EQ(out[0].src_nic, "mlx5_0");
  EXPECT_EQ(out[0].dst_nic, "mlx5_0");
  // Columns without NICs (agents before them) leave the names empty.
  v1::ProbeBatch plain = ColumnBatch();
  plain.mutable_columns()->clear_src_nic();
  plain.mutable_columns()->clear_dst_nic();
  DecodeProbeBatch("me", plain, kAnyPeer, out);
  EXPECT_EQ(out[0].src_nic, "");
  EXPECT_EQ(out[0].dst_nic, "");
}

// A session's Source: the same results as decoding by name, its own id and name cache found once,
// and a source used for another node starts over.
TEST(ProbeIngestTest, ASessionSourceDecodesAsByNameAndStartsOverForAnotherNode) {
  auto names = std::make_shared<NameInterner>();
  metrics::Registry registry;
  ProbeIngest ingest(names, registry);
  const v1::ProbeBatch batch = ColumnBatch();
  const std::vector<ReportedProbe> by_name = [&] {
    auto r = ingest.Decode("node-x", batch);
    return std::vector<ReportedProbe>(r.begin(), r.end());
  }();
  ASSERT_EQ(by_name.size(), 3u);
  ProbeIngest::Source source;
  for (int i = 0; i < 3; ++i) {
    const auto got = ingest.Decode("node-x", batch, source);
    ASSERT_EQ(got.size(), by_name.size());
    for (size_t k = 0; k < got.size(); ++k) {
      ExpectSame(got[k], by_name[k]);
      EXPECT_EQ(got[k].src_id, by_name[k].src_id);
      EXPECT_EQ(got[k].dst_id, by_name[k].dst_id);
    }
  }
  EXPECT_EQ(source.node, "node-x");
  EXPECT_EQ(source.id, names->Find("node-x"));
  PeerNameCache* const cache_x = source.cache;
  ASSERT_NE(cache_x, nullptr);
  // Another node through the same source: its own id and cache, and results from it.
  const auto other = ingest.Decode("node-c", batch, source);
  ASSERT_EQ(other.size(), 3u);
  EXPECT_EQ(other[0].src_id, names->Find("node-c"));
  EXPECT_EQ(source.id, names->Find("node-c"));
  EXPECT_NE(source.cache, cache_x);
}

// Re-plans hand ingest the known nodes again and again: the same set keeps every source's name
// cache (no name is resolved again), a changed set starts a new epoch, whose answers follow it.
TEST(ProbeIngestTest, TheSameKnownNodesKeepTheNameCachesAndAnotherSetIsObeyed) {
  auto names = std::make_shared<NameInterner>();
  metrics::Registry registry;
  ProbeIngest ingest(names, registry);
  auto nodes_of = [](std::vector<std::string> list) {
    std::vector<NodeView> nodes(list.size());
    for (size_t i = 0; i < list.size(); ++i) nodes[i].name = list[i];
    return nodes;
  };
  const v1::ProbeBatch batch = ColumnBatch();  // rows to node-a, node-b, node-a
  ProbeIngest::Source source;
  ingest.SetKnownNodes(nodes_of({"node-x", "node-a", "node-b"}));
  ASSERT_EQ(ingest.Decode("node-x", batch, source).size(), 3u);
  ASSERT_NE(source.cache, nullptr);
  const uint64_t epoch = source.cache->epoch;
  // The same nodes in another order: the same epoch, the same results.
  ingest.SetKnownNodes(nodes_of({"node-b", "node-x", "node-a"}));
  const auto same = ingest.Decode("node-x", batch, source);
  ASSERT_EQ(same.size(), 3u);
  EXPECT_EQ(same[1].dst_id, names->Find("node-b"));
  EXPECT_EQ(source.cache->epoch, epoch);
  // node-b retired: a new epoch, and its row is refused.
  ingest.SetKnownNodes(nodes_of({"node-x", "node-a"}));
  const auto without_b = ingest.Decode("node-x", batch, source);
  ASSERT_EQ(without_b.size(), 2u);
  EXPECT_EQ(without_b[0].dst_id, names->Find("node-a"));
  EXPECT_EQ(without_b[1].dst_id, names->Find("node-a"));
  EXPECT_NE(source.cache->epoch, epoch);
  // Back again: accepted again.
  ingest.SetKnownNodes(nodes_of({"node-x", "node-a", "node-b"}));
  EXPECT_EQ(ingest.Decode("node-x", batch, source).size(), 3u);
  // A node interned since (a new agent's Hello) but not in the set changes nothing either.
  const uint64_t before_new = source.cache->epoch;
  names->Intern("node-new");
  ingest.SetKnownNodes(nodes_of({"node-x", "node-a", "node-b"}));
  EXPECT_EQ(ingest.Decode("node-x", batch, source).size(), 3u);
  EXPECT_EQ(source.cache->epoch, before_new);
}

}  // namespace
}  // namespace fw::aggregator
