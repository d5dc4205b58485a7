// A small HTTP server on civetweb for /metrics, health and JSON endpoints.
#pragma once

#include <array>
#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>

#include "common/status.h"
#include "exporter/registry.h"
#include "exporter/web_config.h"

struct mg_context;
struct mg_connection;

namespace fw::http {

struct Request {
  std::string method;
  std::string path;
  std::string query;  // raw query string, without '?'
  std::string body;
  // The decoded value of a query parameter, or `fallback` when absent.
  std::string Param(std::string_view name, std::string fallback = "") const;
};

// Writes one response. Either call Send() once, or Begin() then Write() any number of times
// (the body is sent with chunked transfer encoding, so it never has to exist in one piece).
class Response {
 public:
  explicit Response(mg_connection* conn) : conn_(conn) {}
  void Send(int status, std::string_view content_type, std::string_view body);
  void Begin(int status, std::string_view content_type);
  // Adds "name: value" to the headers of the next Send() or Begin(). A name or value holding CR
  // or LF is dropped (it would inject headers).
  void AddHeader(std::string_view name, std::string_view value);
  void Write(std::string_view chunk);
  void End();
  bool started() const { return started_; }

 private:
  mg_connection* conn_;
  bool started_ = false;
  bool chunked_ = false;
  bool ended_ = false;
  bool failed_ = false;        // a write failed (client gone or too slow): the rest is not sent
  std::string extra_headers_;  // "Name: value\r\n" lines from AddHeader()
};

using Handler = std::function<void(const Request&, Response&)>;

struct HandlerOptions {
  // Write-type endpoints (they change state: qualification, pause/resume). When the web config has
  // basic_auth_users, such a request without valid credentials is answered 401 and counted in
  // fabricwatch_http_rejected_requests_total{code="401"}; without users it is served as before.
  bool requires_auth = false;
};

// civetweb serves each connection on one worker thread until it ends, so a client that sends its
// request slowly (or never) holds a worker for up to the request timeout. Enough workers, or a
// short enough timeout, keep a few such clients from delaying everyone else; each request civetweb
// refuses is counted.
class Server {
 public:
  ~Server();
  // Listens on "HOST:PORT" (port 0 picks a free port) with `threads` workers, each waiting at most
  // `request_timeout_ms` for a request to arrive (and for one write to a slow reader, and for a TLS
  // handshake). Fails with a clear message when the address is invalid or taken.
  // With a `web` config whose tls_server_config is set, serves HTTPS only (the certificate,
  // client-certificate policy and minimum version are set on civetweb's SSL_CTX here); its users
  // guard the handlers registered with requires_auth. `web` is copied.
  static StatusOr<std::unique_ptr<Server>> Start(const std::string& listen, int threads = 32,
                                                 const WebConfig* web = nullptr,
                                                 int request_timeout_ms = kRequestTimeoutMs);

  // Registers an exact-path handler. Thread-safe; may be called after Start().
  void Handle(const std::string& path, Handler handler, HandlerOptions options = {});
  // Registers GET /metrics rendering `registry`, timing each render into `scrape_seconds` if given.
  // Also registers this server's own fabricwatch_http_rejected_requests_total{code} in `registry`
  // (requests refused before any handler ran: malformed, too slow, too large); call it at most
  // once per registry. `registry` must outlive the server.
  void HandleMetrics(metrics::Registry& registry,
                     std::function<void(double)> scrape_seconds = nullptr);

  int port() const { return port_; }
  bool tls() const { return web_.tls; }
  // The daemon's watchdog probe: GET /healthz over loopback (HTTPS when tls(), the certificate not
  // verified: it is our own). When the server requires client certificates, which this probe has
  // none of, a completed handshake counts as alive (civetweb's worker threads do the handshake).
  bool SelfCheck(const std::string& listen, int timeout_ms) const;
  // Stops accepting and waits for in-flight handlers. Idempotent.
  void Stop();

  // The default request timeout (see Start()).
  static constexpr int kRequestTimeoutMs = 5000;

 private:
  Server() = default;
  static int Dispatch(mg_connection* conn, void* cbdata);
  static int OnHttpError(mg_connection* conn, int status, const char* message);
  static int InitSsl(void* ssl_ctx, void* user_data);
  // True when the request may reach a requires_auth handler; otherwise answers 401.
  bool Authorize(mg_connection* conn, const Request& req, Response& resp);
  void CountRejected(int status);

  // Rejected requests by status (0: any other). Null until HandleMetrics().
  static constexpr int kRejectedCodes[] = {400, 401, 404, 405, 408, 413, 431, 0};
  std::array<std::atomic<metrics::Counter*>, std::size(kRejectedCodes)> rejected_{};

  mg_context* ctx_ = nullptr;
  int port_ = 0;
  WebConfig web_;
  std::unique_ptr<BasicAuth> auth_;  // null without basic_auth_users
  std::atomic<int64_t> last_auth_log_ns_{0};
  std::atomic<uint64_t> auth_refused_{0};
  struct Route {
    std::string path;
    Handler handler;
    HandlerOptions options;
  };
  std::map<std::string, std::unique_ptr<Route>> handlers_;
};

// Refused TLS handshakes in this process by listener, "grpc" (counted by common/tls from gRPC's
// handshake log) or "http" (civetweb's); HandleMetrics exports both as
// fabricwatch_tls_handshake_failures_total{listener}. Any other name returns the "http" count.
std::atomic<uint64_t>& TlsHandshakeFailures(std::string_view listener);

}  // namespace fw::http
