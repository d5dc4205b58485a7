// Serves the embedded status page assets with a strict Content-Security-Policy.
#include "daemon/aggregator/api/status_page.h"

#include <memory>

namespace fw::aggregator {

namespace status_page_assets {
// Generated from status_page.{html,css,js} by status_page_embed.cmake.
extern const std::string_view kHtml;
extern const std::string_view kCss;
extern const std::string_view kJs;
}  // namespace status_page_assets

namespace {

constexpr std::string_view kVersionPlaceholder = "{{VERSION}}";

// A small icon, so browsers do not ask for /favicon.ico (a 404 on every page load).
constexpr std::string_view kFavicon =
    "<svg xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 16 16\">"
    "<rect x=\"1\" y=\"1\" width=\"6\" height=\"6\" fill=\"#2e9e4f\"/>"
    "<rect x=\"9\" y=\"1\" width=\"6\" height=\"6\" fill=\"#2e9e4f\"/>"
    "<rect x=\"1\" y=\"9\" width=\"6\" height=\"6\" fill=\"#2e9e4f\"/>"
    "<rect x=\"9\" y=\"9\" width=\"6\" height=\"6\" fill=\"#d32f2f\"/></svg>";

// Headers on every asset: the CSP, no MIME sniffing (a JSON or text body is never run as script),
// and no referrer to other sites.
void SendAsset(http::Response& r, std::string_view content_type, std::string_view body) {
  r.AddHeader("Content-Security-Policy", kStatusPageCsp);
  r.AddHeader("X-Content-Type-Options", "nosniff");
  r.AddHeader("X-Frame-Options", "DENY");
  r.AddHeader("Referrer-Policy", "no-referrer");
  r.Send(200, content_type, body);
}

}  // namespace

std::string HtmlEscape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string StatusPageHtml(std::string_view version) {
  std::string html(status_page_assets::kHtml);
  const size_t at = html.find(kVersionPlaceholder);
  if (at != std::string::npos) html.replace(at, kVersionPlaceholder.size(), HtmlEscape(version));
  return html;
}

void InstallStatusPage(http::Server& server, std::string_view version) {
  auto html = std::make_shared<const std::string>(StatusPageHtml(version));
  server.Handle("/", [html](const http::Request&, http::Response& r) {
    SendAsset(r, "text/html; charset=utf-8", *html);
  });
  server.Handle("/static/status.css", [](const http::Request&, http::Response& r) {
    SendAsset(r, "text/css; charset=utf-8", status_page_assets::kCss);
  });
  server.Handle("/static/status.js", [](const http::Request&, http::Response& r) {
    SendAsset(r, "text/javascript; charset=utf-8", status_page_assets::kJs);
  });
  server.Handle("/static/favicon.svg", [](const http::Request&, http::Response& r) {
    SendAsset(r, "image/svg+xml", kFavicon);
  });
}

}  // namespace fw::aggregator
