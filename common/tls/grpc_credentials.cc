// gRPC's SSL credentials (gRPC 1.51's stable API; the experimental TlsCredentials would add file
// watching, which a restart gives here).
#include "common/tls/grpc_credentials.h"

#include <grpcpp/grpcpp.h>
#include <grpcpp/security/credentials.h>
#include <grpcpp/security/server_credentials.h>

namespace fw::tls {

std::shared_ptr<grpc::ServerCredentials> ServerCredentials(
    const std::optional<TlsMaterial>& material) {
  if (!material) return grpc::InsecureServerCredentials();
  grpc::SslServerCredentialsOptions opts(
      GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  opts.pem_root_certs = material->ca_pem;
  opts.pem_key_cert_pairs.push_back({material->key_pem, material->cert_pem});
  return grpc::SslServerCredentials(opts);
}

std::shared_ptr<grpc::ChannelCredentials> ChannelCredentials(
    const std::optional<TlsMaterial>& material) {
  if (!material) return grpc::InsecureChannelCredentials();
  grpc::SslCredentialsOptions opts;
  opts.pem_root_certs = material->ca_pem;
  opts.pem_private_key = material->key_pem;
  opts.pem_cert_chain = material->cert_pem;
  return grpc::SslCredentials(opts);
}

std::vector<std::string> PeerCertificateNames(const grpc::AuthContext* auth) {
  std::vector<std::string> names;
  if (auth == nullptr || !auth->IsPeerAuthenticated()) return names;
  for (const char* prop : {"x509_subject_alternative_name", "x509_common_name"}) {
    for (const grpc::string_ref& v : auth->FindPropertyValues(prop)) {
      names.emplace_back(v.data(), v.size());
    }
  }
  return names;
}

}  // namespace fw::tls
