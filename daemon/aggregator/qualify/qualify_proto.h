// The gRPC forms of qualification: the Qualify RPC answers through the same jobs as the HTTP API.
#pragma once

#include "daemon/aggregator/qualify/jobs.h"
#include "fabricwatch.pb.h"

namespace fw::qualify {

// The quick suite (QualifyRequest has no suite field); timeout_s <= 0 means the default 30 s.
QualifyJobRequest FromProto(const fabricwatch::v1::QualifyRequest& request);
// Node verdicts and reasons; a judged pair adds its reasons to both of its nodes as
// "pair a->b (fail): ..." (QualifyReport has no pair list), and the exit code. A report that is
// not done names its state in every node's reasons.
void ToProto(const QualifyReport& report, fabricwatch::v1::QualifyReport* out);

}  // namespace fw::qualify
