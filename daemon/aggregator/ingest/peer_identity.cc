// Peer identity from gRPC's AuthContext (the x509 properties gRPC's SSL transport sets).
#include "daemon/aggregator/ingest/peer_identity.h"

#include <grpcpp/grpcpp.h>

#include "common/tls/grpc_credentials.h"
#include "common/tls/tls_config.h"

namespace fw::aggregator {

PeerIdentity IdentityOf(const grpc::ServerContextBase& ctx) {
  PeerIdentity id;
  std::shared_ptr<const grpc::AuthContext> auth = ctx.auth_context();
  if (auth && auth->IsPeerAuthenticated()) {
    id.authenticated = true;
    id.names = tls::PeerCertificateNames(auth.get());
  }
  return id;
}

ClaimVerdict CheckClaim(const PeerIdentity& peer, std::string_view claimed_node, bool tls) {
  if (!tls) return ClaimVerdict::kPlaintext;
  if (!peer.authenticated) return ClaimVerdict::kUnauthenticated;
  return tls::NamesNode(peer.names, claimed_node) ? ClaimVerdict::kAllowed
                                                  : ClaimVerdict::kNotNamed;
}

const char* VerdictName(ClaimVerdict v) {
  switch (v) {
    case ClaimVerdict::kAllowed:
      return "allowed";
    case ClaimVerdict::kPlaintext:
      return "plaintext";
    case ClaimVerdict::kNotNamed:
      return "not_named";
    case ClaimVerdict::kUnauthenticated:
      return "unauthenticated";
  }
  return "unknown";
}

std::string JoinNames(const PeerIdentity& peer) {
  std::string out;
  for (const auto& n : peer.names) {
    if (out.size() + n.size() > 512) {
      out += ",...";
      break;
    }
    out += (out.empty() ? "" : ",") + n;
  }
  return out;
}

}  // namespace fw::aggregator
