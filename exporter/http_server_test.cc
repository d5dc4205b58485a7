// The HTTP server on a real loopback socket: routing, streaming /metrics, query params, 404.
#include "exporter/http_server.h"

#include <gtest/gtest.h>

#include "common/http/http_client.h"

namespace fw::http {
namespace {

TEST(HttpServerTest, ServesMetricsJsonAndNotFound) {
  auto server = Server::Start("127.0.0.1:0", 2);
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  metrics::Registry registry;
  auto& g = registry.AddGauge("fabricwatch_many", "Many.", {"i"});
  for (int i = 0; i < 5000; ++i) g.WithLabels({std::to_string(i)}).Set(i);
  double scraped = -1;
  (*server)->HandleMetrics(registry, [&](double s) { scraped = s; });
  (*server)->Handle("/api/v1/echo", [](const Request& req, Response& resp) {
    resp.Send(200, "application/json", "{\"src\":\"" + req.Param("src", "none") + "\"}");
  });
  std::string addr = "127.0.0.1:" + std::to_string((*server)->port());

  auto m = Get(addr, "/metrics");
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->status, 200);
  EXPECT_NE(m->content_type.find("version=0.0.4"), std::string::npos);
  EXPECT_NE(m->body.find("fabricwatch_many{i=\"4999\"} 4999\n"), std::string::npos);
  EXPECT_EQ(m->body, registry.RenderToString());
  EXPECT_GE(scraped, 0);

  auto e = Get(addr, "/api/v1/echo?src=node%2001");
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->body, "{\"src\":\"node 01\"}");
  auto nf = Get(addr, "/api/v1/echo/extra");
  ASSERT_TRUE(nf.ok());
  EXPECT_EQ(nf->status, 404);
}

TEST(HttpServerTest, BadListenAddressIsAClearError) {
  auto s = Server::Start("nonsense");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("nonsense"), std::string::npos);
}

TEST(HttpClientTest, UnreachableServerIsUnavailable) {
  auto s = Server::Start("127.0.0.1:0", 1);
  ASSERT_TRUE(s.ok());
  std::string addr = "127.0.0.1:" + std::to_string((*s)->port());
  (*s)->Stop();
  auto r = Get(addr, "/", 1000);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable);
}

}  // namespace
}  // namespace fw::http
