// gRPC credentials from TlsMaterial. Only grpc_credentials.cc includes grpcpp; callers see the
// credential types declared, never defined.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/tls/tls_config.h"

namespace grpc {
class ServerCredentials;
class ChannelCredentials;
class AuthContext;
}  // namespace grpc

namespace fw::tls {

// mTLS server credentials that require and verify a client certificate signed by the CA, or
// insecure ones when `material` is empty.
std::shared_ptr<grpc::ServerCredentials> ServerCredentials(
    const std::optional<TlsMaterial>& material);

// mTLS client credentials (this process's certificate, the server verified against the CA and
// the target's host name), or insecure ones when `material` is empty.
std::shared_ptr<grpc::ChannelCredentials> ChannelCredentials(
    const std::optional<TlsMaterial>& material);

// The peer's certificate names as gRPC's TLS handshake verified them: the DNS subjectAltNames
// (x509_subject_alternative_name), then the subject CN (x509_common_name). Empty for a plaintext
// peer or no context.
std::vector<std::string> PeerCertificateNames(const grpc::AuthContext* auth);

}  // namespace fw::tls
