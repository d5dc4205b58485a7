// Value helpers of the verbs seam: GID text forms and enum names.
#include "probes/rdma/verbs.h"

#include <cstdio>

namespace fw::rdma {

bool Gid::IsZero() const {
  for (uint8_t b : raw) {
    if (b != 0) return false;
  }
  return true;
}

bool Gid::IsIpv4Mapped() const {
  for (int i = 0; i < 10; ++i) {
    if (raw[i] != 0) return false;
  }
  return raw[10] == 0xff && raw[11] == 0xff;
}

bool Gid::IsLinkLocal() const { return raw[0] == 0xfe && (raw[1] & 0xc0) == 0x80; }

std::string Gid::ToString() const {
  char buf[40];
  int n = 0;
  for (int i = 0; i < 16; i += 2) {
    n += std::snprintf(buf + n, sizeof(buf) - n, i == 0 ? "%02x%02x" : ":%02x%02x", raw[i],
                       raw[i + 1]);
  }
  return std::string(buf, n);
}

namespace {
int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}
}  // namespace

StatusOr<Gid> Gid::Parse(std::string_view text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.remove_suffix(1);
  if (text.size() != 39) {
    return Status::InvalidArgument("gid: expected 39 characters (8 groups of 4 hex digits), got " +
                                   std::to_string(text.size()));
  }
  Gid g;
  for (int group = 0; group < 8; ++group) {
    const size_t at = static_cast<size_t>(group) * 5;
    if (group > 0 && text[at - 1] != ':') return Status::InvalidArgument("gid: ':' expected");
    int v[4];
    for (int k = 0; k < 4; ++k) {
      v[k] = HexDigit(text[at + k]);
      if (v[k] < 0) return Status::InvalidArgument("gid: not a hex digit");
    }
    g.raw[group * 2] = static_cast<uint8_t>(v[0] << 4 | v[1]);
    g.raw[group * 2 + 1] = static_cast<uint8_t>(v[2] << 4 | v[3]);
  }
  return g;
}

std::string_view GidTypeName(GidType t) {
  switch (t) {
    case GidType::kIb:
      return "ib";
    case GidType::kRoceV1:
      return "roce_v1";
    case GidType::kRoceV2:
      return "roce_v2";
    case GidType::kUnknown:
      break;
  }
  return "unknown";
}

std::string_view LinkLayerName(LinkLayer l) {
  switch (l) {
    case LinkLayer::kInfiniBand:
      return "InfiniBand";
    case LinkLayer::kEthernet:
      return "Ethernet";
    case LinkLayer::kUnknown:
      break;
  }
  return "unknown";
}

std::string_view QpStateName(QpState s) {
  switch (s) {
    case QpState::kReset:
      return "RESET";
    case QpState::kInit:
      return "INIT";
    case QpState::kRtr:
      return "RTR";
    case QpState::kRts:
      return "RTS";
    case QpState::kSqd:
      return "SQD";
    case QpState::kSqe:
      return "SQE";
    case QpState::kError:
      return "ERR";
  }
  return "?";
}

std::string_view WcStatusName(WcStatus s) {
  switch (s) {
    case WcStatus::kSuccess:
      return "success";
    case WcStatus::kLocLenErr:
      return "loc_len_err";
    case WcStatus::kLocQpOpErr:
      return "loc_qp_op_err";
    case WcStatus::kLocProtErr:
      return "loc_prot_err";
    case WcStatus::kWrFlushErr:
      return "wr_flush_err";
    case WcStatus::kRemAccessErr:
      return "rem_access_err";
    case WcStatus::kRemInvReqErr:
      return "rem_inv_req_err";
    case WcStatus::kRetryExcErr:
      return "retry_exc_err";
    case WcStatus::kRnrRetryExcErr:
      return "rnr_retry_exc_err";
    case WcStatus::kGeneralErr:
      return "general_err";
    case WcStatus::kOther:
      break;
  }
  return "other";
}

std::string_view AsyncEventName(AsyncEventType t) {
  switch (t) {
    case AsyncEventType::kPortActive:
      return "port_active";
    case AsyncEventType::kPortError:
      return "port_error";
    case AsyncEventType::kLidChange:
      return "lid_change";
    case AsyncEventType::kGidChange:
      return "gid_change";
    case AsyncEventType::kQpFatal:
      return "qp_fatal";
    case AsyncEventType::kCqError:
      return "cq_error";
    case AsyncEventType::kDeviceFatal:
      return "device_fatal";
    case AsyncEventType::kOther:
      break;
  }
  return "other";
}

}  // namespace fw::rdma
