// The qualification endpoints: POST /api/v1/qualify (runs one, answers its report; requires
// authentication when the web config has users) and GET /api/v1/qualifications (the recent
// reports).
#pragma once

#include "daemon/aggregator/qualify/jobs.h"
#include "exporter/http_server.h"

namespace fw::qualify {

// `jobs` must outlive the server's handlers.
void InstallQualifyHandlers(http::Server& server, QualifyJobs& jobs);

}  // namespace fw::qualify
