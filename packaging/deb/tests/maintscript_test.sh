#!/usr/bin/env bash
# Runs the maintainer scripts of the built fabricwatch-agent and fabricwatch-aggregator packages
# through install, upgrade, remove and purge, each step twice, without installing anything on
# this machine:
#   A. into a temporary root (DPKG_ROOT, as `dpkg --root` does), with the real deb-systemd-helper:
#      user and state directory created once, unit enabled on install, an admin's disable kept
#      across upgrades, state kept on remove and deleted only on purge, enablement purged;
#   B. as on a host running systemd, inside a private mount namespace (tmpfs over /run, /var/lib
#      and /lib/systemd/system; needs root, else skipped): no unit is ever started; an upgrade
#      only try-restarts; remove stops.
# Accounts and service managers are PATH stubs that record their calls.
# Usage: maintscript_test.sh PACKAGE_DIR
set -uo pipefail
pkgdir=$(cd "$1" && pwd)
. "$(dirname "$0")/lib.sh"
require_tools dpkg-deb deb-systemd-helper dash

# --- stubs: accounts live in $FW_T/passwd and $FW_T/group; every call is logged to $FW_T/calls ---
stubs=$tmp/stubs
mkdir -p "$stubs"
cat >"$stubs/getent" <<'EOF'
#!/bin/sh
db=$1 name=$2
grep -q "^$name:" "$FW_T/$db" 2>/dev/null && grep "^$name:" "$FW_T/$db"
EOF
# adduser and addgroup: one stub; the name it is called by picks the account database.
cat >"$stubs/adduser" <<'EOF'
#!/bin/sh
cmd=$(basename "$0")
echo "$cmd $*" >>"$FW_T/calls"
for a; do name=$a; done
db=passwd
[ "$cmd" = addgroup ] && db=group
if grep -q "^$name:" "$FW_T/$db" 2>/dev/null; then echo "$name exists in $db" >&2; exit 1; fi
echo "$name:x:999:999::/var/lib/fabricwatch:/usr/sbin/nologin" >>"$FW_T/$db"
EOF
ln -s adduser "$stubs/addgroup"
cat >"$stubs/chown" <<'EOF'
#!/bin/sh
echo "chown $*" >>"$FW_T/calls"
EOF
for cmd in deb-systemd-invoke systemctl; do
  printf '#!/bin/sh\necho "%s $*" >>"$FW_T/calls"\n' "$cmd" >"$stubs/$cmd"
done
cat >"$stubs/deb-systemd-helper-stub" <<'EOF'
#!/bin/sh
echo "deb-systemd-helper $*" >>"$FW_T/calls"
EOF
chmod +x "$stubs"/*

# run SCRIPT_DIR PKG SCRIPT ARGS...: runs one maintainer script as dpkg would (with dash).
run() {
  local dir=$1 pkg=$2 script=$3
  shift 3
  if ! DPKG_MAINTSCRIPT_PACKAGE=$pkg DPKG_MAINTSCRIPT_NAME=$script dash "$dir/$script" "$@" \
    >>"$FW_T/output" 2>&1; then
    fail "$pkg: $script $* exited non-zero: $(tail -3 "$FW_T/output")"
  fi
}
twice() { run "$@" && run "$@"; }
calls() { grep -c "$1" "$FW_T/calls" 2>/dev/null || true; }

phase_a() {
  local comp=$1 pkg=fabricwatch-$1
  local deb
  deb=$(ls "$pkgdir/${pkg}_"*.deb 2>/dev/null | head -1)
  [ -n "$deb" ] || { fail "$pkg: no .deb in $pkgdir"; return; }
  export FW_T=$tmp/a-$comp
  local root=$FW_T/root ctl=$FW_T/control
  mkdir -p "$root" "$ctl"
  : >"$FW_T/calls"
  dpkg-deb -x "$deb" "$root"
  dpkg-deb -e "$deb" "$ctl"
  local unit=fabricwatch-$comp.service
  local wants=$root/etc/systemd/system/multi-user.target.wants/$unit
  local state=$root/var/lib/fabricwatch
  export DPKG_ROOT=$root
  PATH=$stubs:$PATH

  # Fresh install.
  twice "$ctl" "$pkg" postinst configure ""
  [ "$(calls '^adduser --system')" = 1 ] || fail "$pkg: adduser ran $(calls '^adduser') times, expected once"
  [ "$(calls '^addgroup --system')" = 1 ] || fail "$pkg: addgroup ran $(calls '^addgroup') times, expected once"
  grep -q -- "--home /var/lib/fabricwatch" "$FW_T/calls" || fail "$pkg: the user's home is not /var/lib/fabricwatch"
  [ -d "$state" ] || fail "$pkg: $state not created"
  [ "$(stat -c %a "$state" 2>/dev/null)" = 750 ] || fail "$pkg: $state has mode $(stat -c %a "$state")"
  [ "$(calls "^chown fabricwatch:fabricwatch $state\$")" = 1 ] || fail "$pkg: state directory chowned $(calls '^chown') times, expected once"
  [ -L "$wants" ] || fail "$pkg: install did not enable $unit"
  [ "$(calls '^deb-systemd-invoke\|^systemctl')" = 0 ] ||
    fail "$pkg: touched the host's systemd while installing into DPKG_ROOT: $(grep 'invoke\|systemctl' "$FW_T/calls")"

  # The admin disables the unit; upgrades keep it disabled.
  deb-systemd-helper disable "$unit" >/dev/null 2>&1
  [ ! -e "$wants" ] || fail "$pkg: test setup: disable left $wants"
  twice "$ctl" "$pkg" prerm upgrade 0.1.0+git99990101.000000.fffffff
  twice "$ctl" "$pkg" postinst configure 0.0.9
  [ ! -e "$wants" ] || fail "$pkg: an upgrade re-enabled a unit the admin had disabled"
  deb-systemd-helper enable "$unit" >/dev/null 2>&1

  # Remove keeps state; purge deletes it (the aggregator's; the agent's only when empty).
  echo data >"$state/findings.db"
  rm -f "$root/lib/systemd/system/$unit"  # dpkg deletes the package's files before postrm
  twice "$ctl" "$pkg" prerm remove
  twice "$ctl" "$pkg" postrm remove
  [ -f "$state/findings.db" ] || fail "$pkg: remove deleted state"
  twice "$ctl" "$pkg" postrm purge
  if [ "$comp" = aggregator ]; then
    [ ! -e "$state" ] || fail "$pkg: purge left $state"
  else
    [ -f "$state/findings.db" ] || fail "$pkg: purge of the agent deleted a file it does not own"
    rm -f "$state/findings.db"
    run "$ctl" "$pkg" postrm purge
    [ ! -e "$state" ] || fail "$pkg: purge left the empty $state"
  fi
  [ ! -e "$wants" ] && [ ! -L "$wants" ] || fail "$pkg: purge left the enablement link"
  [ ! -L "$root/etc/systemd/system/$unit" ] || fail "$pkg: purge left the unit masked"
  [ -z "$(ls -A "$root/var/lib/systemd/deb-systemd-helper-enabled" 2>/dev/null)" ] ||
    fail "$pkg: purge left deb-systemd-helper state: $(ls -R "$root/var/lib/systemd/deb-systemd-helper-enabled")"
  [ "$(calls '^adduser')" = 1 ] || fail "$pkg: adduser ran again after the first install"
  unset DPKG_ROOT
  echo "$pkg A: $(wc -l <"$FW_T/calls") recorded calls"
}

# Inside the private mount namespace: $1 comp, $2 control dir, $3 unit file from the package.
phase_b_inner() {
  local comp=$1 ctl=$2 unitfile=$3 pkg=fabricwatch-$1 unit=fabricwatch-$1.service
  failures=0
  mount -t tmpfs fw-test /run && mount -t tmpfs fw-test /var/lib &&
    mount -t tmpfs fw-test /lib/systemd/system || { echo "mount failed"; exit 1; }
  mkdir -p /run/systemd/system
  cp "$unitfile" /lib/systemd/system/
  ln -s "$stubs/deb-systemd-helper-stub" "$FW_T/bin/deb-systemd-helper"
  PATH=$FW_T/bin:$stubs:$PATH
  twice "$ctl" "$pkg" postinst configure ""
  [ -d /var/lib/fabricwatch ] || fail "$pkg: /var/lib/fabricwatch not created"
  grep -q "^deb-systemd-helper enable $unit" "$FW_T/calls" || fail "$pkg: install did not enable $unit"
  [ "$(calls '^deb-systemd-invoke')" = 0 ] || fail "$pkg: a fresh install invoked: $(grep invoke "$FW_T/calls")"
  twice "$ctl" "$pkg" prerm upgrade 0.2
  [ "$(calls '^deb-systemd-invoke')" = 0 ] || fail "$pkg: prerm upgrade invoked: $(grep invoke "$FW_T/calls")"
  twice "$ctl" "$pkg" postinst configure 0.0.9
  [ "$(calls "^deb-systemd-invoke try-restart $unit\$")" = 2 ] || fail "$pkg: an upgrade did not try-restart"
  twice "$ctl" "$pkg" prerm remove
  [ "$(calls "^deb-systemd-invoke stop $unit\$")" = 2 ] || fail "$pkg: remove did not stop the unit"
  twice "$ctl" "$pkg" postrm remove
  [ -d /var/lib/fabricwatch ] || fail "$pkg: remove deleted /var/lib/fabricwatch"
  twice "$ctl" "$pkg" postrm purge
  if [ "$comp" = aggregator ] && [ -e /var/lib/fabricwatch ]; then
    fail "$pkg: purge left /var/lib/fabricwatch"
  fi
  if grep -E '^deb-systemd-invoke' "$FW_T/calls" | grep -vE " (try-restart|stop) $unit\$"; then
    fail "$pkg: deb-systemd-invoke did more than try-restart or stop (above)"
  fi
  if grep -E '^systemctl' "$FW_T/calls" | grep -vE '^systemctl --system daemon-reload$'; then
    fail "$pkg: systemctl was called for more than daemon-reload (above)"
  fi
  exit "$failures"
}

phase_b() {
  local comp=$1 pkg=fabricwatch-$1
  local deb
  deb=$(ls "$pkgdir/${pkg}_"*.deb 2>/dev/null | head -1)
  [ -n "$deb" ] || return
  export FW_T=$tmp/b-$comp
  mkdir -p "$FW_T/control" "$FW_T/root" "$FW_T/bin"
  : >"$FW_T/calls"
  dpkg-deb -e "$deb" "$FW_T/control"
  dpkg-deb -x "$deb" "$FW_T/root"
  export -f phase_b_inner run twice calls fail
  export stubs
  if ! unshare --mount --propagation private bash -c \
    'phase_b_inner "$@"' _ "$comp" "$FW_T/control" "$FW_T/root/lib/systemd/system/$pkg.service"; then
    fail "$pkg: phase B failed"
  fi
  echo "$pkg B: $(wc -l <"$FW_T/calls") recorded calls: $(cut -d' ' -f1,2 "$FW_T/calls" | sort | uniq -c | tr -s ' ' | paste -sd, -)"
}

for comp in agent aggregator; do
  phase_a "$comp"
done
if [ "$(id -u)" = 0 ] && unshare --mount --propagation private true 2>/dev/null; then
  for comp in agent aggregator; do
    phase_b "$comp"
  done
else
  echo "phase B skipped: needs root and mount namespaces (CI runs as root)"
fi
finish
