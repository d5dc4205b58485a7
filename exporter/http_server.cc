// civetweb glue: request dispatch, chunked streaming and listen-address handling.
#include "exporter/http_server.h"

#include <civetweb.h>
#include <dlfcn.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <vector>

#include "common/http/host_port.h"
#include "common/http/web_client.h"
#include "common/private_lib.h"

namespace fw::http {

namespace {

const char* Reason(int status) {
  switch (status) {
    case 200:
      return "OK";
    case 202:
      return "Accepted";
    case 400:
      return "Bad Request";
    case 401:
      return "Unauthorized";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 500:
      return "Internal Server Error";
    case 503:
      return "Service Unavailable";
    default:
      return "Status";
  }
}

std::once_flag g_init_once;

// Loads civetweb_tls/libcrypto.so and libssl.so (see civetweb_tls/ssl_shim.c) once per process,
// from $FW_CIVETWEB_TLS_DIR, <exe dir>/../lib/<exe name>/ (the packages), or the build tree.
Status LoadCivetwebTlsShims() {
  static std::once_flag once;
  static Status result;
  std::call_once(once, [] {
    const std::vector<std::string> dirs =
        PrivateLibraryDirs("FW_CIVETWEB_TLS_DIR", FW_CIVETWEB_TLS_BUILD_DIR);
    std::string tried;
    for (const auto& dir : dirs) {
      void* crypto = dlopen((dir + "/libcrypto.so").c_str(), RTLD_NOW);
      void* ssl = crypto ? dlopen((dir + "/libssl.so").c_str(), RTLD_NOW) : nullptr;
      if (ssl != nullptr) {
        spdlog::debug("msg=\"civetweb TLS libraries loaded\" dir={}", dir);
        return;  // kept loaded for the process's life
      }
      const char* err = dlerror();
      tried += " " + dir + " (" + (err ? err : "?") + ")";
    }
    result =
        Status::Unavailable("HTTPS needs fabricwatch's civetweb TLS libraries; tried:" + tried);
  });
  return result;
}

}  // namespace

std::atomic<uint64_t>& TlsHandshakeFailures(std::string_view listener) {
  static std::atomic<uint64_t> grpc{0}, http{0};
  return listener == "grpc" ? grpc : http;
}

std::string Request::Param(std::string_view name, std::string fallback) const {
  if (query.empty()) return fallback;
  std::string key(name);
  char buf[1024];
  int n = mg_get_var(query.data(), query.size(), key.c_str(), buf, sizeof buf);
  if (n < 0) return fallback;
  return std::string(buf, static_cast<size_t>(n));
}

void Response::Send(int status, std::string_view content_type, std::string_view body) {
  if (started_) return;
  started_ = true;
  ended_ = true;
  mg_printf(conn_,
            "HTTP/1.1 %d %s\r\nContent-Type: %.*s\r\nContent-Length: %zu\r\n"
            "Cache-Control: no-store\r\n%s\r\n",
            status, Reason(status), static_cast<int>(content_type.size()), content_type.data(),
            body.size(), extra_headers_.c_str());
  if (!body.empty() && mg_write(conn_, body.data(), body.size()) <= 0) failed_ = true;
}

void Response::Begin(int status, std::string_view content_type) {
  if (started_) return;
  started_ = true;
  chunked_ = true;
  mg_printf(conn_,
            "HTTP/1.1 %d %s\r\nContent-Type: %.*s\r\nTransfer-Encoding: chunked\r\n"
            "Cache-Control: no-store\r\n%s\r\n",
            status, Reason(status), static_cast<int>(content_type.size()), content_type.data(),
            extra_headers_.c_str());
}

void Response::AddHeader(std::string_view name, std::string_view value) {
  if (started_) return;
  for (std::string_view part : {name, value}) {
    if (part.find_first_of("\r\n") != std::string_view::npos) return;
  }
  extra_headers_.append(name).append(": ").append(value).append("\r\n");
}

void Response::Write(std::string_view chunk) {
  if (!chunked_ || ended_ || failed_ || chunk.empty()) return;
  // A reader that stopped reading costs one write timeout, not one per remaining chunk.
  if (mg_send_chunk(conn_, chunk.data(), static_cast<unsigned>(chunk.size())) <= 0) failed_ = true;
}

void Response::End() {
  if (!chunked_ || ended_) return;
  ended_ = true;
  if (!failed_) mg_send_chunk(conn_, "", 0);
}

Server::~Server() { Stop(); }

StatusOr<std::unique_ptr<Server>> Server::Start(const std::string& listen, int threads,
                                                const WebConfig* web, int request_timeout_ms) {
  std::string host;
  int port = 0;
  if (!SplitHostPort(listen, &host, &port)) {
    return Status::InvalidArgument("http listen address '" + listen + "' is not HOST:PORT");
  }
  std::call_once(g_init_once, [] { mg_init_library(0); });
  std::string ports = (host.empty() || host == "0.0.0.0" ? "" : host + ":") + std::to_string(port);
  const bool tls = web != nullptr && web->tls;
  if (tls) ports += "s";  // civetweb: this port speaks TLS only
  std::string nthreads = std::to_string(threads);
  std::string timeout = std::to_string(std::max(1, request_timeout_ms));
  const char* options[] = {
      "listening_ports", ports.c_str(),       "num_threads", nthreads.c_str(), "request_timeout_ms",
      timeout.c_str(),   "enable_keep_alive", "yes",         nullptr};
  mg_callbacks callbacks{};
  callbacks.log_message = [](const mg_connection*, const char* message) {
    // civetweb reports each refused TLS handshake (no or bad client certificate, plaintext on a
    // TLS port) as "sslize error: ...".
    if (std::strncmp(message, "sslize error", 12) == 0) TlsHandshakeFailures("http")++;
    spdlog::warn("msg=\"http server\" error={}", message);
    return 1;
  };
  callbacks.http_error = &Server::OnHttpError;
  std::unique_ptr<Server> server(new Server());
  if (web != nullptr) {
    server->web_ = *web;
    if (web->auth_configured()) server->auth_ = std::make_unique<BasicAuth>(web->users);
  }
  if (tls) {
    Status shims = LoadCivetwebTlsShims();
    if (!shims.ok()) return shims;
    callbacks.init_ssl = &Server::InitSsl;
  }
  mg_init_data init{&callbacks, server.get(), options};
  char error_text[256] = "";
  unsigned error_code = 0;
  mg_error_data error{&error_code, error_text, sizeof error_text};
  server->ctx_ = mg_start2(&init, &error);
  if (server->ctx_ == nullptr) {
    // Debian's civetweb loads OpenSSL at run time as "libssl.so"/"libcrypto.so" (the names
    // libssl-dev installs); without them HTTPS cannot start (docs/security.md).
    return Status::Unavailable(
        "cannot listen for HTTP" + std::string(tls ? "S" : "") + " on " + listen + ": " +
        (error_text[0] != 0 ? std::string(error_text) : "address in use or not local?"));
  }
  mg_server_port sp[4];
  int n = mg_get_server_ports(server->ctx_, 4, sp);
  if (n < 1) return Status::Internal("http server started but reports no listening port");
  server->port_ = sp[0].port;
  return server;
}

void Server::Handle(const std::string& path, Handler handler, HandlerOptions options) {
  if (handlers_.count(path) != 0) return;  // first registration wins; routes are never freed early
  auto h = std::make_unique<Route>(Route{path, std::move(handler), options});
  mg_set_request_handler(ctx_, path.c_str(), &Server::Dispatch, h.get());
  handlers_[path] = std::move(h);
}

int Server::OnHttpError(mg_connection* conn, int status, const char*) {
  auto* server = static_cast<Server*>(mg_get_user_data(mg_get_context(conn)));
  if (server != nullptr) server->CountRejected(status);
  return 1;  // civetweb still sends its own error page
}

void Server::CountRejected(int status) {
  size_t i = 0;
  while (kRejectedCodes[i] != 0 && kRejectedCodes[i] != status) ++i;
  if (metrics::Counter* c = rejected_[i].load(std::memory_order_acquire)) c->Inc();
}

void Server::HandleMetrics(metrics::Registry& registry,
                           std::function<void(double)> scrape_seconds) {
  auto& rejected = registry.AddCounter("fabricwatch_http_rejected_requests_total",
                                       "HTTP requests refused before reaching a handler "
                                       "(malformed, too slow, too large), by status.",
                                       {"code"});
  for (size_t i = 0; i < rejected_.size(); ++i) {
    int code = kRejectedCodes[i];
    rejected_[i].store(&rejected.WithLabels({code == 0 ? "other" : std::to_string(code)}),
                       std::memory_order_release);
  }
  auto& tls_failures = registry.AddCounter(
      "fabricwatch_tls_handshake_failures_total",
      "TLS handshakes this daemon refused, by listener (grpc: agents' streams under --tls-*; "
      "http: clients under --web-config): expired or foreign certificates, missing client "
      "certificates, plaintext on a TLS port.",
      {"listener"});
  registry.AddBeforeRender(
      [grpc = &tls_failures.WithLabels({"grpc"}), http = &tls_failures.WithLabels({"http"})] {
        grpc->Set(static_cast<double>(TlsHandshakeFailures("grpc").load()));
        http->Set(static_cast<double>(TlsHandshakeFailures("http").load()));
      });
  Handle("/metrics", [&registry, scrape_seconds](const Request&, Response& resp) {
    auto start = std::chrono::steady_clock::now();
    resp.Begin(200, "text/plain; version=0.0.4; charset=utf-8");
    registry.Render([&resp](std::string_view chunk) { resp.Write(chunk); });
    resp.End();
    if (scrape_seconds) {
      scrape_seconds(
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    }
  });
}

int Server::Dispatch(mg_connection* conn, void* cbdata) {
  const mg_request_info* info = mg_get_request_info(conn);
  auto* entry = static_cast<Route*>(cbdata);
  Request req;
  req.method = info->request_method ? info->request_method : "";
  req.path = info->local_uri ? info->local_uri : "";
  req.query = info->query_string ? info->query_string : "";
  Response resp(conn);
  // civetweb matches handler paths as prefixes; we promise exact paths.
  if (req.path != entry->path) {
    resp.Send(404, "text/plain", "not found\n");
    return 1;
  }
  if (entry->options.requires_auth) {
    auto* server = static_cast<Server*>(mg_get_user_data(mg_get_context(conn)));
    if (server != nullptr && !server->Authorize(conn, req, resp)) return 1;
  }
  if (info->content_length > 0 && info->content_length < (1 << 20)) {
    size_t want = static_cast<size_t>(info->content_length), have = 0;
    req.body.resize(want);
    while (have < want) {
      int got = mg_read(conn, req.body.data() + have, want - have);
      if (got <= 0) break;
      have += static_cast<size_t>(got);
    }
    req.body.resize(have);
  }
  try {
    entry->handler(req, resp);
  } catch (const std::exception& e) {
    spdlog::error("msg=\"http handler failed\" path={} error=\"{}\"", req.path, e.what());
    if (!resp.started()) resp.Send(500, "text/plain", "internal error\n");
  }
  if (!resp.started()) resp.Send(500, "text/plain", "handler sent no response\n");
  resp.End();
  return 1;
}

int Server::InitSsl(void* ssl_ctx, void* user_data) {
  auto* server = static_cast<Server*>(user_data);
  auto* ctx = static_cast<SSL_CTX*>(ssl_ctx);
  const WebTlsConfig& t = server->web_.tls_config;
  auto fail = [](const std::string& what) {
    unsigned long e = ERR_get_error();
    ERR_clear_error();
    char buf[256] = "no detail";
    if (e != 0) ERR_error_string_n(e, buf, sizeof buf);
    spdlog::error("msg=\"web TLS setup failed\" what=\"{}\" error=\"{}\"", what, buf);
    return -1;
  };
  if (SSL_CTX_use_certificate_chain_file(ctx, t.cert_file.c_str()) != 1) {
    return fail("cert_file " + t.cert_file);
  }
  if (SSL_CTX_use_PrivateKey_file(ctx, t.key_file.c_str(), SSL_FILETYPE_PEM) != 1 ||
      SSL_CTX_check_private_key(ctx) != 1) {
    return fail("key_file " + t.key_file + " (or it does not belong to cert_file)");
  }
  SSL_CTX_set_min_proto_version(ctx, t.min_tls13 ? TLS1_3_VERSION : TLS1_2_VERSION);
  int mode = SSL_VERIFY_NONE;
  bool verify = false;
  switch (t.client_auth) {
    case ClientAuth::kNoClientCert:
      break;
    case ClientAuth::kRequestClientCert:
      mode = SSL_VERIFY_PEER;
      break;
    case ClientAuth::kRequireAnyClientCert:
      mode = SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT;
      break;
    case ClientAuth::kVerifyClientCertIfGiven:
      mode = SSL_VERIFY_PEER;
      verify = true;
      break;
    case ClientAuth::kRequireAndVerifyClientCert:
      mode = SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT;
      verify = true;
      break;
  }
  if (verify) {
    if (SSL_CTX_load_verify_locations(ctx, t.client_ca_file.c_str(), nullptr) != 1) {
      return fail("client_ca_file " + t.client_ca_file);
    }
    STACK_OF(X509_NAME)* names = SSL_load_client_CA_file(t.client_ca_file.c_str());
    if (names == nullptr) return fail("client_ca_file " + t.client_ca_file);
    SSL_CTX_set_client_CA_list(ctx, names);
    SSL_CTX_set_verify(ctx, mode, nullptr);
  } else if (mode != SSL_VERIFY_NONE) {
    // Asked for (or required) but not verified: accept whatever certificate is sent.
    SSL_CTX_set_verify(ctx, mode, [](int, X509_STORE_CTX*) { return 1; });
  } else {
    SSL_CTX_set_verify(ctx, SSL_VERIFY_NONE, nullptr);
  }
  return 1;  // civetweb: the callback set up the certificate
}

bool Server::Authorize(mg_connection* conn, const Request& req, Response& resp) {
  if (!auth_) return true;  // no users configured: write endpoints are open, as documented
  const char* header = mg_get_header(conn, "Authorization");
  std::string user;
  if (header != nullptr && auth_->Check(header, &user)) return true;
  CountRejected(401);
  const uint64_t refused = auth_refused_.fetch_add(1) + 1;
  // One line per 10 s at most (an attacker must not fill the log); the counter has every one.
  const int64_t now = std::chrono::steady_clock::now().time_since_epoch().count();
  int64_t last = last_auth_log_ns_.load();
  if (now - last > 10'000'000'000 && last_auth_log_ns_.compare_exchange_strong(last, now)) {
    const mg_request_info* info = mg_get_request_info(conn);
    spdlog::warn(
        "msg=\"http request refused: authentication required\" path={} method={} peer={} "
        "user=\"{}\" reason={} refused_total={}",
        req.path, req.method, info->remote_addr, user.substr(0, 64),
        header == nullptr ? "no_credentials" : "bad_credentials", refused);
  }
  resp.AddHeader("WWW-Authenticate", "Basic realm=\"fabricwatch\", charset=\"UTF-8\"");
  resp.Send(401, "text/plain", "authentication required\n");
  return false;
}

bool Server::SelfCheck(const std::string& listen, int timeout_ms) const {
  std::string host;
  int port = 0;
  if (!SplitHostPort(listen, &host, &port)) return false;
  if (host.empty() || host == "0.0.0.0") host = "127.0.0.1";
  const std::string addr = host + ":" + std::to_string(port_);
  if (!web_.tls) {
    auto r = Get(addr, "/healthz", timeout_ms);
    return r.ok() && r->status == 200;
  }
  WebClientOptions o;
  o.tls = true;  // our own certificate: not verified
  auto r = FetchWeb(addr, "GET", "/healthz", o, timeout_ms);
  if (r.ok()) return r->status == 200;
  const bool cert_required = web_.tls_config.client_auth == ClientAuth::kRequireAnyClientCert ||
                             web_.tls_config.client_auth == ClientAuth::kRequireAndVerifyClientCert;
  // FetchWeb says "TLS write"/"no answer over TLS" only after a completed handshake.
  const std::string& m = r.status().message();
  const bool handshake_done = m.rfind("TLS write", 0) == 0 || m.rfind("no answer over TLS", 0) == 0;
  if (!(cert_required && handshake_done)) {
    spdlog::debug("msg=\"http self-check failed\" error=\"{}\"", m);
  }
  return cert_required && handshake_done;
}

void Server::Stop() {
  if (ctx_ != nullptr) {
    mg_stop(ctx_);
    ctx_ = nullptr;
  }
}

}  // namespace fw::http
