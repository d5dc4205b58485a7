#!/bin/sh
# fabricwatch Slurm prolog: qualify the job's nodes (quick suite) before the job starts.
#
# slurm.conf:   Prolog=/usr/share/fabricwatch/slurm/prolog.sh   (see docs/slurm.md)
#
# Slurm runs the prolog on every node of the job. Each copy first pauses collective probes on its
# own node (the epilog resumes them), then asks the aggregator to qualify the
# whole $SLURM_JOB_NODELIST (the aggregator runs one suite for identical concurrent requests and
# queues overlapping ones) and exits with ITS OWN node's verdict, so that Slurm drains exactly the
# node that failed. The reason goes to stderr and syslog; this script never calls scontrol.
#
# Exit: 0 pass or warn; 1 this node failed (Slurm drains it and requeues the job);
#       could not qualify (aggregator unreachable, timeout): 0 unless FABRICWATCH_PROLOG_STRICT=1.
#
# Environment (all optional):
#   FABRICWATCH_API            the aggregator's HTTP API, HOST:PORT or https://HOST:PORT
#                              (default 127.0.0.1:9751)
#   FABRICWATCH_PROLOG_USER    basic-auth user, for an aggregator whose web config has users
#   FABRICWATCH_PROLOG_PASSWORD_FILE  its password's file (else the CLI reads FABRICWATCH_PASSWORD)
#   FABRICWATCH_PROLOG_TLS_CA  the CA that verifies an https:// aggregator
#   FABRICWATCH_PROLOG_TIMEOUT seconds for the whole qualification (default 25); keep it below
#                              slurm.conf's PrologEpilogTimeout
#   FABRICWATCH_PROLOG_PROFILE the threshold profile (default: the aggregator's)
#   FABRICWATCH_PROLOG_STRICT  1: fail the node when it could not be qualified
#   FABRICWATCH_CLI            the fabricwatch binary (default: fabricwatch in PATH)
set -u
# Slurm runs prologs with no search path (prolog_epilog.html); give one.
PATH=/usr/local/bin:/usr/bin:/bin${PATH:+:$PATH}
export PATH

cli=${FABRICWATCH_CLI:-fabricwatch}
timeout=${FABRICWATCH_PROLOG_TIMEOUT:-25}
node=${SLURMD_NODENAME:-$(hostname -s)}
tag=fabricwatch-prolog

say() {
  echo "$tag: $*" >&2
  if command -v logger >/dev/null 2>&1; then logger -t "$tag" -- "$*" 2>/dev/null || true; fi
}

# The CLI with the credential and CA options: both the pause and the qualification are writes that
# need them under a web config with users.
fw() {
  if [ -n "${FABRICWATCH_PROLOG_TLS_CA:-}" ]; then set -- --tls-ca "$FABRICWATCH_PROLOG_TLS_CA" "$@"; fi
  if [ -n "${FABRICWATCH_PROLOG_PASSWORD_FILE:-}" ]; then
    set -- --password-file "$FABRICWATCH_PROLOG_PASSWORD_FILE" "$@"
  fi
  if [ -n "${FABRICWATCH_PROLOG_USER:-}" ]; then set -- --user "$FABRICWATCH_PROLOG_USER" "$@"; fi
  "$cli" "$@"
}

# Collective probes would compete with the job for this node's NICs and GPUs: pause them until the
# epilog resumes them (POST /api/v1/collectives/pause). A failure is logged, never fatal.
if pout=$(fw collectives pause --nodes "$node" 2>&1); then
  say "job ${SLURM_JOB_ID:-?}: collective probes paused on $node"
else
  say "job ${SLURM_JOB_ID:-?}: could not pause collective probes on $node: $pout"
fi

if [ -z "${SLURM_JOB_NODELIST:-}" ]; then
  say "SLURM_JOB_NODELIST is not set: nothing to qualify (job ${SLURM_JOB_ID:-?})"
  exit 0
fi

set -- qualify --quick --nodes "$SLURM_JOB_NODELIST" --timeout "$timeout" --verdict-for "$node"
# Every node's prolog of one job asks for the same set: with the job id they share one run.
if [ -n "${SLURM_JOB_ID:-}" ]; then set -- "$@" --job "$SLURM_JOB_ID"; fi
if [ -n "${FABRICWATCH_PROLOG_PROFILE:-}" ]; then set -- "$@" --profile "$FABRICWATCH_PROLOG_PROFILE"; fi
errf=$(mktemp "${TMPDIR:-/tmp}/fabricwatch-prolog.XXXXXX") || { say "mktemp failed"; exit 0; }
out=$(fw "$@" 2>"$errf")
rc=$?
# The CLI's stderr holds one line with this node's verdict and reasons, or why it could not qualify.
why=$(tail -n 3 "$errf" | tr '\n' ' ')
rm -f "$errf"
summary=$(printf '%s\n' "$out" | grep -m1 '^QUALIFY' || true)

case $rc in
  0) say "job ${SLURM_JOB_ID:-?}: $node passed. $summary"; exit 0 ;;
  1) say "job ${SLURM_JOB_ID:-?}: $node passed with warnings. $summary $why"; exit 0 ;;
  2) say "job ${SLURM_JOB_ID:-?}: $node FAILED qualification. $summary $why"; exit 1 ;;
  *) say "job ${SLURM_JOB_ID:-?}: $node could not be qualified (exit $rc): $why"
     if [ "${FABRICWATCH_PROLOG_STRICT:-0}" = 1 ]; then exit 1; fi
     exit 0 ;;
esac
