#!/usr/bin/env bash
# Certificates for fw_sim --tls-dir: the fleet CA and the aggregator's server certificate from
# packaging/certs/fabricwatch-certs (naming 127.0.0.1, where fw_sim starts it), and one client
# certificate for the simulator whose subjectAltNames are every simulated node of a scenario, so
# the aggregator's identity check passes for each stream as it would for real agents.
#
#   sim_certs.sh FW_SIM SCENARIO.yaml DIR     # the scenario's hosts (fw_sim --write-map)
#   sim_certs.sh FW_SIM heartbeat:N DIR       # --mode heartbeat --agents N (hb00000..)
#
# DIR gets ca.crt, server.{crt,key}, client.{crt,key}. Existing files are kept.
set -euo pipefail
[ $# -eq 3 ] || { sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
fw_sim=$1 scenario=$2 dir=$3
certs=$(cd "$(dirname "$0")/../../packaging/certs" && pwd)/fabricwatch-certs
umask 077
mkdir -p "$dir"
"$certs" ca "$dir" >/dev/null
if [ ! -e "$dir/server.crt" ]; then
  "$certs" server "$dir" localhost 127.0.0.1 >/dev/null
  mv "$dir/localhost.crt" "$dir/server.crt"
  mv "$dir/localhost.key" "$dir/server.key"
fi
[ -e "$dir/client.crt" ] && exit 0
map=$(mktemp)
ext=$(mktemp)
trap 'rm -f "$map" "$ext" "$dir/client.csr"' EXIT
if [[ "$scenario" == heartbeat:* ]]; then
  san=$(seq 0 $((${scenario#heartbeat:} - 1)) | awk '{ printf "DNS:hb%05d\n", $1 }' | paste -sd, -)
else
  "$fw_sim" --scenario "$scenario" --write-map "$map" >/dev/null
  san=$(sed -nE 's/^ *- \{node: ([A-Za-z0-9.-]+),.*/DNS:\1/p' "$map" | sort -u | paste -sd, -)
fi
[ -n "$san" ] || { echo "sim_certs.sh: no hosts in $scenario's map" >&2; exit 1; }
printf 'basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=clientAuth\nsubjectAltName=%s\n' \
  "$san" >"$ext"
openssl ecparam -name prime256v1 -genkey -noout -out "$dir/client.key"
openssl req -new -key "$dir/client.key" -subj "/O=fabricwatch/CN=fw_sim" -out "$dir/client.csr"
openssl x509 -req -in "$dir/client.csr" -CA "$dir/ca.crt" -CAkey "$dir/ca.key" -CAcreateserial \
  -days 30 -sha256 -extfile "$ext" -out "$dir/client.crt" 2>/dev/null
echo "sim_certs.sh: $dir/client.crt names $(tr ',' '\n' <<<"$san" | wc -l) nodes"
