#!/usr/bin/env bash
# End-to-end: a real Prometheus scrapes a real aggregator (with one agent), and
# fabricwatch_agents_connected is queryable through Prometheus's HTTP API.
# Usage: prometheus_e2e.sh AGGREGATOR_BIN AGENT_BIN TESTDATA_DIR
set -euo pipefail
agg_bin=$1 agent_bin=$2 testdata=$3

prom=$(command -v prometheus || true)
if [ -z "$prom" ]; then
  echo "SKIP: prometheus is not installed (scripts/setup installs it)"
  exit 77
fi

work=$(mktemp -d /tmp/fw-prom-e2e.XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do
    for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$p" 2>/dev/null || true
  done
  if [ "${FW_KEEP_TEMP:-}" = "" ]; then rm -rf "$work"; else echo "kept $work"; fi
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
json_field() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' "$1" "$2"; }
wait_file() { for _ in $(seq 200); do [ -s "$1" ] && return 0; sleep 0.1; done; return 1; }

"$agg_bin" --insecure --grpc-listen 127.0.0.1:0 --http-listen 127.0.0.1:0 --port-file "$work/agg.ports" \
  >"$work/aggregator.log" 2>&1 &
pids+=($!)
wait_file "$work/agg.ports" || { echo "FAIL: aggregator did not start"; cat "$work/aggregator.log"; exit 1; }
grpc_port=$(json_field "$work/agg.ports" grpc_port)
http_port=$(json_field "$work/agg.ports" http_port)

"$agent_bin" --insecure --aggregator "127.0.0.1:$grpc_port" --node-name e2e-node --http-listen 127.0.0.1:0 \
  --probe-address 127.0.0.1 --probe-port 0 \
  --hwloc-xml "$testdata/hwloc/psmgmt-topo.jrc0386.xml" --sysfs-root "$testdata/sysfs/gpud-h100" \
  --port-file "$work/agent.ports" >"$work/agent.log" 2>&1 &
pids+=($!)
wait_file "$work/agent.ports" || { echo "FAIL: agent did not start"; cat "$work/agent.log"; exit 1; }
agent_http=$(json_field "$work/agent.ports" http_port)

# Both exporters must satisfy Prometheus's own linter.
for port in "$http_port" "$agent_http"; do
  curl -sf "http://127.0.0.1:$port/metrics" >"$work/metrics.$port.txt"
  if ! promtool check metrics <"$work/metrics.$port.txt"; then
    echo "FAIL: promtool check metrics rejected the exposition on port $port"; exit 1
  fi
done

prom_port=$(free_port)
cat >"$work/prometheus.yml" <<YAML
global:
  scrape_interval: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: fabricwatch-aggregator
    static_configs:
      - targets: ['127.0.0.1:$http_port']
  - job_name: fabricwatch-agent
    static_configs:
      - targets: ['127.0.0.1:$agent_http']
YAML
"$prom" --config.file "$work/prometheus.yml" --storage.tsdb.path "$work/tsdb" \
  --web.listen-address "127.0.0.1:$prom_port" >"$work/prometheus.log" 2>&1 &
pids+=($!)

query() {
  curl -sf --get "http://127.0.0.1:$prom_port/api/v1/query" --data-urlencode "query=$1" 2>/dev/null |
    python3 -c 'import json,sys
d=json.load(sys.stdin)
r=d.get("data",{}).get("result",[])
print(r[0]["value"][1] if r else "")' 2>/dev/null || true
}

# Prometheus scrapes for the first time ~5 s after start: poll for up to 30 s.
value=""
for _ in $(seq 60); do
  value=$(query fabricwatch_agents_connected)
  [ "$value" = "1" ] && break
  sleep 0.5
done
if [ "$value" != "1" ]; then
  echo "FAIL: fabricwatch_agents_connected via Prometheus = '$value' (want 1)"
  tail -20 "$work/prometheus.log"; exit 1
fi
uplink=""
for _ in $(seq 20); do
  uplink=$(query 'fabricwatch_uplink_connected{job="fabricwatch-agent"}')
  [ "$uplink" = "1" ] && break
  sleep 0.5
done
[ "$uplink" = "1" ] || { echo "FAIL: agent's fabricwatch_uplink_connected = '$uplink'"; exit 1; }
echo "PASS: Prometheus sees fabricwatch_agents_connected=1 and the agent's uplink_connected=1"
