// Blocking OpenSSL client: a socket dialed like http_client.cc, send/receive timeouts, then SSL.
#include "common/http/web_client.h"

#include <fcntl.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <sys/socket.h>
#include <sys/time.h>

#include <chrono>
#include <memory>

namespace fw::http {

namespace {

std::string SslError(const char* what) {
  unsigned long e = ERR_get_error();
  ERR_clear_error();
  char buf[256] = "no detail";
  if (e != 0) ERR_error_string_n(e, buf, sizeof buf);
  return std::string(what) + ": " + buf;
}

}  // namespace

std::string BasicAuthorization(const std::string& user, const std::string& password) {
  const std::string in = user + ":" + password;
  std::string out(4 * ((in.size() + 2) / 3) + 1, '\0');
  int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                          reinterpret_cast<const unsigned char*>(in.data()),
                          static_cast<int>(in.size()));
  out.resize(n > 0 ? static_cast<size_t>(n) : 0);
  return "Basic " + out;
}

StatusOr<ClientResponse> FetchWeb(const std::string& host_port, const std::string& method,
                                  const std::string& target, const WebClientOptions& options,
                                  int timeout_ms, const std::string& body) {
  if (!options.tls) return Fetch(host_port, method, target, body, timeout_ms, options.headers);
  StatusOr<TcpSocket> sock =
      DialTcp(host_port, std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms));
  if (!sock.ok()) return sock.status();
  // OpenSSL below reads and writes a blocking socket; the timeouts bound each call.
  const int fd = sock->fd();
  const std::string& host = sock->host();
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  timeval tv{timeout_ms / 1000, (timeout_ms % 1000) * 1000};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);

  const std::string req = FormatRequest(host_port, method, target, body, options.headers);
  std::string raw;
  char buf[16384];

  std::unique_ptr<SSL_CTX, decltype(&SSL_CTX_free)> ctx(SSL_CTX_new(TLS_client_method()),
                                                        &SSL_CTX_free);
  if (!ctx) return Status::Internal(SslError("SSL_CTX_new"));
  SSL_CTX_set_min_proto_version(ctx.get(), TLS1_2_VERSION);
  if (!options.ca_file.empty()) {
    if (SSL_CTX_load_verify_locations(ctx.get(), options.ca_file.c_str(), nullptr) != 1) {
      return Status::InvalidArgument(SslError(("CA file " + options.ca_file).c_str()));
    }
    SSL_CTX_set_verify(ctx.get(), SSL_VERIFY_PEER, nullptr);
  } else if (options.verify_with_system_ca) {
    if (SSL_CTX_set_default_verify_paths(ctx.get()) != 1) {
      return Status::InvalidArgument(SslError("the system's CA certificates"));
    }
    SSL_CTX_set_verify(ctx.get(), SSL_VERIFY_PEER, nullptr);
  }
  if (!options.cert_file.empty() &&
      (SSL_CTX_use_certificate_chain_file(ctx.get(), options.cert_file.c_str()) != 1 ||
       SSL_CTX_use_PrivateKey_file(ctx.get(), options.key_file.c_str(), SSL_FILETYPE_PEM) != 1)) {
    return Status::InvalidArgument(SslError(("client certificate " + options.cert_file).c_str()));
  }
  std::unique_ptr<SSL, decltype(&SSL_free)> ssl(SSL_new(ctx.get()), &SSL_free);
  if (!ssl) return Status::Internal(SslError("SSL_new"));
  const std::string name = options.server_name.empty() ? host : options.server_name;
  SSL_set_tlsext_host_name(ssl.get(), name.c_str());
  if (!options.ca_file.empty() || options.verify_with_system_ca) {
    X509_VERIFY_PARAM* param = SSL_get0_param(ssl.get());
    // An IP literal is checked against IP SANs, a name against DNS SANs.
    if (X509_VERIFY_PARAM_set1_ip_asc(param, name.c_str()) != 1) {
      ERR_clear_error();
      X509_VERIFY_PARAM_set1_host(param, name.c_str(), 0);
    }
  }
  SSL_set_fd(ssl.get(), fd);
  if (SSL_connect(ssl.get()) != 1) {
    return Status::Unavailable(SslError(("TLS handshake with " + host_port).c_str()));
  }
  if (SSL_write(ssl.get(), req.data(), static_cast<int>(req.size())) <= 0) {
    return Status::Unavailable(SslError(("TLS write to " + host_port).c_str()));
  }
  for (int n; (n = SSL_read(ssl.get(), buf, sizeof buf)) > 0;) {
    raw.append(buf, static_cast<size_t>(n));
    if (raw.size() > (64u << 20)) return Status::ResourceExhausted("response over 64 MiB");
  }
  if (raw.empty()) {
    return Status::Unavailable(SslError(("no answer over TLS from " + host_port).c_str()));
  }
  ERR_clear_error();
  return ParseResponse(raw, host_port);
}

}  // namespace fw::http
