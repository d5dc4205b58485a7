// HTTP handlers of qualification. A POST holds its civetweb worker for the whole suite (seconds);
// the jobs bound how many run at once, so the API keeps workers for everything else.
#include "daemon/aggregator/qualify/qualify_http.h"

#include <nlohmann/json.hpp>

#include "daemon/aggregator/qualify/report_json.h"

namespace fw::qualify {

using nlohmann::json;

void InstallQualifyHandlers(http::Server& server, QualifyJobs& jobs) {
  server.Handle("/api/v1/qualify", [&jobs](const http::Request& req, http::Response& r) {
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
  });
  server.Handle("/api/v1/qualifications", [&jobs](const http::Request& req, http::Response& r) {
    const std::string id = req.Param("id");
    json out = json::array();
    for (const QualifyReport& rep : jobs.Recent()) {
      if (!id.empty() && rep.id != id) continue;
      out.push_back(ReportToJson(rep));
    }
    r.Send(200, "application/json", out.dump());
  });
}

}  // namespace fw::qualify
