#!/usr/bin/env bash
# Checks fabricwatch-certs: a CA, an aggregator certificate and node certificates that verify
# against the CA, carry the node name as SAN DNS and CN with the right extended key usage, keep keys
# private, refuse names that are not host names, and never overwrite what exists.
set -euo pipefail
tool=$(dirname "$0")/fabricwatch-certs
command -v openssl >/dev/null || { echo "SKIP: openssl missing"; exit 77; }
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

"$tool" ca "$d" >/dev/null
"$tool" server "$d" aggregator 198.18.0.1 agg.example >/dev/null
printf 'gpu001\n# comment\n\ngpu002  \n' >"$d/nodes.txt"
"$tool" nodes-from "$d" "$d/nodes.txt" >/dev/null
"$tool" node "$d" dgx-a1 >/dev/null

for n in aggregator gpu001 gpu002 dgx-a1; do
  openssl verify -CAfile "$d/ca.crt" "$d/$n.crt" >/dev/null || fail "$n.crt does not verify"
  [ "$(stat -c %a "$d/$n.key")" = 600 ] || fail "$n.key is not private"
done
openssl x509 -in "$d/gpu002.crt" -noout -ext subjectAltName | grep -q 'DNS:gpu002$' || fail "gpu002 SAN"
openssl x509 -in "$d/gpu002.crt" -noout -subject | grep -q 'CN *= *gpu002' || fail "gpu002 CN"
openssl x509 -in "$d/gpu001.crt" -noout -ext extendedKeyUsage | grep -q 'Client Auth' || fail "node EKU"
openssl x509 -in "$d/aggregator.crt" -noout -ext extendedKeyUsage | grep -q 'Server Auth' || fail "server EKU"
openssl x509 -in "$d/aggregator.crt" -noout -ext subjectAltName | grep -q 'IP Address:198.18.0.1' || fail "IP SAN"

before=$(sha256sum "$d/gpu001.crt")
"$tool" node "$d" gpu001 2>/dev/null
[ "$before" = "$(sha256sum "$d/gpu001.crt")" ] || fail "an existing certificate was overwritten"
if "$tool" node "$d" 'x<script>' 2>/dev/null; then fail "accepted a name that is not a host name"; fi
if "$tool" node "$d/none" gpu009 2>/dev/null; then fail "issued without a CA"; fi
echo "PASS: CA, server and 3 node certificates verify; bad names and re-issue refused"
