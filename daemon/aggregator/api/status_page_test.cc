// The status page's serving contract on a real loopback server: the assets, their security
// headers, escaping of the one server-side value, and no external or inline code in the assets.
#include "daemon/aggregator/api/status_page.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <regex>

namespace fw::aggregator {
namespace {

struct RawResponse {
  std::string head;  // status line and headers
  std::string body;
};

// One HTTP/1.0 GET over a plain socket, so the test sees every response header.
RawResponse RawGet(int port, const std::string& path) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  EXPECT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  const std::string req = "GET " + path + " HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
  EXPECT_EQ(write(fd, req.data(), req.size()), static_cast<ssize_t>(req.size()));
  std::string all;
  char buf[8192];
  for (ssize_t n; (n = read(fd, buf, sizeof buf)) > 0;) all.append(buf, static_cast<size_t>(n));
  close(fd);
  const size_t split = all.find("\r\n\r\n");
  if (split == std::string::npos) return {all, ""};
  return {all.substr(0, split + 2), all.substr(split + 4)};
}

class StatusPageServer : public ::testing::Test {
 protected:
  void SetUp() override {
    auto s = http::Server::Start("127.0.0.1:0", 2);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    server_ = std::move(*s);
    InstallStatusPage(*server_, "1.2.3<b>");
  }
  std::unique_ptr<http::Server> server_;
};

TEST_F(StatusPageServer, ServesEveryAssetWithTheCspAndItsType) {
  const std::pair<std::string, std::string> assets[] = {
      {"/", "text/html; charset=utf-8"},
      {"/static/status.css", "text/css; charset=utf-8"},
      {"/static/status.js", "text/javascript; charset=utf-8"},
      {"/static/favicon.svg", "image/svg+xml"}};
  for (const auto& [path, type] : assets) {
    const RawResponse r = RawGet(server_->port(), path);
    EXPECT_TRUE(r.head.starts_with("HTTP/1.1 200")) << path << "\n" << r.head;
    EXPECT_NE(r.head.find("Content-Type: " + type + "\r\n"), std::string::npos) << r.head;
    EXPECT_NE(r.head.find("Content-Security-Policy: " + std::string(kStatusPageCsp) + "\r\n"),
              std::string::npos)
        << r.head;
    EXPECT_NE(r.head.find("X-Content-Type-Options: nosniff\r\n"), std::string::npos) << r.head;
    EXPECT_FALSE(r.body.empty()) << path;
  }
  EXPECT_TRUE(RawGet(server_->port(), "/static/other.js").head.starts_with("HTTP/1.1 404"));
}

TEST_F(StatusPageServer, PageLoadsItsScriptAndStyleFromTheAggregatorOnly) {
  const std::string html = RawGet(server_->port(), "/").body;
  EXPECT_NE(html.find("<script src=\"static/status.js\" defer></script>"), std::string::npos);
  EXPECT_NE(html.find("<link rel=\"stylesheet\" href=\"static/status.css\">"), std::string::npos);
  EXPECT_NE(html.find("aggregator 1.2.3&lt;b&gt;"), std::string::npos);
  EXPECT_EQ(html.find("{{VERSION}}"), std::string::npos);
  EXPECT_EQ(html.find("1.2.3<b>"), std::string::npos);
}

TEST(StatusPageAssets, NoExternalResourcesInlineCodeOrHtmlSinks) {
  const std::string html = StatusPageHtml("v");
  auto server = http::Server::Start("127.0.0.1:0", 2);
  ASSERT_TRUE(server.ok());
  InstallStatusPage(**server, "v");
  const std::string js = RawGet((*server)->port(), "/static/status.js").body;
  const std::string style = RawGet((*server)->port(), "/static/status.css").body;
  // Air-gapped clusters: nothing may come from another host (no CDN, fonts or scripts).
  const std::regex external(R"((https?:)?//[a-zA-Z0-9])");
  for (const std::string* text : {&html, &js, &style}) {
    EXPECT_FALSE(std::regex_search(*text, external)) << text->substr(0, 200);
    EXPECT_EQ(text->find("@import"), std::string::npos);
    EXPECT_EQ(text->find("url("), std::string::npos);
  }
  // The CSP forbids inline script, inline style and event-handler attributes: the page must not
  // depend on them, or it would silently break.
  EXPECT_FALSE(std::regex_search(html, std::regex(R"(<script(?![^>]*\bsrc=)[^>]*>)")));
  EXPECT_FALSE(std::regex_search(html, std::regex(R"(<style|\sstyle=|\son[a-z]+=)")));
  // Values reach the DOM as text only.
  for (const char* sink : {"innerHTML", "outerHTML", "insertAdjacentHTML", "document.write",
                           "eval(", "new Function"}) {
    EXPECT_EQ(js.find(sink), std::string::npos) << sink;
  }
}

TEST(HtmlEscape, EscapesTextAndAttributeSpecials) {
  EXPECT_EQ(HtmlEscape("<script>alert(1)</script>\"'&"),
            "&lt;script&gt;alert(1)&lt;/script&gt;&quot;&#39;&amp;");
  EXPECT_EQ(HtmlEscape("node01"), "node01");
}

}  // namespace
}  // namespace fw::aggregator
