#!/bin/sh
# fabricwatch Slurm epilog: resume the collective probes the prolog paused, once the job has ended.
#
# slurm.conf:   Epilog=/usr/share/fabricwatch/slurm/epilog.sh   (see docs/slurm.md)
#
# Always exits 0: an epilog failure would drain the node, and a probe left paused is not worth
# that (the reason goes to stderr and syslog; `fabricwatch collectives resume --nodes` undoes it).
#
# Environment (all optional): FABRICWATCH_API (HOST:PORT or https://HOST:PORT, default
# 127.0.0.1:9751), FABRICWATCH_CLI (default: fabricwatch in PATH), and the prolog's
# FABRICWATCH_PROLOG_USER, FABRICWATCH_PROLOG_PASSWORD_FILE and FABRICWATCH_PROLOG_TLS_CA: the
# resume is a write that needs them under a web config with users (prolog.sh).
set -u
# Slurm runs epilogs with no search path (prolog_epilog.html); give one.
PATH=/usr/local/bin:/usr/bin:/bin${PATH:+:$PATH}
export PATH
cli=${FABRICWATCH_CLI:-fabricwatch}
node=${SLURMD_NODENAME:-$(hostname -s)}
set -- collectives resume --nodes "$node"
if [ -n "${FABRICWATCH_PROLOG_TLS_CA:-}" ]; then set -- --tls-ca "$FABRICWATCH_PROLOG_TLS_CA" "$@"; fi
if [ -n "${FABRICWATCH_PROLOG_PASSWORD_FILE:-}" ]; then
  set -- --password-file "$FABRICWATCH_PROLOG_PASSWORD_FILE" "$@"
fi
if [ -n "${FABRICWATCH_PROLOG_USER:-}" ]; then set -- --user "$FABRICWATCH_PROLOG_USER" "$@"; fi
if out=$("$cli" "$@" 2>&1); then
  msg="fabricwatch-epilog: job ${SLURM_JOB_ID:-?}: collective probes resumed on $node"
else
  msg="fabricwatch-epilog: job ${SLURM_JOB_ID:-?}: could not resume collective probes on $node: $out"
fi
echo "$msg" >&2
if command -v logger >/dev/null 2>&1; then logger -t fabricwatch-epilog -- "$msg" 2>/dev/null || true; fi
exit 0
