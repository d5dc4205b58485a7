// Which node an agent's session may report for: the node its mTLS client certificate names.
//
// Only peer_identity.cc includes grpcpp; the gRPC context type is declared, never defined, here.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace grpc {
class ServerContextBase;
}

namespace fw::aggregator {

// What the TLS handshake established about a session's peer, captured when the stream opens.
struct PeerIdentity {
  bool authenticated = false;      // a client certificate verified against the fleet CA
  std::vector<std::string> names;  // its DNS subjectAltNames, then its subject CN
};

enum class ClaimVerdict {
  kAllowed,          // the certificate names the claimed node
  kPlaintext,        // the server runs --insecure: nothing to check, the claim is taken as is
  kNotNamed,         // the certificate names other nodes only: refuse (PERMISSION_DENIED)
  kUnauthenticated,  // TLS is on but the peer has no verified certificate: refuse
};

// Reads the peer's verified certificate names from the call's auth context.
PeerIdentity IdentityOf(const grpc::ServerContextBase& ctx);

// Judges a Hello.node claim. `tls` says whether the server requires client certificates.
ClaimVerdict CheckClaim(const PeerIdentity& peer, std::string_view claimed_node, bool tls);

// The verdict's metric label and log word: "allowed", "plaintext", "not_named",
// "unauthenticated".
const char* VerdictName(ClaimVerdict v);

// The certificate's names joined with ',' (bounded), for log lines.
std::string JoinNames(const PeerIdentity& peer);

}  // namespace fw::aggregator
