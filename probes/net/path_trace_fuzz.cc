// libFuzzer target: the ICMP answer parser reads datagrams from a raw socket (anything on the
// wire), so it must never crash or read out of bounds, and an accepted answer must describe a
// trace probe (ttl in range) that assembles without trouble.
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "probes/net/path_trace.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fw::net::IcmpAnswer a;
  if (fw::net::ParseIcmpAnswer(std::span<const uint8_t>(data, size), &a) !=
      fw::net::TraceDrop::kNone) {
    return 0;
  }
  if (a.probe_ttl == 0 || a.probe_ttl > fw::net::kTraceMaxTtl) abort();
  if (a.type != 3 && a.type != 11) abort();
  fw::net::HopAssembler h(
      fw::net::TraceFlow{"peer", a.probe_dst, a.probe_dst_port, a.probe_src_port, 0},
      fw::net::kTraceMaxTtl);
  if (!h.Add(a) && a.from != 0) abort();
  fw::net::TracedPath p = h.Finish(0);
  if (p.hops.size() > fw::net::kTraceMaxTtl) abort();
  return 0;
}
