// Conversion between the Qualify RPC's messages and the qualification jobs.
#include "daemon/aggregator/qualify/qualify_proto.h"

namespace fw::qualify {

QualifyJobRequest FromProto(const fabricwatch::v1::QualifyRequest& request) {
  QualifyJobRequest r;
  r.nodes.assign(request.nodes().begin(), request.nodes().end());
  r.profile = request.profile();
  r.suite = request.suite();
  r.job = request.job();
  if (request.timeout_s() > 0) r.timeout_s = request.timeout_s();
  return r;
}

void ToProto(const QualifyReport& report, fabricwatch::v1::QualifyReport* out) {
  for (const NodeResult& n : report.nodes) {
    auto* v = out->add_nodes();
    v->set_node(n.node);
    v->set_verdict(VerdictName(n.verdict));
    for (const std::string& r : n.reasons) v->add_reasons(r);
  }
  for (const PairResult& p : report.pairs) {
    auto* v = out->add_pairs();
    v->set_src(p.src);
    v->set_dst(p.dst);
    v->set_verdict(VerdictName(p.verdict));
    for (const std::string& r : p.reasons) v->add_reasons(r);
  }
  for (const StepResult& s : report.steps) {
    auto* v = out->add_steps();
    v->set_name(s.name);
    v->set_state(s.state);
    v->set_duration_s(s.duration_s);
    v->set_note(s.note);
  }
  out->set_exit_code(report.exit_code);
  out->set_id(report.id);
  out->set_state(report.state);
  out->set_note(report.note);
  out->set_suite(report.suite);
  out->set_profile(report.profile);
  out->set_job(report.job);
  out->set_duration_s(report.duration_s);
  out->set_queued_s(report.queued_s);
}

}  // namespace fw::qualify
