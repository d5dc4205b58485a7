// Echo responder: answers UDP and TCP probes on one port, never with more bytes than it received,
// within per-source and global rate limits, and (with a shared key) only to authenticated probes.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "common/status.h"
#include "probes/net/probe_packet.h"
#include "probes/net/socket_util.h"
#include "probes/net/udp_prober.h"

namespace fw::net {

struct ResponderOptions {
  std::string listen_address = "0.0.0.0";
  // UDP and TCP share this port. 0 picks a free port that is open for both (tests).
  uint16_t port = 9753;
  // With a key, only probes carrying a valid MAC are answered, and replies carry one too.
  std::optional<std::string> key;
  // Requests (UDP datagrams or TCP frames) per second; a bucket of `burst` absorbs bursts.
  double per_source_rate = 1000;
  double per_source_burst = 100;
  double global_rate = 50000;
  double global_burst = 5000;
  size_t max_sources = 4096;  // per-source buckets tracked; idle ones are evicted first
  size_t max_tcp_connections = 64;
  int64_t tcp_idle_timeout_ns = 5'000'000'000;
};

// Why the responder did not answer. Parse causes first, in DropReason order.
enum class ResponderDrop : uint8_t {
  kTruncated,
  kBadMagic,
  kBadVersion,
  kBadType,
  kBadFlags,
  kBadLength,
  kMissingAuth,
  kBadAuth,
  kUnexpectedType,  // a reply or ack sent to the responder, or bulk over UDP
  kRateLimitedSource,
  kRateLimitedGlobal,
  kTcpConnectionLimit,  // connection refused: too many open
  kTcpIdleTimeout,      // connection closed: no progress within tcp_idle_timeout_ns
  kTcpReset,            // peer closed or reset mid-frame
  kSendFailed,
  kNotInPlan,  // the source is not in the allowed peer list
  kCount,
};
inline constexpr size_t kResponderDropCount = static_cast<size_t>(ResponderDrop::kCount);
std::string_view ResponderDropName(ResponderDrop d);

struct ResponderStats {
  uint64_t udp_requests = 0;  // well-formed echo requests received over UDP
  uint64_t udp_replies = 0;
  uint64_t tcp_accepted = 0;
  uint64_t tcp_echo_replies = 0;
  uint64_t bulk_acks = 0;
  uint64_t bytes_in = 0;           // every byte received, well-formed or not
  uint64_t bytes_out = 0;          // every byte sent: never more than bytes_in
  uint64_t source_table_full = 0;  // sources limited only by the global bucket
  uint64_t socket_errors = 0;      // failed recvmmsg/accept calls (each cause logged once)
  std::array<uint64_t, kResponderDropCount> dropped{};
};

// An IPv4 UDP flow the responder answered: the prober's address (host order) and source port.
// Path tracing follows the echoes of these flows back (TrackAnsweredSources).
struct AnsweredUdpFlow {
  uint32_t address = 0;
  uint16_t port = 0;
  bool operator==(const AnsweredUdpFlow&) const = default;
};

class EchoResponder {
 public:
  // Binds the sockets and starts the responder's thread, or with a `host`, runs the responder on
  // that prober's thread instead (LoopGuest; `host` must outlive the responder or be stopped
  // before it). Fails if the port is taken or options are invalid; never crashes on what it
  // receives.
  static StatusOr<std::unique_ptr<EchoResponder>> Start(ResponderOptions options,
                                                        const Clock& clock,
                                                        UdpProber* host = nullptr);
  ~EchoResponder();  // Stop()s.
  EchoResponder(const EchoResponder&) = delete;
  EchoResponder& operator=(const EchoResponder&) = delete;

  // Stops the thread (or leaves the host's loop) and closes every socket. Idempotent; returns once
  // no call runs the responder any more.
  void Stop();
  uint16_t port() const { return port_; }
  ResponderStats Stats() const;  // thread-safe snapshot
  // Answers only these source addresses from now on (numeric IPs: the nodes whose plans name this
  // one); an empty list answers everyone. The list it replaces stays admitted for
  // `keep_previous` more (peers still probing by their previous plan while the new ones travel).
  // Others are dropped and counted as not_in_plan. Thread-safe; takes effect within one loop turn.
  // kInvalidArgument for an address that is not a numeric IP (nothing changes then).
  Status SetAllowedPeers(const std::vector<std::string>& addresses,
                         std::chrono::nanoseconds keep_previous = std::chrono::nanoseconds(0));
  // From now on, remembers the distinct IPv4 UDP flows it answers, up to `max` between two
  // TakeAnsweredUdpFlows() calls (further new ones are counted, not kept); 0 stops. Off by
  // default: it costs the UDP thread one lock per received batch. Thread-safe.
  void TrackAnsweredUdpFlows(size_t max);
  // The flows answered since the last call (each once, in no order), and how many new flows did
  // not fit since then. Thread-safe.
  std::vector<AnsweredUdpFlow> TakeAnsweredUdpFlows(uint64_t* not_kept = nullptr);

 private:
  class Loop;
  EchoResponder() = default;

  uint16_t port_ = 0;
  std::unique_ptr<Loop> loop_;
  std::thread thread_;         // the one loop: UDP, TCP, stop (none with a host)
  UdpProber* host_ = nullptr;  // set while the responder runs on a prober's thread
};

}  // namespace fw::net
