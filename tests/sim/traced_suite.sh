#!/usr/bin/env bash
# Issue 16's ECMP suite with path tracing and escalation: the scenarios in
# tests/sim/scenarios/traced/ run side by side, each fw_sim with its own aggregator (started and
# stopped by PID), and the suite's figures are printed against the issue's targets.
#
#   tests/sim/traced_suite.sh FW_SIM AGGREGATOR_BIN [OUT_DIR]
#
# FW_SIM_ARGS (environment): extra options for every fw_sim, e.g. "--findings-poll 0.1".
#
# Printed: every scenario's row and the suite's figures against issue 16's targets (exact-element
# localization >= 0.95, precision >= 0.99, recall >= 0.95, median TTD <= 3 s, congested spine <= 15 s,
# flapping link <= 10 s, healthy 0 findings, escalation traffic < 5 %). The median TTD over the
# detected faults is the scorer's (the mean of the two middle values for an even count);
# `ttd_upper_median_s` beside it is the upper of the two.
# Asserted (exit 1 when missed), on the asserted scenarios (`asserted` below): precision >= 0.99 and
# recall >= 0.95, 0 findings and escalation traffic < 5 % in the healthy run. Exact localization is
# printed, not asserted: it was named as the leaf's link group in some runs before echo traces, and
# has been measured with them in a few runs only. Two rails: the rail-1 fault is detected (recall 1
# in that scenario) and no finding is on rail 0; which rail-1 element is named (the link, or its
# leaf when untraced TCP bursts make the leaf's other uplink look slow too) is printed. The flap
# is named link_flapping within 10 s (issue 16's target). Link down and congested spine are
# measured only: docs/simulator.md, "ECMP with path tracing", says what they show and why.
set -uo pipefail
sim="$1"
agg="$2"
# Without OUT_DIR the reports go to a temporary folder removed at exit.
if [[ $# -ge 3 ]]; then
  out="$3"
else
  out=$(mktemp -d "${TMPDIR:-/tmp}/fw_traced.XXXXXX")
  trap 'rm -rf "$out"' EXIT
fi
here=$(cd "$(dirname "$0")" && pwd)
command -v jq >/dev/null || { echo "traced_suite.sh: needs jq" >&2; exit 3; }
mkdir -p "$out"
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
pids=()
reports=()  # the scenarios' own reports: a reused OUT_DIR also holds suite.json and asserted.json
for s in "$here"/scenarios/traced/*.yaml; do
  name=$(basename "$s" .yaml)
  # shellcheck disable=SC2086 # FW_SIM_ARGS: extra fw_sim options, split on spaces
  "$sim" --scenario "$s" --aggregator-bin "$agg" --json-out "$out/$name.json" --log-level warn \
    ${FW_SIM_ARGS:-} \
    >"$out/$name.txt" 2>&1 &
  pids+=($!)
  reports+=("$out/$name.json")
done
for p in "${pids[@]}"; do wait "$p"; done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
for s in "$here"/scenarios/traced/*.yaml; do
  name=$(basename "$s" .yaml)
  [[ -s "$out/$name.json" ]] || { echo "FAIL $name: no report"; tail -5 "$out/$name.txt"; exit 1; }
done
jq -rs '
  def n(x): if x == null then "n/a" else (x * 1000 | round / 1000 | tostring) end;
  (["scenario", "findings", "prec", "recall", "local", "TTD s", "traces", "esc share", "esc peak"]
   | @tsv),
  (.[] | [.name, .findings.count, n(.findings.precision), n(.findings.recall),
          n(.findings.localization), n(.findings.ttd_median_s), .tracing.traces_sent,
          n(.escalation.extra_share), n(.escalation.peak_extra_share)] | @tsv)
' "${reports[@]}" | column -t -s $'\t'
asserted='["traced_healthy", "traced_link_loss_5pct", "traced_silent_spine_loss"]'
figures='
  [.[] | .findings] as $f
  | ($f | map(.true_positives) | add) as $tp | ($f | map(.false_positives) | add) as $fp
  | ($f | map(.faults[]) | flatten) as $faults | ($faults | map(select(.detected))) as $det
  | ($det | map(.ttd_s) | sort) as $ttd
  | ((.[] | select(.name == "traced_healthy")) // {}) as $h
  | ([.[] | select(.name == "traced_congested_spine") | .findings.ttd_median_s][0]) as $spine
  | ([.[] | select(.name == "traced_link_flap") | .findings.ttd_median_s][0]) as $flap
  | ([.[] | select(.name == "traced_two_rails_link_loss") | .findings.seen[]] |
     map(select(.location.id | test("rail0")))) as $rail0
  | ([.[] | select(.name == "traced_two_rails_link_loss") | .findings][0]) as $rails
  | {precision: (if ($tp + $fp) > 0 then $tp / ($tp + $fp) else 0 end),
     recall: (($det | length) / ($faults | length)),
     localization: (if ($det | length) > 0 then ($det | map(select(.localized)) | length) / ($det | length) else 0 end),
     ttd_median_s: (($ttd | length) as $n
                    | if $n == 0 then null
                      elif $n % 2 == 1 then $ttd[($n - 1) / 2]
                      else ($ttd[$n / 2 - 1] + $ttd[$n / 2]) / 2 end),
     ttd_upper_median_s: (if ($ttd | length) > 0 then $ttd[($ttd | length) / 2 | floor] else null end),
     congested_spine_ttd_s: $spine, flapping_link_ttd_s: $flap,
     healthy_findings: $h.findings.count,
     healthy_escalation_share: $h.escalation.extra_share,
     healthy_escalation_peak_share: $h.escalation.peak_extra_share,
     rail0_findings_in_two_rail_run: ($rail0 | length),
     two_rails_recall: $rails.recall, two_rails_localization: $rails.localization,
     two_rails_precision: $rails.precision}'
jq -s "$figures" "${reports[@]}" >"$out/suite.json"
jq -s --argjson names "$asserted" "[.[] | select(.name as \$n | \$names | index(\$n))] | $figures" \
  "${reports[@]}" >"$out/asserted.json"
echo "suite (targets: localization >= 0.95, precision >= 0.99, recall >= 0.95, median TTD <= 3 s,"
echo "       congested spine <= 15 s, flapping link <= 10 s, healthy 0 findings, escalation < 5 %):"
echo "all:      $(jq -c . "$out/suite.json")"
echo "asserted: $(jq -c 'del(.congested_spine_ttd_s, .flapping_link_ttd_s, .rail0_findings_in_two_rail_run, .two_rails_recall, .two_rails_localization, .two_rails_precision)' "$out/asserted.json")"
[[ $# -ge 3 ]] && echo "reports: $out"
jq -e '.precision >= 0.99 and .recall >= 0.95 and
       .healthy_findings == 0 and .healthy_escalation_share < 0.05' "$out/asserted.json" >/dev/null ||
  { echo "FAIL: a target the suite asserts was missed"; exit 1; }
jq -e '.rail0_findings_in_two_rail_run == 0 and .two_rails_recall == 1' "$out/suite.json" \
  >/dev/null || { echo "FAIL: two rails: the rail-1 fault was missed, or rail 0 had a finding"; exit 1; }
# A short outage that came back is a flap (docs/analysis.md, "Defaults and why"): 4-5 s at load 5-7.
jq -e '.flapping_link_ttd_s != null and .flapping_link_ttd_s <= 10' "$out/suite.json" >/dev/null ||
  { echo "FAIL: the flapping link was not named link_flapping within 10 s"; exit 1; }
echo "PASS"
