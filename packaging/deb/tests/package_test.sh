#!/usr/bin/env bash
# Builds the three .deb files with scripts/package (from an already built tree) and checks each:
# its file list (dpkg-deb -c), its control fields, lintian (no error or warning), and, extracted
# into a temporary root, that its binaries resolve their shared libraries and start (--help), that
# the daemons accept the shipped configuration, and that the systemd unit starts a shipped binary
# with a shipped conffile.
# Usage: package_test.sh BUILD_DIR      (exit 77 when packaging tools are missing)
set -uo pipefail
build=$(cd "$1" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/../../.." && pwd)

. "$here/lib.sh"
require_tools cpack dpkg-deb dpkg-shlibdeps dpkg-parsechangelog lintian readelf ldd

"$src/scripts/package" --no-build --build-dir "$build" >"$tmp/debs" || {
  echo "FAIL: scripts/package"
  exit 1
}
cat "$tmp/debs"

# Files each package must ship, besides the rules and dashboards checked below; nothing else may
# be shipped.
expected_agent="/etc/fabricwatch/agent.yaml
/lib/systemd/system/fabricwatch-agent.service
/usr/bin/fabricwatch-agent
/usr/lib/fabricwatch-agent/libcrypto.so
/usr/lib/fabricwatch-agent/libfabricwatch-gloo.so
/usr/lib/fabricwatch-agent/libssl.so
/usr/share/doc/fabricwatch-agent/changelog.gz
/usr/share/doc/fabricwatch-agent/copyright
/usr/share/lintian/overrides/fabricwatch-agent
/usr/share/man/man8/fabricwatch-agent.8.gz"
expected_aggregator="/etc/fabricwatch/aggregator.yaml
/lib/systemd/system/fabricwatch-aggregator.service
/usr/bin/fabricwatch-aggregator
/usr/lib/fabricwatch-aggregator/libcrypto.so
/usr/lib/fabricwatch-aggregator/libssl.so
/usr/share/doc/fabricwatch-aggregator/changelog.gz
/usr/share/doc/fabricwatch-aggregator/copyright
/usr/share/lintian/overrides/fabricwatch-aggregator
/usr/share/fabricwatch/fabricwatch-certs
/usr/share/man/man8/fabricwatch-aggregator.8.gz"
expected_cli="/usr/bin/fabricwatch
/usr/share/doc/fabricwatch-cli/changelog.gz
/usr/share/doc/fabricwatch-cli/copyright
/usr/share/fabricwatch/slurm/epilog.sh
/usr/share/fabricwatch/slurm/prolog.sh
/usr/share/man/man1/fabricwatch.1.gz"

# Long options of a --help text, one a line.
long_options() { sed -nE 's/^  +(-[a-zA-Z],)?--([a-z0-9-]+).*/\2/p' | grep -vx help; }
# Subcommands of a --help text.
subcommands() { sed -n '/^Subcommands:/,/^$/p' | sed -nE 's/^  ([a-z][a-z0-9-]*) .*/\1/p'; }

# Every option and subcommand the binary's --help shows (and each subcommand's options) is in its
# man page, so the page stays complete as flags are added.
check_man_page() {
  local pkg=$1 root=$2 bin page name sub opt
  for bin in "$root"/usr/bin/*; do
    name=$(basename "$bin")
    page=$(ls "$root"/usr/share/man/man*/"$name".[18].gz 2>/dev/null | head -1)
    if [ -z "$page" ]; then
      fail "$pkg: no man page for $name"
      continue
    fi
    zcat "$page" | sed 's/\\-/-/g' >"$tmp/page"
    "$bin" --help >"$tmp/help-main" 2>&1
    for opt in $(long_options <"$tmp/help-main"); do
      grep -q -- "--$opt\b" "$tmp/page" || fail "$pkg: $name(8/1) does not document --$opt"
    done
    for sub in $(subcommands <"$tmp/help-main"); do
      grep -qw -- "$sub" "$tmp/page" || fail "$pkg: $name's man page does not document '$sub'"
      for opt in $("$bin" "$sub" --help 2>&1 | long_options); do
        grep -q -- "--$opt\b" "$tmp/page" || fail "$pkg: $name's man page lacks '$sub --$opt'"
      done
    done
  done
}

# Every library the binary links directly (DT_NEEDED) comes from a package named in Depends.
check_needed_in_depends() {
  local pkg=$1 bin=$2 depends=$3 lib path owner name named
  for lib in $(readelf -d "$bin" | sed -nE 's/.*\(NEEDED\).*\[(.*)\]/\1/p'); do
    path=$(ldd "$bin" | awk -v l="$lib" '$1 == l { print $3 }')
    [ -n "$path" ] || continue  # unresolved: reported by the ldd check
    owner=$(dpkg -S "$path" 2>/dev/null || dpkg -S "${path#/usr}" 2>/dev/null ||
      dpkg -S "/usr$path" 2>/dev/null)
    owner=${owner%%:*}
    if [ -z "$owner" ]; then
      fail "$pkg: $(basename "$bin") needs $lib ($path), which no Debian package ships"
      continue
    fi
    # The package itself or a name it Provides (e.g. libspdlog1.10-fmt9) must be in Depends.
    named=0
    for name in "$owner" $(dpkg-query -W -f='${Provides}' "$owner" | sed 's/([^)]*)//g; s/,/ /g'); do
      [[ ", $depends," == *[\ ,]"$name"[\ ,\(]* ]] && named=1
    done
    [ "$named" = 1 ] || fail "$pkg: $(basename "$bin") needs $lib from $owner, which Depends does not name"
  done
}

# The three extracted packages work together, on loopback: the aggregator starts from its shipped
# config (state in a temporary directory) and serves the built-in status page; the agent, from
# its shipped config, connects; the CLI sees the agent's node.
pids=()
smoke_run() {
  local agg_root=$tmp/root-aggregator agent_root=$tmp/root-agent cli_root=$tmp/root-cli
  [ -x "$agg_root/usr/bin/fabricwatch-aggregator" ] && [ -x "$agent_root/usr/bin/fabricwatch-agent" ] &&
    [ -x "$cli_root/usr/bin/fabricwatch" ] || return
  mkdir -p "$tmp/state"
  # The shipped configs ask for mTLS: certificates from the packaged fabricwatch-certs.
  local certs=$tmp/certs
  { "$agg_root/usr/share/fabricwatch/fabricwatch-certs" ca "$certs" &&
    "$agg_root/usr/share/fabricwatch/fabricwatch-certs" server "$certs" localhost 127.0.0.1 &&
    "$agg_root/usr/share/fabricwatch/fabricwatch-certs" node "$certs" deb-smoke-node; } >/dev/null ||
    { fail "smoke: the packaged fabricwatch-certs failed"; return; }
  "$agg_root/usr/bin/fabricwatch-aggregator" --config "$agg_root/etc/fabricwatch/aggregator.yaml" \
    --tls-cert "$certs/localhost.crt" --tls-key "$certs/localhost.key" --tls-ca "$certs/ca.crt" \
    --state-dir "$tmp/state" --grpc-listen 127.0.0.1:0 --http-listen 127.0.0.1:0 \
    --port-file "$tmp/agg.json" >"$tmp/agg.log" 2>&1 &
  pids+=($!)
  local i http grpc
  for i in $(seq 300); do [ -s "$tmp/agg.json" ] && break; sleep 0.1; done
  http=$(sed -nE 's/.*"http_port": *([0-9]+).*/\1/p' "$tmp/agg.json" 2>/dev/null)
  grpc=$(sed -nE 's/.*"grpc_port": *([0-9]+).*/\1/p' "$tmp/agg.json" 2>/dev/null)
  if [ -z "$http" ] || [ -z "$grpc" ]; then
    fail "smoke: the packaged aggregator did not start: $(tail -3 "$tmp/agg.log")"
    return
  fi
  if command -v curl >/dev/null; then
    curl -sf "http://127.0.0.1:$http/" | grep -qi "<html" ||
      fail "smoke: the packaged aggregator serves no status page on /"
  fi
  "$agent_root/usr/bin/fabricwatch-agent" --config "$agent_root/etc/fabricwatch/agent.yaml" \
    --tls-cert "$certs/deb-smoke-node.crt" --tls-key "$certs/deb-smoke-node.key" --tls-ca "$certs/ca.crt" \
    --aggregator "127.0.0.1:$grpc" --node-name deb-smoke-node --http-listen 127.0.0.1:0 \
    --probes false --port-file "$tmp/agent.json" >"$tmp/agent.log" 2>&1 &
  pids+=($!)
  for i in $(seq 300); do
    "$cli_root/usr/bin/fabricwatch" --api "127.0.0.1:$http" --format json nodes >"$tmp/nodes.json" 2>/dev/null
    grep -q '"deb-smoke-node"' "$tmp/nodes.json" && grep -q '"connected": *true' "$tmp/nodes.json" && break
    sleep 0.1
  done
  grep -q '"deb-smoke-node"' "$tmp/nodes.json" ||
    fail "smoke: the CLI does not list the packaged agent's node: $(head -c 300 "$tmp/nodes.json"); agent: $(tail -3 "$tmp/agent.log")"
  [ -n "$(ls -A "$tmp/state")" ] || fail "smoke: the aggregator wrote nothing to its state directory"
  echo "smoke: aggregator, agent and CLI from the packages work together (node seen after $i polls)"
}
stop_smoke() {
  local pid
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null; done
  pids=()
}
trap 'stop_smoke; rm -rf "$tmp"' EXIT

deb_for() { grep "/$1_[^/]*\.deb$" "$tmp/debs"; }

check_package() {
  local comp=$1 pkg=$2 deb root field
  deb=$(deb_for "$pkg")
  if [ -z "$deb" ] || [ ! -f "$deb" ]; then
    fail "$pkg: no .deb"
    return
  fi
  root="$tmp/root-$comp"
  mkdir -p "$root"

  # --- file list ---
  dpkg-deb -c "$deb" | awk '$1 !~ /^d/ { sub(/^\./, "", $6); print $6 }' | sort >"$tmp/$comp.files"
  local expected_var="expected_$comp"
  local expected=${!expected_var}
  if [ "$comp" = aggregator ]; then
    # Every rule and dashboard file in dashboards/ at packaging time, except promtool fixtures.
    expected+=$'\n'$(cd "$src/dashboards" &&
      find . -type f \( -name '*.yml' -o -name '*.yaml' -o -name '*.json' \) \
        ! -name '*.test.yml' ! -name '*_test.*' ! -path '*/tests/*' ! -path '*/testdata/*' |
      sed 's,^\.,/usr/share/fabricwatch,')
    grep -q '^/usr/share/fabricwatch/prometheus/.*\.rules\.yml$' "$tmp/$comp.files" ||
      fail "$pkg: no Prometheus rules under /usr/share/fabricwatch/prometheus"
    grep -q '^/usr/share/fabricwatch/grafana/.*\.json$' "$tmp/$comp.files" ||
      fail "$pkg: no Grafana dashboard under /usr/share/fabricwatch/grafana"
  fi
  if [ "$comp" = agent ] && [ -d "$src/packaging/systemd/fabricwatch-agent.service.d" ]; then
    expected+=$'\n'$(cd "$src/packaging/systemd" && find fabricwatch-agent.service.d -name '*.conf' |
      sed 's,^,/usr/share/fabricwatch/systemd/,')
  fi
  if [ "$comp" = aggregator ] && [ -d "$src/docs/runbooks" ]; then
    expected+=$'\n'$(cd "$src/docs" && find runbooks -name '*.md' |
      sed 's,^,/usr/share/doc/fabricwatch-aggregator/,')
  fi
  if [ "$comp" != cli ] && [ -f "$src/packaging/systemd/README.md" ]; then
    expected+=$'\n'"/usr/share/doc/$pkg/README.md"
  fi
  echo "$expected" | sed '/^$/d' | sort >"$tmp/$comp.expected"
  if ! diff -u "$tmp/$comp.expected" "$tmp/$comp.files" >"$tmp/$comp.diff"; then
    fail "$pkg: file list differs from the expected one (- expected, + shipped):"
    cat "$tmp/$comp.diff"
  fi

  # --- control fields ---
  field() { dpkg-deb -f "$deb" "$1"; }
  [ "$(field Package)" = "$pkg" ] || fail "$pkg: Package is '$(field Package)'"
  local version
  version=$(field Version)
  local project_version
  project_version=$(sed -nE 's/^project\(fabricwatch VERSION ([0-9.]+).*/\1/p' "$src/CMakeLists.txt")
  if git -C "$src" rev-parse --git-dir >/dev/null 2>&1; then
    # The commit named in the version must exist and its time must be the version's DATE.TIME.
    if [[ "$version" =~ ^${project_version//./\\.}\+git([0-9]{8}\.[0-9]{6})\.([0-9a-f]{7,})$ ]]; then
      local stamp=${BASH_REMATCH[1]} hash=${BASH_REMATCH[2]}
      [ "$(TZ=UTC git -C "$src" log -1 --date=format-local:%Y%m%d.%H%M%S --format=%cd "$hash" 2>/dev/null)" = "$stamp" ] ||
        fail "$pkg: Version '$version' names no commit of this repository at $stamp"
    else
      fail "$pkg: Version '$version' is not $project_version+gitDATE.TIME.HASH"
    fi
  fi
  local depends
  depends=$(field Depends)
  for lib in libc6 libstdc++6; do
    [[ "$depends" == *"$lib"* ]] || fail "$pkg: Depends lacks $lib (from the binary): $depends"
  done
  # The daemons log through the shared libspdlog; the CLI links no logging library (common/http
  # without the server), and check_needed_in_depends covers whatever it does link.
  # The agent links gRPC, protobuf and Abseil from their static archives (proto/CMakeLists.txt):
  # it must not depend on them, and its copyright file must cover them.
  if [ "$comp" != cli ]; then
    local deps="adduser libyaml-cpp libspdlog"
    [ "$comp" = agent ] || deps="$deps libgrpc++ libprotobuf"
    for dep in $deps; do
      [[ "$depends" == *"$dep"* ]] || fail "$pkg: Depends lacks $dep: $depends"
    done
    if [ "$comp" = agent ]; then
      [[ "$depends" != *libgrpc* && "$depends" != *libprotobuf* && "$depends" != *libabsl* ]] ||
        fail "$pkg: Depends names a library linked statically: $depends"
      dpkg-deb --fsys-tarfile "$deb" | tar -xO ./usr/share/doc/$pkg/copyright > "$tmp/copyright-$comp"
      for lib in grpc abseil protobuf upb re2 address_sorting c-ares; do
        grep -q "^Files: $lib " "$tmp/copyright-$comp" || fail "$pkg: copyright does not cover $lib"
      done
    fi
    dpkg-deb -e "$deb" "$tmp/control-$comp"
    [ "$(cat "$tmp/control-$comp/conffiles")" = "/etc/fabricwatch/$comp.yaml" ] ||
      fail "$pkg: conffiles is '$(cat "$tmp/control-$comp/conffiles")'"
    for s in postinst prerm postrm; do
      [ -x "$tmp/control-$comp/$s" ] || fail "$pkg: no executable $s"
      sh -n "$tmp/control-$comp/$s" || fail "$pkg: $s has a syntax error"
    done
  fi

  # --- contents, extracted ---
  dpkg-deb -x "$deb" "$root"
  local changelog_version
  changelog_version=$(zcat "$root/usr/share/doc/$pkg/changelog.gz" | dpkg-parsechangelog -l- -SVersion)
  [ "$changelog_version" = "$version" ] ||
    fail "$pkg: changelog version '$changelog_version' is not the package's '$version'"
  local bin
  for bin in "$root"/usr/bin/*; do
    if readelf -S "$bin" | grep -qE '\.debug_info|\.symtab|\.comment'; then
      fail "$pkg: $(basename "$bin") is not stripped"
    fi
    if ldd "$bin" | grep -q "not found"; then
      fail "$pkg: $(basename "$bin") has unresolved libraries: $(ldd "$bin" | grep 'not found')"
    fi
    check_needed_in_depends "$pkg" "$bin" "$depends"
    if ! "$bin" --help >"$tmp/help" 2>&1 || ! grep -q "^Usage:" "$tmp/help"; then
      fail "$pkg: $(basename "$bin") --help failed: $(head -5 "$tmp/help")"
    fi
  done
  check_man_page "$pkg" "$root"
  if [ "$comp" = agent ]; then
    "$root/usr/bin/fabricwatch-agent" check --help >/dev/null || fail "$pkg: check --help failed"
    # Gloo is a module the agent loads on its first Gloo job, from <exe dir>/../lib/<exe name>/
    # (probes/collective/gloo_module.h): the binary itself must not link it.
    if readelf -d "$root/usr/bin/fabricwatch-agent" | grep -q 'libgloo'; then
      fail "$pkg: fabricwatch-agent links libgloo (it must load it through the module)"
    fi
    local module="$root/usr/lib/fabricwatch-agent/libfabricwatch-gloo.so"
    if ldd "$module" | grep -q "not found"; then
      fail "$pkg: the Gloo module has unresolved libraries: $(ldd "$module" | grep 'not found')"
    fi
    check_needed_in_depends "$pkg" "$module" "$depends"
  fi
  if [ "$comp" != cli ]; then
    "$root/usr/bin/fabricwatch-$comp" --config "$root/etc/fabricwatch/$comp.yaml" --help \
      >/dev/null 2>"$tmp/err" || fail "$pkg: rejects its own config: $(cat "$tmp/err")"
    # The unit must start a binary this package ships, with this package's conffile.
    local unit="$root/lib/systemd/system/fabricwatch-$comp.service" exec_start
    exec_start=$(sed -nE 's/^ExecStart=[-@:+!]*//p' "$unit" | head -1)
    local exe=${exec_start%% *}
    [ -x "$root$exe" ] || fail "$pkg: the unit starts '$exe', which the package does not ship"
    [[ "$exec_start" == *"--config /etc/fabricwatch/$comp.yaml"* ]] ||
      fail "$pkg: the unit does not pass --config /etc/fabricwatch/$comp.yaml: $exec_start"
  fi
  printf 'SIZE %-24s %8d bytes .deb, Installed-Size %s KiB\n' "$pkg" "$(stat -c %s "$deb")" \
    "$(field Installed-Size)"
}

check_package agent fabricwatch-agent
check_package aggregator fabricwatch-aggregator
check_package cli fabricwatch-cli

smoke_run
stop_smoke

# --- lintian: no error or warning (info tags are printed), and every override still used ---
mapfile -t debs <"$tmp/debs"
lintian --pedantic --display-info --show-overrides --color never "${debs[@]}" >"$tmp/lintian" 2>&1
echo "--- lintian --pedantic ---"
grep -v '^N:' "$tmp/lintian" | grep -v 'running with root privileges' || true
if grep -E '^[EW]: ' "$tmp/lintian" >/dev/null; then
  fail "lintian reports errors or warnings (above)"
fi
if grep -E 'unused-override|mismatched-override|package-contains-empty-directory' "$tmp/lintian" >/dev/null; then
  fail "an empty directory is shipped, or a lintian override no longer matches (above)"
fi

finish
