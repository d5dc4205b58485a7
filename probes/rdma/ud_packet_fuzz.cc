// libFuzzer target: the UD probe message parser never reads past its input and every message it
// accepts writes back to the same bytes.
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "probes/rdma/ud_packet.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fw::rdma::UdMessage m;
  fw::rdma::UdDrop why;
  if (!fw::rdma::ParseUdMessage(data, size, m, why)) return 0;
  uint8_t out[fw::rdma::kUdMessageBytes];
  fw::rdma::WriteUdMessage(m, out);
  // The parser masks the QPN to 24 bits; everything else must round-trip exactly.
  uint8_t in[fw::rdma::kUdMessageBytes];
  std::memcpy(in, data, sizeof(in));
  in[20] = 0;
  if (std::memcmp(in, out, sizeof(out)) != 0) __builtin_trap();
  return 0;
}
