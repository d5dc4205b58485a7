#!/usr/bin/env bash
# The shipped /etc/fabricwatch/*.yaml stay true to the daemons:
#   - every flag of `--help` is a key of the file (active or commented out), and every key is a flag;
#   - a default shown in the file equals the default `--help` shows;
#   - the daemon accepts the file as shipped, and with every commented-out key switched on;
#   - and it does reject a file with an unknown key (exit 3), so the checks above can fail.
# Usage: config_test.sh AGENT_BINARY AGGREGATOR_BINARY CONFIG_DIR
set -uo pipefail
agent=$1 aggregator=$2 dir=$3
. "$(dirname "$0")/lib.sh"

# Flags that are no setting: --help, --config (names the file itself), --port-file (one file per
# run, for tests and scripts; not bound to a key).
not_keys=" help config port-file "

# "name<TAB>default" for each option of `--help`; default empty when none is shown. CLI11 prints
# "--name TYPE=default" or "--name TYPE:CHECK=default"; duration options say "(default 5s)" in
# their description instead.
help_flags() {
  "$1" --help | awk '
    function flush() { if (name != "") print name "\t" def; name = ""; def = "" }
    /^  +(-[a-z],)?--[a-z0-9-]+/ {
      flush()
      match($0, /--[a-z0-9-]+/); name = substr($0, RSTART + 2, RLENGTH - 2)
      line = $0  # the type spec follows the flag; a default follows its last "="
      sub(/^ +(-[a-z],)?--[a-z0-9-]+ +/, "", line)
      if (match(line, /^[A-Z][^ ]*( in \[[^]]*\])?=[^ ]+/)) {
        spec = substr(line, RSTART, RLENGTH); n = split(spec, parts, "="); def = parts[n]
      }
      if (match($0, /\(default [^)]*\)/)) def = substr($0, RSTART + 9, RLENGTH - 10)
      next
    }
    /^      / && name != "" {
      if (match($0, /\(default [^)]*\)/)) def = substr($0, RSTART + 9, RLENGTH - 10)
      next
    }
    { flush() }
    END { flush() }'
}

# "name<TAB>value" for each key line of a config file, active ("key: v") or commented ("#key: v").
file_keys() {
  sed -nE 's/^#?([a-z][a-z0-9-]*): *(.*)$/\1\t\2/p' "$1" | sed -E 's/\t"(.*)"$/\t\1/'
}

normalize() {
  case "$1" in 1 | true) echo true ;; 0) echo 0 ;; false) echo false ;; *) echo "$1" ;; esac
}

check() {
  local bin=$1 yaml=$2 name
  name=$(basename "$yaml")
  help_flags "$bin" >"$tmp/help.tsv"
  file_keys "$yaml" >"$tmp/keys.tsv"
  [ -s "$tmp/help.tsv" ] || fail "$name: no flags read from $bin --help"
  [ -s "$tmp/keys.tsv" ] || fail "$name: no keys read"

  while IFS=$'\t' read -r flag def; do
    case "$not_keys" in *" $flag "*) continue ;; esac
    line=$(awk -F'\t' -v k="$flag" '$1 == k' "$tmp/keys.tsv")
    if [ -z "$line" ]; then
      fail "$name: flag --$flag of $(basename "$bin") --help is not in the file"
      continue
    fi
    value=${line#*$'\t'}
    if [ -n "$def" ] && [ "$(normalize "$value")" != "$(normalize "$def")" ] &&
       grep -q "^#$flag:" "$yaml"; then
      fail "$name: '$flag' shows default '$value' but --help says '$def'"
    fi
  done <"$tmp/help.tsv"

  while IFS=$'\t' read -r key _; do
    awk -F'\t' -v k="$key" '$1 == k { found = 1 } END { exit !found }' "$tmp/help.tsv" ||
      fail "$name: key '$key' is no flag of $(basename "$bin")"
  done <"$tmp/keys.tsv"

  "$bin" --config "$yaml" --help >/dev/null 2>"$tmp/err" ||
    fail "$name: $(basename "$bin") rejects the shipped file: $(cat "$tmp/err")"

  sed -E 's/^#([a-z][a-z0-9-]*:)/\1/' "$yaml" >"$tmp/all-on.yaml"
  "$bin" --config "$tmp/all-on.yaml" --help >/dev/null 2>"$tmp/err" ||
    fail "$name: $(basename "$bin") rejects the file with every key switched on: $(cat "$tmp/err")"

  { cat "$yaml"; echo "no-such-key: 1"; } >"$tmp/bad.yaml"
  "$bin" --config "$tmp/bad.yaml" --help >/dev/null 2>"$tmp/err"
  rc=$?
  if [ "$rc" != 3 ] || ! grep -q "no-such-key" "$tmp/err"; then
    fail "$name: an unknown key gave exit $rc and '$(cat "$tmp/err")', expected 3 naming the key"
  fi
  echo "$name: $(wc -l <"$tmp/keys.tsv") keys, $(wc -l <"$tmp/help.tsv") --help options checked"
}

check "$agent" "$dir/agent.yaml"
check "$aggregator" "$dir/aggregator.yaml"
finish
