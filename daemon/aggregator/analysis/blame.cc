// The blame step: Blamer::Run and BuildObservations; the levels are in blame_*.cc.
#include "daemon/aggregator/analysis/blamer.h"

namespace fw::analysis {

std::string PairId(const std::string& x, const std::string& y) {
  return x < y ? x + "~" + y : y + "~" + x;
}

void BuildObservations(const BlameContext& ctx, Analyzer::Evaluation& ev) {
  blame::Blamer(ctx, ev).Run();
}

}  // namespace fw::analysis
