#!/bin/sh
# fabricwatch Slurm epilog: undo what the prolog paused once the job has ended.
#
# slurm.conf:   Epilog=/usr/share/fabricwatch/slurm/epilog.sh   (see docs/slurm.md)
#
# The prolog pauses collective probes on the job's nodes; resuming them needs the aggregator's
# collective jobs (POST /api/v1/nodes/{node}/resume), which this version lacks, so this says so and
# exits 0: an epilog failure would drain the node, and nothing here is worth that.
set -u
# Slurm runs prologs with no search path (prolog_epilog.html); give one.
PATH=/usr/local/bin:/usr/bin:/bin${PATH:+:$PATH}
export PATH
node=${SLURMD_NODENAME:-$(hostname -s)}
msg="fabricwatch-epilog: resume collective probes on $node (job ${SLURM_JOB_ID:-?}): not available in this version (no-op)"
echo "$msg" >&2
if command -v logger >/dev/null 2>&1; then logger -t fabricwatch-epilog -- "$msg" 2>/dev/null || true; fi
exit 0
