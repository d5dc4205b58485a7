// The aggregator's status page (GET /): a static HTML shell, CSS and JS, embedded into the
// binary at build time, that reads the JSON API from the browser. The page shows nothing the API
// cannot, needs no network beyond the aggregator (no CDN, no external fonts), and renders every
// API value as text.
#pragma once

#include <string>
#include <string_view>

#include "exporter/http_server.h"

namespace fw::aggregator {

// The Content-Security-Policy every status page response carries: scripts, styles and fetches
// only from the aggregator itself, no inline script or style, no framing.
inline constexpr std::string_view kStatusPageCsp =
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
    "img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

// Registers GET / (the HTML), /static/status.css, /static/status.js and /static/favicon.svg on
// `server`. `version` is shown in the page header (HTML-escaped).
void InstallStatusPage(http::Server& server, std::string_view version);

// The HTML shell with `version` in place; exposed for tests.
std::string StatusPageHtml(std::string_view version);

// Escapes & < > " ' for HTML text and attribute values.
std::string HtmlEscape(std::string_view s);

}  // namespace fw::aggregator
