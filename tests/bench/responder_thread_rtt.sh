#!/usr/bin/env bash
# Round trips between two agent-like processes on loopback, with each one's echo responder on its
# UDP prober's thread (as in the agent, net::LoopGuest) or on a thread of its own, the two modes
# alternating round by round (order flipped every round). Each process probes the other's
# responder (fw_netprobe udp --respond-port), so every reply a prober times was sent by a
# responder that shares its thread with a busy prober. Process A runs on CPU 0, B on CPU 1, like two
# hosts. Prints per-round p50/p99 per direction and the medians per mode.
# Usage: tests/bench/responder_thread_rtt.sh [--build DIR] [--rounds N] [--seconds S] [--rate HZ]
#                                            [--flows N]
set -euo pipefail
build=build rounds=6 seconds=5 rate=100 flows=4
while [ $# -gt 0 ]; do
  case "$1" in
    --build) build=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --seconds) seconds=$2; shift 2 ;;
    --rate) rate=$2; shift 2 ;;
    --flows) flows=$2; shift 2 ;;
    *) sed -n '2,10p' "$0"; exit 2 ;;
  esac
done
bin=$build/probes/net/fw_netprobe
[ -x "$bin" ] || { echo "no $bin (cmake --build $build --target fw_netprobe)" >&2; exit 2; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
field() { tr ' ' '\n' <"$1" | sed -n "s/^$2=//p"; }
run() {  # $1: mode (guest|own), $2: round
  local extra="" pa=$((20000 + RANDOM % 20000)) pb
  pb=$((pa + 1))
  [ "$1" = own ] && extra=--respond-own-thread
  taskset -c 0 "$bin" udp --target 127.0.0.1:$pb --respond-port $pa --listen 127.0.0.1 \
    --rate "$rate" --flows "$flows" --seconds "$seconds" $extra >"$out/a" &
  local a=$!
  taskset -c 1 "$bin" udp --target 127.0.0.1:$pa --respond-port $pb --listen 127.0.0.1 \
    --rate "$rate" --flows "$flows" --seconds "$seconds" $extra >"$out/b" &
  local b=$!
  wait $a $b
  printf '%s %s %s %s %s %s %s %s\n' "$1" "$2" "$(field "$out/a" rtt_p50_us)" \
    "$(field "$out/b" rtt_p50_us)" "$(field "$out/a" rtt_p99_us)" "$(field "$out/b" rtt_p99_us)" \
    "$(field "$out/a" loss_pct)" "$(field "$out/b" loss_pct)"
}
echo "mode round a_p50_us b_p50_us a_p99_us b_p99_us a_loss_pct b_loss_pct"
for ((i = 1; i <= rounds; i++)); do
  if ((i % 2)); then run own "$i"; run guest "$i"; else run guest "$i"; run own "$i"; fi
done | tee "$out/rows"
for m in own guest; do
  awk -v m=$m '$1 == m { print $3; print $4 }' "$out/rows" | sort -g |
    awk -v m=$m '{ v[NR] = $1 } END { printf "%s: median of the per-round p50s %.1f us\n", m, v[int((NR + 1) / 2)] }'
  awk -v m=$m '$1 == m { print $5; print $6 }' "$out/rows" | sort -g |
    awk -v m=$m '{ v[NR] = $1 } END { printf "%s: median of the per-round p99s %.1f us\n", m, v[int((NR + 1) / 2)] }'
done
