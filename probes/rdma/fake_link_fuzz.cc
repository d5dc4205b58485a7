// libFuzzer target: the fake loopback link's datagram parser never reads past its input, and
// every datagram it accepts encodes back to the same bytes.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "probes/rdma/fake_link.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fw::rdma::LinkDatagram d;
  fw::rdma::LinkDrop why;
  if (!fw::rdma::ParseLinkDatagram(data, size, d, why)) return 0;
  std::vector<uint8_t> out;
  fw::rdma::EncodeLinkDatagram(d, out);
  if (out.size() != size || std::memcmp(out.data(), data, size) != 0) __builtin_trap();
  return 0;
}
