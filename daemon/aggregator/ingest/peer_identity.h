// Which node an agent's session may report for: the node its mTLS client certificate names.
//
// Only peer_identity.cc includes grpcpp; the gRPC context type is declared, never defined, here.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace grpc {
class AuthContext;
class ServerContextBase;
}  // namespace grpc

namespace fw::aggregator {

// What the TLS handshake established about a session's peer, captured when the stream opens.
// It holds gRPC's auth context (shared by every stream of one connection) rather than a copy of
// the certificate's names: a certificate may carry thousands of names, and copying them into every
// session would multiply them by the sessions.
struct PeerIdentity {
  std::shared_ptr<const grpc::AuthContext> auth;  // null for a plaintext peer
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

// The certificate's names joined with ',' (at most ~512 bytes), for log lines.
std::string JoinNames(const PeerIdentity& peer);

}  // namespace fw::aggregator
