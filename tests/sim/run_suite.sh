#!/usr/bin/env bash
# Runs the fleet simulator's scenario suite, each scenario against a fresh aggregator that fw_sim
# starts and stops by PID, and prints one table row per scenario plus suite-wide accuracy.
#
#   tests/sim/run_suite.sh [-b BUILD_DIR] [-o OUT_DIR] [-n] [-r ROUTINGS] [-- extra fw_sim flags]
#                          [SCENARIO.yaml ...]
#
#   -b  build directory holding tests/sim/fw_sim and daemon/aggregator/fabricwatch-aggregator
#       (default: build)
#   -o  where the JSON reports go (default: a new temporary directory)
#   -n  nightly: add the 30-minute healthy runs (deterministic; ECMP with tracing and escalation)
#   -r  comma-separated routings (deterministic,ecmp): the suite once per routing, reports in
#       OUT_DIR/<routing>/ and one table each (default: the scenarios' own, ecmp)
# Exit status: 0 when no scenario has a verdict failure, 1 otherwise, 3 on usage errors.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build="$root/build"
out=""
nightly=0
routings=""
extra=()
scenarios=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    -b) build=$(cd "$2" && pwd); shift 2 ;;
    -o) out="$2"; shift 2 ;;
    -n) nightly=1; shift ;;
    -r) routings="$2"; shift 2 ;;
    --) shift; while [[ $# -gt 0 && "$1" != *.yaml ]]; do extra+=("$1"); shift; done ;;
    -h|--help) sed -n '2,15p' "$0"; exit 0 ;;
    *.yaml) scenarios+=("$1"); shift ;;
    *) echo "run_suite.sh: unknown argument '$1' (try -h)" >&2; exit 3 ;;
  esac
done
routing_list=()
if [[ -n "$routings" ]]; then
  IFS=',' read -r -a routing_list <<<"$routings"
  for r in "${routing_list[@]}"; do
    [[ "$r" == deterministic || "$r" == ecmp ]] ||
      { echo "run_suite.sh: -r takes deterministic and/or ecmp, not '$r'" >&2; exit 3; }
  done
fi
sim="$build/tests/sim/fw_sim"
agg="$build/daemon/aggregator/fabricwatch-aggregator"
for bin in "$sim" "$agg"; do
  [[ -x "$bin" ]] || { echo "run_suite.sh: $bin is missing; build fw_sim and fabricwatch-aggregator" >&2; exit 3; }
done
command -v jq >/dev/null || { echo "run_suite.sh: needs jq" >&2; exit 3; }
if [[ ${#scenarios[@]} -eq 0 ]]; then
  for s in healthy link_loss_1pct link_loss_5pct link_loss_20pct bandwidth_halved link_down \
           link_flap two_faults congested_spine bad_nic noisy_host; do
    scenarios+=("$here/scenarios/$s.yaml")
  done
  [[ $nightly -eq 1 ]] && scenarios+=("$here/scenarios/healthy_30min.yaml" \
                              "$here/scenarios/healthy_30min_traced.yaml")
fi
[[ -n "$out" ]] || out=$(mktemp -d "${TMPDIR:-/tmp}/fw_sim_suite.XXXXXX")
mkdir -p "$out"

status=0
# run_routing ROUTING DIR: the scenarios with fw_sim's --routing ROUTING (none when empty) into DIR.
run_routing() {
  local routing="$1" dir="$2"
  mkdir -p "$dir"
  if [[ -n "$routing" ]]; then
    echo "== routing $routing" >&2
    echo "routing: $routing"
  fi
  for s in "${scenarios[@]}"; do
    name=$(basename "$s" .yaml)
    echo "== $name ($(date +%T), load $(cut -d' ' -f1-3 /proc/loadavg))" >&2
    rc=0
    "$sim" --scenario "$s" --aggregator-bin "$agg" --json-out "$dir/$name.json" --check \
      --log-level warn "${extra[@]}" ${routing:+--routing "$routing"} >"$dir/$name.txt" 2>&1 || rc=$?
    if [[ $rc -ne 0 ]]; then
      status=1
      if [[ ! -s "$dir/$name.json" ]]; then
        echo "   fw_sim exited $rc without a report:" >&2
        tail -5 "$dir/$name.txt" >&2
      fi
    fi
  done

  shopt -s nullglob
  reports=()
  for s in "${scenarios[@]}"; do
    f="$dir/$(basename "$s" .yaml).json"
    [[ -s "$f" ]] && reports+=("$f")
  done
  if [[ ${#reports[@]} -eq 0 ]]; then
    echo "run_suite.sh: no reports in $dir" >&2
    status=1
    return
  fi

  jq -rs '
    def n(x; d): if x == null then "n/a" else (x * pow(10; d) | round / pow(10; d) | tostring) end;
    def verdict: if (.verdict.failures | length) > 0 then "FAIL"
                 elif (.verdict.pending | length) > 0 then "pending" else "ok" end;
    (["scenario", "agents", "results/s", "agg CPU%", "CPU-s/M", "RSS MB", "findings", "prec",
      "recall", "local", "TTD s", "verdict"] | @tsv),
    (.[] | [.name, .streams.agents, n(.ingest.results_per_s; 0), n(.ingest.aggregator_cpu_pct; 1),
            n(.ingest.aggregator_cpu_s_per_million_results; 2), n(.ingest.aggregator_rss_mb; 0),
            .findings.count, n(.findings.precision; 3), n(.findings.recall; 3),
            n(.findings.localization; 3), n(.findings.ttd_median_s; 1), verdict] | @tsv),
    ( [.[] | .findings] as $f
      | ($f | map(.true_positives) | add) as $tp
      | ($f | map(.false_positives) | add) as $fp
      | ($f | map(.faults[]) ) as $faults
      | ($faults | map(select(.detected))) as $det
      | ($det | map(.ttd_s) | sort) as $ttd
      | (["suite", "", "", "", "", "", ($tp + $fp),
          (if ($tp + $fp) > 0 then n($tp / ($tp + $fp); 3) else "n/a" end),
          (if ($faults | length) > 0 then n(($det | length) / ($faults | length); 3) else "n/a" end),
          (if ($det | length) > 0 then n(($det | map(select(.localized)) | length) / ($det | length); 3)
           else "n/a" end),
          (if ($ttd | length) > 0 then n($ttd[($ttd | length) / 2 | floor]; 1) else "n/a" end),
          (if ([$f[] | .endpoint] | all(. == "ok")) then "" else "findings endpoint: " +
            ([$f[] | .endpoint] | unique | join(",")) end)] | @tsv) )
  ' "${reports[@]}" | column -t -s $'\t'
  echo "reports: $dir" >&2
  for f in "${reports[@]}"; do
    jq -r '.name as $n | (.verdict.failures[] | "FAIL \($n): \(.)"), (.verdict.warnings[] | "WARN \($n): \(.)")' "$f"
  done
}
if [[ -z "$routings" ]]; then
  run_routing "" "$out"
else
  for r in "${routing_list[@]}"; do run_routing "$r" "$out/$r"; done
fi
exit $status
