// Conversion between the Qualify RPC's messages and the qualification jobs.
#include "daemon/aggregator/qualify/qualify_proto.h"

#include <map>

namespace fw::qualify {

QualifyJobRequest FromProto(const fabricwatch::v1::QualifyRequest& request) {
  QualifyJobRequest r;
  r.nodes.assign(request.nodes().begin(), request.nodes().end());
  r.profile = request.profile();
  if (request.timeout_s() > 0) r.timeout_s = request.timeout_s();
  return r;
}

void ToProto(const QualifyReport& report, fabricwatch::v1::QualifyReport* out) {
  std::map<std::string, fabricwatch::v1::QualifyReport::NodeVerdict*> by_node;
  for (const NodeResult& n : report.nodes) {
    auto* v = out->add_nodes();
    v->set_node(n.node);
    v->set_verdict(VerdictName(n.verdict));
    for (const std::string& r : n.reasons) v->add_reasons(r);
    if (report.state != "done")
      v->add_reasons("qualification " + report.state + ": " + report.note);
    by_node[n.node] = v;
  }
  for (const PairResult& p : report.pairs) {
    for (const std::string* end : {&p.src, &p.dst}) {
      auto it = by_node.find(*end);
      if (it == by_node.end()) continue;
      for (const std::string& r : p.reasons) {
        it->second->add_reasons("pair " + p.src + "->" + p.dst + " (" + VerdictName(p.verdict) +
                                "): " + r);
      }
    }
  }
  out->set_exit_code(report.exit_code);
}

}  // namespace fw::qualify
