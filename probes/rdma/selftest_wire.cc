// rdma-selftest's control lines: writing and the strict parser.
#include "probes/rdma/selftest_wire.h"

#include <array>
#include <charconv>
#include <string>
#include <tuple>
#include <type_traits>

namespace fw::rdma {
namespace {

constexpr std::string_view kMagic = "fwst1";

// The keys of each message kind, in the order they are written.
constexpr std::array<std::string_view, 15> kHelloKeys = {
    "ud_device", "ud_port", "link", "lid",  "gid",    "gid_index", "ud_qpn",   "qkey",
    "rc_qpn",    "rc_psn",  "rkey", "addr", "length", "ud_ms",     "rc_bursts"};
constexpr std::array<std::string_view, 14> kDoneKeys = {
    "sent",       "answered",   "lost",           "invalid",          "timestamps",
    "net_p50_ns", "net_p99_ns", "prober_p50_ns",  "responder_p50_ns", "rc_asked",
    "rc_ok",      "rc_failed",  "rc_mbps_median", "rc_mbps_max"};
constexpr size_t kMaxKeys = 15;

std::string_view LinkWord(LinkLayer l) {
  return l == LinkLayer::kInfiniBand ? "ib" : l == LinkLayer::kEthernet ? "roce" : "unknown";
}

Status Bad(std::string_view why) {
  return Status::InvalidArgument("rdma-selftest control message: " + std::string(why));
}

// The parsed KEY=VALUE pairs of one message, checked against its key list.
template <size_t N>
class Fields {
 public:
  explicit Fields(const std::array<std::string_view, N>& keys) : keys_(keys) {}

  Status Add(std::string_view token) {
    const size_t eq = token.find('=');
    if (eq == std::string_view::npos || eq == 0) return Bad("a field without KEY=");
    const std::string_view key = token.substr(0, eq);
    for (size_t i = 0; i < N; ++i) {
      if (keys_[i] != key) continue;
      if (seen_[i]) return Bad("field " + std::string(key) + " twice");
      seen_[i] = true;
      values_[i] = token.substr(eq + 1);
      return Status::Ok();
    }
    return Bad("unknown field " + std::string(key.substr(0, 32)));
  }
  Status Complete() const {
    for (size_t i = 0; i < N; ++i) {
      if (!seen_[i]) return Bad("field " + std::string(keys_[i]) + " missing");
    }
    return Status::Ok();
  }
  std::string_view Get(std::string_view key) const {
    for (size_t i = 0; i < N; ++i) {
      if (keys_[i] == key) return values_[i];
    }
    return {};
  }
  // An unsigned decimal in [lo, hi].
  Status Unsigned(std::string_view key, uint64_t lo, uint64_t hi, uint64_t& out) const {
    const std::string_view v = Get(key);
    uint64_t x = 0;
    auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), x);
    if (v.empty() || ec != std::errc() || end != v.data() + v.size() || x < lo || x > hi) {
      return Bad("field " + std::string(key) + " out of range");
    }
    out = x;
    return Status::Ok();
  }
  // -1 ("none") or an unsigned decimal up to hi.
  Status Optional(std::string_view key, uint64_t hi, int64_t& out) const {
    if (Get(key) == "-1") {
      out = -1;
      return Status::Ok();
    }
    uint64_t x = 0;
    Status st = Unsigned(key, 0, hi, x);
    out = static_cast<int64_t>(x);
    return st;
  }

 private:
  const std::array<std::string_view, N>& keys_;
  std::array<bool, kMaxKeys> seen_{};
  std::array<std::string_view, kMaxKeys> values_{};
};

bool DeviceNameOk(std::string_view s) {
  if (s.empty() || s.size() > 64) return false;
  for (char c : s) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '_' || c == '-' || c == '.';
    if (!ok) return false;
  }
  return true;
}

Status ParseHello(const Fields<kHelloKeys.size()>& f, SelftestMsg& m) {
  UdEndpoint& u = m.ud;
  RcEndpoint& r = m.rc;
  u.device = std::string(f.Get("ud_device"));
  if (!DeviceNameOk(u.device)) return Bad("field ud_device is not a device name");
  const std::string_view link = f.Get("link");
  if (link == "ib") {
    u.link_layer = LinkLayer::kInfiniBand;
  } else if (link == "roce") {
    u.link_layer = LinkLayer::kEthernet;
  } else {
    return Bad("field link is not ib or roce");
  }
  auto gid = Gid::Parse(f.Get("gid"));
  if (!gid.ok()) return Bad("field gid is not a GID");
  u.gid = *gid;
  uint64_t port = 0, lid = 0, gid_index = 0, qpn = 0, qkey = 0, rc_qpn = 0, psn = 0, rkey = 0,
           addr = 0, length = 0, ud_ms = 0, bursts = 0;
  for (Status st :
       {f.Unsigned("ud_port", 1, 255, port), f.Unsigned("lid", 0, 0xffff, lid),
        f.Unsigned("gid_index", 0, 255, gid_index), f.Unsigned("ud_qpn", 1, 0xffffff, qpn),
        f.Unsigned("qkey", 0, 0xffffffff, qkey), f.Unsigned("rc_qpn", 1, 0xffffff, rc_qpn),
        f.Unsigned("rc_psn", 0, 0xffffff, psn), f.Unsigned("rkey", 1, 0xffffffff, rkey),
        f.Unsigned("addr", 0, UINT64_MAX, addr), f.Unsigned("length", 1, 1u << 30, length),
        f.Unsigned("ud_ms", 0, 3'600'000, ud_ms), f.Unsigned("rc_bursts", 0, 1000, bursts)}) {
    if (!st.ok()) return st;
  }
  if (u.link_layer == LinkLayer::kInfiniBand && lid == 0 && u.gid.IsZero()) {
    return Bad("InfiniBand endpoint without a LID or GID");
  }
  if (u.link_layer == LinkLayer::kEthernet && u.gid.IsZero())
    return Bad("RoCE endpoint without a GID");
  u.port = static_cast<uint8_t>(port);
  u.lid = static_cast<uint16_t>(lid);
  u.gid_index = static_cast<int>(gid_index);
  u.qpn = static_cast<uint32_t>(qpn);
  u.qkey = static_cast<uint32_t>(qkey);
  r.device = u.device;
  r.port = u.port;
  r.link_layer = u.link_layer;
  r.lid = u.lid;
  r.gid = u.gid;
  r.gid_index = u.gid_index;
  r.qpn = static_cast<uint32_t>(rc_qpn);
  r.psn = static_cast<uint32_t>(psn);
  r.rkey = static_cast<uint32_t>(rkey);
  r.addr = addr;
  r.length = static_cast<uint32_t>(length);
  m.ud_ms = static_cast<int64_t>(ud_ms);
  m.rc_bursts = static_cast<int>(bursts);
  return Status::Ok();
}

Status ParseDone(const Fields<kDoneKeys.size()>& f, SelftestFigures& g) {
  constexpr uint64_t kCount = 1'000'000'000'000ull;
  const std::string_view ts = f.Get("timestamps");
  bool known = false;
  for (TsSource s : {TsSource::kNicWallclock, TsSource::kNicRaw, TsSource::kSoftware}) {
    if (ts == TsSourceName(s)) {
      g.source = s;
      known = true;
    }
  }
  if (!known) return Bad("field timestamps is not a timestamp source");
  uint64_t asked = 0, ok = 0, failed = 0;
  for (Status st :
       {f.Unsigned("sent", 0, kCount, g.sent), f.Unsigned("answered", 0, kCount, g.answered),
        f.Unsigned("lost", 0, kCount, g.lost), f.Unsigned("invalid", 0, kCount, g.invalid),
        f.Optional("net_p50_ns", kCount, g.net_p50_ns),
        f.Optional("net_p99_ns", kCount, g.net_p99_ns),
        f.Optional("prober_p50_ns", kCount, g.prober_p50_ns),
        f.Optional("responder_p50_ns", kCount, g.responder_p50_ns),
        f.Unsigned("rc_asked", 0, 1000, asked), f.Unsigned("rc_ok", 0, 1000, ok),
        f.Unsigned("rc_failed", 0, 1, failed),
        f.Optional("rc_mbps_median", 100'000'000, g.rc_mbps_median),
        f.Optional("rc_mbps_max", 100'000'000, g.rc_mbps_max)}) {
    if (!st.ok()) return st;
  }
  if (ok > asked) return Bad("more RC bursts done than asked");
  g.rc_bursts_asked = static_cast<int>(asked);
  g.rc_bursts_ok = static_cast<int>(ok);
  g.rc_failed = failed == 1;
  return Status::Ok();
}

}  // namespace

std::string EncodeSelftestMsg(const SelftestMsg& m) {
  std::string s(kMagic);
  auto add = [&s](std::string_view key, const std::string& value) {
    s += ' ';
    s += key;
    s += '=';
    s += value;
  };
  auto num = [](auto v) { return std::to_string(v); };
  switch (m.type) {
    case SelftestMsgType::kHello:
      s += " hello";
      add("ud_device", m.ud.device);
      add("ud_port", num(unsigned{m.ud.port}));
      add("link", std::string(LinkWord(m.ud.link_layer)));
      add("lid", num(unsigned{m.ud.lid}));
      add("gid", m.ud.gid.ToString());
      add("gid_index", num(m.ud.gid_index));
      add("ud_qpn", num(m.ud.qpn));
      add("qkey", num(m.ud.qkey));
      add("rc_qpn", num(m.rc.qpn));
      add("rc_psn", num(m.rc.psn));
      add("rkey", num(m.rc.rkey));
      add("addr", num(m.rc.addr));
      add("length", num(m.rc.length));
      add("ud_ms", num(m.ud_ms));
      add("rc_bursts", num(m.rc_bursts));
      break;
    case SelftestMsgType::kDone: {
      const SelftestFigures& g = m.figures;
      s += " done";
      add("sent", num(g.sent));
      add("answered", num(g.answered));
      add("lost", num(g.lost));
      add("invalid", num(g.invalid));
      add("timestamps", std::string(TsSourceName(g.source)));
      add("net_p50_ns", num(g.net_p50_ns));
      add("net_p99_ns", num(g.net_p99_ns));
      add("prober_p50_ns", num(g.prober_p50_ns));
      add("responder_p50_ns", num(g.responder_p50_ns));
      add("rc_asked", num(g.rc_bursts_asked));
      add("rc_ok", num(g.rc_bursts_ok));
      add("rc_failed", num(g.rc_failed ? 1 : 0));
      add("rc_mbps_median", num(g.rc_mbps_median));
      add("rc_mbps_max", num(g.rc_mbps_max));
      break;
    }
    case SelftestMsgType::kBye:
      s += " bye";
      break;
  }
  s += '\n';
  return s;
}

StatusOr<SelftestMsg> ParseSelftestMsg(std::string_view line) {
  if (line.size() > kSelftestLineMax) return Bad("longer than 1024 bytes");
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  // Room for one field more than any message has, so that an extra one is named as such.
  std::array<std::string_view, 3 + kMaxKeys> tokens;
  size_t n = 0;
  size_t pos = 0;
  while (pos < line.size()) {
    const size_t sp = line.find(' ', pos);
    const size_t end = sp == std::string_view::npos ? line.size() : sp;
    if (end == pos) return Bad("empty field (two spaces)");
    if (n == tokens.size()) return Bad("too many fields");
    tokens[n++] = line.substr(pos, end - pos);
    pos = end + 1;
    if (sp != std::string_view::npos && pos == line.size()) return Bad("trailing space");
  }
  if (n < 2 || tokens[0] != kMagic) return Bad("not an rdma-selftest peer (no fwst1)");
  SelftestMsg m;
  const std::string_view kind = tokens[1];
  if (kind == "bye") {
    if (n != 2) return Bad("bye with fields");
    m.type = SelftestMsgType::kBye;
    return m;
  }
  // The fields after the kind, checked against `keys`, then read by `read`.
  auto fields = [&](const auto& keys, auto read) -> StatusOr<SelftestMsg> {
    Fields<std::tuple_size_v<std::decay_t<decltype(keys)>>> f(keys);
    for (size_t i = 2; i < n; ++i) {
      Status st = f.Add(tokens[i]);
      if (!st.ok()) return st;
    }
    Status st = f.Complete();
    if (st.ok()) st = read(f);
    if (!st.ok()) return st;
    return m;
  };
  if (kind == "hello") {
    m.type = SelftestMsgType::kHello;
    return fields(kHelloKeys, [&m](const auto& f) { return ParseHello(f, m); });
  }
  if (kind == "done") {
    m.type = SelftestMsgType::kDone;
    return fields(kDoneKeys, [&m](const auto& f) { return ParseDone(f, m.figures); });
  }
  return Bad("unknown message " + std::string(kind.substr(0, 16)));
}

}  // namespace fw::rdma
