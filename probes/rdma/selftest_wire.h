// The control messages of `rdma-selftest` between two hosts (docs/rdma.md, "Between two hosts"):
// one text line each over the TCP connection the client opens to the server, as perftest
// exchanges its connection data. Three kinds:
//   fwst1 hello KEY=VALUE ...  both ends' UD and RC endpoints (the client's also says how long
//                              it probes, so that the server bounds its wait)
//   fwst1 done KEY=VALUE ...   the client's figures, printed by the server too
//   fwst1 bye                  the server has them; both ends tear down
// The parser is strict (ParseSelftestMsg): known keys once each, every required key, values in
// range, at most kSelftestLineMax bytes; anything else is refused with the reason.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "common/status.h"
#include "probes/rdma/rc_write_bw.h"
#include "probes/rdma/ud_packet.h"
#include "probes/rdma/ud_port.h"

namespace fw::rdma {

inline constexpr size_t kSelftestLineMax = 1024;            // without the '\n'
inline constexpr uint16_t kSelftestDefaultTcpPort = 18515;  // perftest's default

enum class SelftestMsgType : uint8_t { kHello, kDone, kBye };

// What one end measured. -1 (or NaN for Gb/s) is "none".
struct SelftestFigures {
  uint64_t sent = 0, answered = 0, lost = 0, invalid = 0;
  TsSource source = TsSource::kSoftware;
  int64_t net_p50_ns = -1, net_p99_ns = -1, prober_p50_ns = -1, responder_p50_ns = -1;
  int rc_bursts_asked = 0, rc_bursts_ok = 0;
  bool rc_failed = false;
  int64_t rc_mbps_median = -1, rc_mbps_max = -1;  // Mb/s (Gb/s x 1000)
};

struct SelftestMsg {
  SelftestMsgType type = SelftestMsgType::kBye;
  // kHello
  UdEndpoint ud;
  RcEndpoint rc;
  int64_t ud_ms = 0;  // the client's UD probing time (0 from the server)
  int rc_bursts = 0;  // the client's RC bursts (0 from the server)
  // kDone
  SelftestFigures figures;
};

// One line with its '\n'.
std::string EncodeSelftestMsg(const SelftestMsg& m);
// `line` without the '\n'. InvalidArgument with the reason for anything not well formed.
StatusOr<SelftestMsg> ParseSelftestMsg(std::string_view line);

}  // namespace fw::rdma
