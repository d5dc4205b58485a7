#!/bin/sh
# Checks the shipped systemd units: `systemd-analyze verify` passes with no warning at all (an
# unknown or misspelt key is only a warning there), alone and with the RDMA and NCCL drop-ins; and
# `systemd-analyze security --offline` stays at or below the exposure thresholds, so hardening
# cannot silently regress, while a plain unit with only ExecStart= and User= does not (the check
# bites). Exits 77 (skip) without systemd-analyze.
#
# usage: units_test.sh SRC_DIR AGENT_BIN AGGREGATOR_BIN
set -u
src=$1 agent_bin=$2 aggregator_bin=$3

# Exposure levels are in tenths (11 = "1.1"). Raise them only with a reason in the commit message.
agent_max=11
aggregator_max=11
agent_with_dropins_max=14
plain_min=80

command -v systemd-analyze >/dev/null 2>&1 || { echo "SKIP: systemd-analyze not installed"; exit 77; }

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT INT TERM
fail=0

# verify checks that ExecStart's binary exists, so each copy points at the build tree's binary.
stage() {  # stage DIR NAME BIN: the unit NAME, ExecStart rewritten to BIN, into DIR
  mkdir -p "$1"
  sed "s#^ExecStart=/usr/bin/$2 #ExecStart=$3 #" "$src/$2.service" >"$1/$2.service"
  grep -q "^ExecStart=$3 " "$1/$2.service" || { echo "FAIL: $2: ExecStart= not /usr/bin/$2"; fail=1; }
}

# verify runs `man` for each Documentation=man: entry. The pages ship in the packages
# (packaging/deb/man), so they are offered through MANPATH; without them, or without man, that
# one check is off.
man_opt=--man=no
if command -v man >/dev/null 2>&1 && [ -f "$src/../deb/man/fabricwatch-agent.8" ] &&
  [ -f "$src/../deb/man/fabricwatch-aggregator.8" ]; then
  mkdir -p "$tmp/man/man8"
  cp "$src/../deb/man/fabricwatch-agent.8" "$src/../deb/man/fabricwatch-aggregator.8" "$tmp/man/man8/"
  export MANPATH="$tmp/man"
  man_opt=--man=yes
fi

verify() {  # verify UNIT_PATH LABEL
  out=$(systemd-analyze verify $man_opt "$1" 2>&1)
  rc=$?
  if [ $rc -ne 0 ] || [ -n "$out" ]; then
    echo "FAIL: systemd-analyze verify $2 (rc=$rc):"
    echo "$out"
    fail=1
  else
    echo "ok: verify $2"
  fi
}

exposure() {  # exposure UNIT_PATH: the overall level in tenths
  systemd-analyze security --offline=true "$1" 2>/dev/null |
    sed -n 's/.*Overall exposure level for .*: \([0-9]*\)\.\([0-9]\).*/\1\2/p'
}

tenths() { echo "$(($1 / 10)).$(($1 % 10))"; }

at_most() {  # at_most UNIT_PATH LABEL MAX
  level=$(exposure "$1")
  if [ -z "$level" ]; then
    echo "FAIL: no exposure level for $2"
    fail=1
    return
  fi
  # --threshold makes systemd-analyze itself fail above the limit; the parsed level is for the log.
  if systemd-analyze security --offline=true --threshold="$3" "$1" >/dev/null 2>&1; then
    echo "ok: exposure $2 = $(tenths "$level") (max $(tenths "$3"))"
  else
    echo "FAIL: exposure $2 = $(tenths "$level"), above $(tenths "$3")"
    systemd-analyze security --offline=true "$1" 2>&1 | grep '✗'
    fail=1
  fi
}

stage "$tmp/base" fabricwatch-agent "$agent_bin"
stage "$tmp/base" fabricwatch-aggregator "$aggregator_bin"
verify "$tmp/base/fabricwatch-agent.service" fabricwatch-agent.service
verify "$tmp/base/fabricwatch-aggregator.service" fabricwatch-aggregator.service
at_most "$tmp/base/fabricwatch-agent.service" fabricwatch-agent.service $agent_max
at_most "$tmp/base/fabricwatch-aggregator.service" fabricwatch-aggregator.service $aggregator_max

# The drop-ins are read from NAME.service.d/ beside the unit given by path.
stage "$tmp/dropins" fabricwatch-agent "$agent_bin"
cp -r "$src/fabricwatch-agent.service.d" "$tmp/dropins/"
for conf in "$src"/fabricwatch-agent.service.d/*.conf; do
  name=$(basename "$conf")
  mkdir -p "$tmp/one-$name"
  cp "$tmp/dropins/fabricwatch-agent.service" "$tmp/one-$name/"
  mkdir -p "$tmp/one-$name/fabricwatch-agent.service.d"
  cp "$conf" "$tmp/one-$name/fabricwatch-agent.service.d/"
  verify "$tmp/one-$name/fabricwatch-agent.service" "fabricwatch-agent.service + $name"
done
verify "$tmp/dropins/fabricwatch-agent.service" "fabricwatch-agent.service + all drop-ins"
at_most "$tmp/dropins/fabricwatch-agent.service" "fabricwatch-agent.service + all drop-ins" \
  $agent_with_dropins_max
# The drop-ins must really have been applied, or the line above proves nothing.
systemd-analyze security --offline=true "$tmp/dropins/fabricwatch-agent.service" 2>&1 |
  grep -q 'char-infiniband_verbs' || { echo "FAIL: drop-ins not applied"; fail=1; }

# Before hardening: what the same daemons score with only ExecStart= and User=.
for d in agent aggregator; do
  eval bin=\$${d}_bin
  printf '[Service]\nExecStart=%s\nUser=fabricwatch\n' "$bin" >"$tmp/plain-$d.service"
  level=$(exposure "$tmp/plain-$d.service")
  if [ -z "$level" ] || [ "$level" -lt $plain_min ]; then
    echo "FAIL: unhardened $d scored '$level', expected >= $plain_min: the exposure check is broken"
    fail=1
  else
    echo "ok: unhardened fabricwatch-$d.service = $(tenths "$level") (before hardening)"
  fi
done

exit $fail
