// The gRPC forms of qualification: the Qualify RPC answers through the same jobs as the HTTP API.
#pragma once

#include "daemon/aggregator/qualify/jobs.h"
#include "fabricwatch.pb.h"

namespace fw::qualify {

// timeout_s <= 0 means the default 30 s; an empty suite the quick one.
QualifyJobRequest FromProto(const fabricwatch::v1::QualifyRequest& request);
// The whole report, as the HTTP API's JSON has it (docs/qualify.md).
void ToProto(const QualifyReport& report, fabricwatch::v1::QualifyReport* out);

}  // namespace fw::qualify
