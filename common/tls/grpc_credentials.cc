// gRPC's SSL credentials (gRPC 1.51's stable API; the experimental TlsCredentials would add file
// watching, which a restart gives here).
#include "common/tls/grpc_credentials.h"

#include <grpc/support/log.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/security/credentials.h>
#include <grpcpp/security/server_credentials.h>
#include <spdlog/spdlog.h>

#include "exporter/http_server.h"

namespace fw::tls {

namespace {

// gRPC's own log, routed through spdlog (one format in the journal). gRPC 1.51's SSL transport
// logs every refused handshake at ERROR as "Handshake failed with fatal error ...": those are
// counted into fabricwatch_tls_handshake_failures_total{listener="grpc"} (exporter/http_server.h)
// and logged at warn, since a client caused them.
void GrpcLog(gpr_log_func_args* args) {
  const std::string_view msg = args->message != nullptr ? args->message : "";
  if (msg.rfind("Handshake failed", 0) == 0) {
    http::TlsHandshakeFailures("grpc")++;
    spdlog::warn("msg=\"gRPC TLS handshake refused\" error=\"{}\"", msg);
    return;
  }
  switch (args->severity) {
    case GPR_LOG_SEVERITY_ERROR:
      spdlog::error("msg=\"grpc\" file={}:{} error=\"{}\"", args->file, args->line, msg);
      break;
    case GPR_LOG_SEVERITY_INFO:
      spdlog::info("msg=\"grpc\" file={}:{} detail=\"{}\"", args->file, args->line, msg);
      break;
    default:
      spdlog::debug("msg=\"grpc\" file={}:{} detail=\"{}\"", args->file, args->line, msg);
  }
}

}  // namespace

std::shared_ptr<grpc::ServerCredentials> ServerCredentials(
    const std::optional<TlsMaterial>& material) {
  if (!material) return grpc::InsecureServerCredentials();
  gpr_set_log_function(&GrpcLog);
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
