// A small HTTP server on civetweb for /metrics, health and JSON endpoints.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>

#include "common/status.h"
#include "exporter/registry.h"

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
  void Write(std::string_view chunk);
  void End();
  bool started() const { return started_; }

 private:
  mg_connection* conn_;
  bool started_ = false;
  bool chunked_ = false;
  bool ended_ = false;
};

using Handler = std::function<void(const Request&, Response&)>;

class Server {
 public:
  ~Server();
  // Listens on "HOST:PORT" (port 0 picks a free port). Fails with a clear message when the address
  // is invalid or taken.
  static StatusOr<std::unique_ptr<Server>> Start(const std::string& listen, int threads = 4);

  // Registers an exact-path handler. Thread-safe; may be called after Start().
  void Handle(const std::string& path, Handler handler);
  // Registers GET /metrics rendering `registry`, timing each render into `scrape_seconds` if given.
  void HandleMetrics(const metrics::Registry& registry,
                     std::function<void(double)> scrape_seconds = nullptr);

  int port() const { return port_; }
  // Stops accepting and waits for in-flight handlers. Idempotent.
  void Stop();

 private:
  Server() = default;
  static int Dispatch(mg_connection* conn, void* cbdata);

  mg_context* ctx_ = nullptr;
  int port_ = 0;
  struct Route {
    std::string path;
    Handler handler;
  };
  std::map<std::string, std::unique_ptr<Route>> handlers_;
};

// Splits "host:port"; false when malformed or the port is out of range.
bool SplitHostPort(const std::string& s, std::string* host, int* port);

}  // namespace fw::http
