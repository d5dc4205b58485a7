// The JSON forms of qualification: the POST /api/v1/qualify body and the report (docs/qualify.md).
#pragma once

#include <nlohmann/json.hpp>
#include <string_view>

#include "common/status.h"
#include "daemon/aggregator/qualify/jobs.h"
#include "daemon/aggregator/qualify/suite.h"

namespace fw::qualify {

// {"nodes": ["a", ...], "profile": "generic", "suite": "quick", "timeout_s": 30, "job": "1234"};
// only "nodes" is required. Bounded: at most 1 MiB of body. Errors say which field is wrong.
StatusOr<QualifyJobRequest> ParseQualifyRequest(std::string_view body);

// {id, job, suite, profile, state, note, requested, started, finished, queued_s, duration_s,
//  nodes: [{node, verdict, reasons}], pairs: [{src, dst, verdict, reasons}],
//  steps: [{name, state, duration_s, note}], exit_code}
nlohmann::json ReportToJson(const QualifyReport& report);

}  // namespace fw::qualify
