// HTTP handlers of qualification. A POST holds its civetweb worker for the whole suite (seconds);
// the jobs bound how many run at once, so the API keeps workers for everything else.
#include "daemon/aggregator/qualify/qualify_http.h"

#include <charconv>
#include <nlohmann/json.hpp>

#include "daemon/aggregator/qualify/report_json.h"

namespace fw::qualify {

using nlohmann::json;

void InstallQualifyHandlers(http::Server& server, QualifyJobs& jobs) {
  auto qualify = [&jobs](const http::Request& req, http::Response& r) {
    if (req.method != "POST") {
      r.AddHeader("Allow", "POST");
      r.Send(405, "application/json",
             json{{"error", "POST a JSON body {\"nodes\": [...]}"}}.dump());
      return;
    }
    auto request = ParseQualifyRequest(req.body);
    if (!request.ok()) {
      r.Send(400, "application/json", json{{"error", request.status().message()}}.dump());
      return;
    }
    auto report = jobs.Run(*request);
    if (!report.ok()) {
      const int code = report.status().code() == StatusCode::kResourceExhausted ? 429 : 400;
      r.Send(code, "application/json", json{{"error", report.status().message()}}.dump());
      return;
    }
    r.Send(200, "application/json", ReportToJson(*report).dump());
  };
  // A qualification sends probes across the fabric and holds a job slot: a write.
  server.Handle("/api/v1/qualify", qualify, http::HandlerOptions{.requires_auth = true});
  server.Handle("/api/v1/qualifications", [&jobs](const http::Request& req, http::Response& r) {
    ReportQuery q;
    q.id = req.Param("id");
    q.node = req.Param("node");
    q.job = req.Param("job");
    const std::string limit = req.Param("limit");
    if (!limit.empty()) {
      size_t n = 0;
      const auto [end, ec] = std::from_chars(limit.data(), limit.data() + limit.size(), n);
      if (ec != std::errc() || end != limit.data() + limit.size() || n == 0 || n > 1000) {
        r.Send(400, "application/json",
               json{{"error", "limit must be a whole number from 1 to 1000"}}.dump());
        return;
      }
      q.limit = n;
    }
    r.Send(200, "application/json", jobs.Find(q).dump());
  });
}

}  // namespace fw::qualify
