// Peer identity from gRPC's AuthContext (the x509 properties gRPC's SSL transport sets).
#include "daemon/aggregator/ingest/peer_identity.h"

#include <grpcpp/grpcpp.h>

#include "common/tls/grpc_credentials.h"

namespace fw::aggregator {

PeerIdentity IdentityOf(const grpc::ServerContextBase& ctx) {
  PeerIdentity id;
  std::shared_ptr<const grpc::AuthContext> auth = ctx.auth_context();
  if (auth && auth->IsPeerAuthenticated()) id.auth = std::move(auth);
  return id;
}

ClaimVerdict CheckClaim(const PeerIdentity& peer, std::string_view claimed_node, bool tls) {
  if (!tls) return ClaimVerdict::kPlaintext;
  if (!peer.auth || !peer.auth->IsPeerAuthenticated()) return ClaimVerdict::kUnauthenticated;
  if (claimed_node.empty()) return ClaimVerdict::kNotNamed;
  // Byte-for-byte, as tls::NamesNode: node names are identities here, not host lookups.
  for (const char* prop : {"x509_subject_alternative_name", "x509_common_name"}) {
    for (const grpc::string_ref& v : peer.auth->FindPropertyValues(prop)) {
      if (std::string_view(v.data(), v.size()) == claimed_node) return ClaimVerdict::kAllowed;
    }
  }
  return ClaimVerdict::kNotNamed;
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
  for (const auto& n : tls::PeerCertificateNames(peer.auth.get())) {
    if (out.size() + n.size() > 512) {
      out += ",...";
      break;
    }
    out += (out.empty() ? "" : ",") + n;
  }
  return out;
}

}  // namespace fw::aggregator
