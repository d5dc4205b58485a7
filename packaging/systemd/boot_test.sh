#!/bin/sh
# Runs both hardened units under a real systemd as PID 1 and checks what a unit file alone cannot
# prove: the daemons start, serve and stop under every sandboxing line, the watchdog and restart
# policy act, and the agent still runs with the RDMA and NCCL drop-ins.
#
# systemd boots in fresh pid, mount, net, uts, ipc and cgroup namespaces, on an overlay of / whose
# writes land in a tmpfs, with every boot-time unit removed except journald. The only network is
# that namespace's loopback. Its cgroups live in one child cgroup of ours per hierarchy; the trap
# kills the namespace's init and removes them.
#
# usage: boot_test.sh SRC_DIR AGENT_BIN AGGREGATOR_BIN
# Exits 77 (skip) when not root or when systemd, unshare, nsenter or overlayfs are missing.
set -u

if [ "${1:-}" = --inner ]; then
  # PID 1 of the new namespaces: build the root, then become systemd.
  set -e
  shift
  work=$1 src=$2 agent_bin=$3 aggregator_bin=$4
  R=$work/root T=$work/t
  mount --make-rprivate /
  mount -t tmpfs tmpfs "$T"
  mkdir -p "$T/upper" "$T/work"
  mount -t overlay overlay -o "lowerdir=/,upperdir=$T/upper,workdir=$T/work" "$R"
  mount -t proc proc "$R/proc"
  mount -t sysfs sysfs "$R/sys"
  # The same cgroup layout as the host, mounted inside the cgroup namespace so that its root is
  # the child cgroup the outer script made.
  if [ "$(stat -f -c %T /sys/fs/cgroup)" = cgroup2fs ]; then
    mount -t cgroup2 cgroup2 "$R/sys/fs/cgroup"
  else
    mount -t tmpfs -o mode=755 tmpfs "$R/sys/fs/cgroup"
    awk '$3 == "cgroup" || $3 == "cgroup2" {print $2, $3, $4}' /proc/mounts |
      while read -r dir type opts; do
        sub=${dir#/sys/fs/cgroup/}
        mkdir -p "$R/sys/fs/cgroup/$sub"
        if [ "$type" = cgroup2 ]; then
          mount -t cgroup2 cgroup2 "$R/sys/fs/cgroup/$sub"
        else
          ctl=$(echo "$opts" | tr , '\n' | grep -Ev '^(rw|ro|relatime|nosuid|nodev|noexec|seclabel)$' |
                paste -sd, -)
          case $ctl in name=*) ctl=none,$ctl ;; esac
          mount -t cgroup -o "$ctl" cgroup "$R/sys/fs/cgroup/$sub"
        fi
      done
  fi
  mount --rbind /dev "$R/dev"
  mount -t tmpfs tmpfs "$R/run"
  mount -t tmpfs tmpfs "$R/tmp"
  # Nothing but journald and our target may start: no udev, sysctl, tmpfiles or getty touching
  # the host through /dev or /proc/sys.
  for d in "$R"/lib/systemd/system/*.wants "$R"/etc/systemd/system/*.wants; do
    [ "${d##*/}" = sockets.target.wants ] || rm -rf "$d"
  done
  for s in "$R"/lib/systemd/system/sockets.target.wants/* "$R"/etc/systemd/system/sockets.target.wants/*; do
    case ${s##*/} in systemd-journald.socket | systemd-journald-dev-log.socket) ;; *) rm -f "$s" ;; esac
  done
  cp "$agent_bin" "$R/usr/bin/fabricwatch-agent"
  cp "$aggregator_bin" "$R/usr/bin/fabricwatch-aggregator"
  cp "$src/fabricwatch-agent.service" "$src/fabricwatch-aggregator.service" "$R/etc/systemd/system/"
  mkdir -p "$R/usr/share/fabricwatch-test"
  cp "$src"/fabricwatch-agent.service.d/*.conf "$R/usr/share/fabricwatch-test/"
  getent passwd fabricwatch >/dev/null 2>&1 ||
    useradd --root "$R" --system --no-create-home --home-dir /var/lib/fabricwatch \
      --shell /usr/sbin/nologin fabricwatch
  mkdir -p "$R/etc/fabricwatch"
  printf 'grpc-listen: 127.0.0.1:9750\nhttp-listen: 127.0.0.1:9751\ninsecure: true\n' >"$R/etc/fabricwatch/aggregator.yaml"
  printf 'aggregator: 127.0.0.1:9750\nnode-name: boot-test\nprobe-address: 127.0.0.1\nhttp-listen: 127.0.0.1:9752\ninsecure: true\n' \
    >"$R/etc/fabricwatch/agent.yaml"
  printf '[Unit]\nDescription=fabricwatch boot test\nWants=systemd-journald.socket fabricwatch-aggregator.service fabricwatch-agent.service\n' \
    >"$R/etc/systemd/system/fw-boot-test.target"
  # A peer for the hardened agent to probe: an unconfined second agent.
  printf '[Service]\nExecStart=/usr/bin/fabricwatch-agent --insecure --aggregator 127.0.0.1:9750 --node-name boot-peer --probe-address 127.0.0.1 --probe-port 9763 --http-listen 127.0.0.1:9762\n' \
    >"$R/etc/systemd/system/fw-boot-peer.service"
  # metric_positive PORT NAME: waits up to 30 s for a sample of NAME above 0 on 127.0.0.1:PORT.
  cat >"$R/usr/local/bin/metric_positive" <<'EOT'
#!/bin/bash
for _ in $(seq 150); do
  if exec 3<>"/dev/tcp/127.0.0.1/$1"; then
    printf 'GET /metrics HTTP/1.0\r\n\r\n' >&3
    grep -qE "^$2(\{[^}]*\})? [0-9.e+]*[1-9]" <&3 && exit 0
    exec 3<&-
  fi
  sleep 0.2
done
echo "no $2 > 0 on port $1"
exit 1
EOT
  chmod +x "$R/usr/local/bin/metric_positive"
  echo fw-boot-test >"$R/etc/hostname"
  ip link set lo up
  mkdir -p "$R/.oldroot"
  cd "$R"
  # pivot_root, not chroot: a chrooted process may not create user namespaces (PrivateUsers=).
  pivot_root . .oldroot
  export container=fabricwatch-boot-test
  exec chroot . sh -c 'umount -l /.oldroot && exec /lib/systemd/systemd --unit=fw-boot-test.target --log-target=journal-or-kmsg'
fi

src=$1 agent_bin=$2 aggregator_bin=$3
skip() { echo "SKIP: $*"; exit 77; }
[ "$(id -u)" = 0 ] || skip "needs root (namespaces, mounts, cgroups)"
for t in unshare nsenter pivot_root useradd ip; do command -v $t >/dev/null 2>&1 || skip "no $t"; done
unshare --fork --pid --mount --net --uts --ipc --cgroup true 2>/dev/null || skip "cannot create namespaces"
[ -x /lib/systemd/systemd ] || skip "no /lib/systemd/systemd"
grep -qw overlay /proc/filesystems || modprobe overlay 2>/dev/null || true
grep -qw overlay /proc/filesystems || skip "no overlayfs"

work=$(mktemp -d /tmp/fw-boot-test.XXXXXX)
mkdir -p "$work/root" "$work/t"
cg_dirs=""
init=""
outer=""
cleanup() {
  if [ -n "$init" ] && kill -0 "$init" 2>/dev/null; then
    kill -KILL "$init"
    while kill -0 "$init" 2>/dev/null; do sleep 0.1; done
  fi
  # unshare itself sits in the child cgroups until it is reaped.
  [ -n "${outer:-}" ] && wait "$outer" 2>/dev/null
  # Remove the cgroups bottom-up; a dying process may keep one busy for a moment.
  for _ in 1 2 3 4 5 6 7 8 9 10; do
    left=""
    for d in $cg_dirs; do
      [ -d "$d" ] && find "$d" -depth -type d -exec rmdir {} \; 2>/dev/null
      [ -d "$d" ] && left=1
    done
    [ -z "$left" ] && break
    sleep 0.5
  done
  for d in $cg_dirs; do [ -d "$d" ] && echo "WARN: cgroup $d left behind"; done
  rm -rf "$work"
}
trap cleanup EXIT INT TERM

# One child cgroup per hierarchy: systemd inside creates everything below it.
name=fw-boot-test-$$
while IFS=: read -r _ ctl path; do
  case $ctl in
    "") mnt=$(awk '$3 == "cgroup2" {print $2; exit}' /proc/mounts) ;;
    *) mnt=$(awk -v c="$ctl" '$3 == "cgroup" {n = split($4, o, ","); for (i = 1; i <= n; i++) if (o[i] == c) {print $2; exit}}' /proc/mounts) ;;
  esac
  [ -n "$mnt" ] && [ -d "$mnt$path" ] || continue
  mkdir -p "$mnt$path/$name" 2>/dev/null || skip "cannot create cgroup under $mnt$path"
  cg_dirs="$cg_dirs $mnt$path/$name"
done </proc/self/cgroup
[ -n "$cg_dirs" ] || skip "no writable cgroup hierarchy"

# The subshell joins the child cgroups, then unshares; $! is unshare, its child is the new init.
(
  # "0" moves the writing process: this subshell, whose $$ would name the parent.
  for d in $cg_dirs; do echo 0 >"$d/cgroup.procs"; done
  exec unshare --fork --pid --mount --net --uts --ipc --cgroup --propagation private \
    sh "$0" --inner "$work" "$src" "$agent_bin" "$aggregator_bin"
) >"$work/boot.log" 2>&1 &
outer=$!
for _ in $(seq 50); do
  init=$(pgrep -P "$outer" 2>/dev/null | head -1)
  [ -n "$init" ] && [ "$(cat /proc/"$init"/comm 2>/dev/null)" = systemd ] && break
  sleep 0.2
done
[ "$(cat /proc/"$init"/comm 2>/dev/null)" = systemd ] || { echo "FAIL: systemd did not start"; cat "$work/boot.log"; exit 1; }

in_ns() { nsenter -t "$init" -m -u -i -n -p -C -r -w "$@"; }
fail=0
check() {  # check DESCRIPTION COMMAND...: runs COMMAND in the namespace, reports ok/FAIL
  desc=$1
  shift
  if in_ns sh -c "$*" >"$work/out" 2>&1; then
    echo "ok: $desc"
  else
    echo "FAIL: $desc"
    sed 's/^/    /' "$work/out"
    fail=1
  fi
}
wait_active='for i in $(seq 100); do systemctl is-active --quiet $u && exit 0; sleep 0.2; done; systemctl status --no-pager $u; exit 1'
show() { echo "systemctl show -p $1 --value $2"; }

for u in fabricwatch-aggregator fabricwatch-agent; do
  check "$u active under full hardening" "u=$u; $wait_active"
  check "$u sent READY=1 with its status" "$(show StatusText $u) | grep -q '^serving: '"
  check "$u runs unprivileged: no capabilities, no_new_privs, seccomp, uid != 0" \
    "p=\$($(show MainPID $u)); grep -q '^CapEff:.0000000000000000' /proc/\$p/status &&
     grep -q '^NoNewPrivs:.1' /proc/\$p/status && grep -q '^Seccomp:.2' /proc/\$p/status &&
     ! grep -q '^Uid:.0' /proc/\$p/status"
done
check "the agent reached the aggregator through both sandboxes" \
  "for i in \$(seq 150); do journalctl -u fabricwatch-aggregator -o cat | grep -q 'agent connected.* node=boot-test' && exit 0; sleep 0.2; done; exit 1"

# The probe path under the sandbox (UDP sockets, kernel timestamps, the responder): the hardened
# agent and an unconfined peer probe each other and both see round trips.
check "the hardened agent probes a peer and answers its probes" \
  "systemctl start fw-boot-peer && metric_positive 9752 fabricwatch_probe_rtt_seconds_count &&
   metric_positive 9762 fabricwatch_probe_rtt_seconds_count && systemctl stop fw-boot-peer"

# Watchdog: with WatchdogSec=2s the aggregator stays up only if its /healthz self-check passes
# under the sandbox; stopped with SIGSTOP it is killed for the watchdog (SIGABRT, no core file
# here) and restarted.
check "aggregator keeps the watchdog fed (WatchdogSec=2s, 5 s, no restart)" \
  "mkdir -p /etc/systemd/system/fabricwatch-aggregator.service.d &&
   printf '[Service]\nWatchdogSec=2s\nLimitCORE=0\n' >/etc/systemd/system/fabricwatch-aggregator.service.d/test.conf &&
   systemctl daemon-reload && systemctl restart fabricwatch-aggregator && sleep 5 &&
   systemctl is-active --quiet fabricwatch-aggregator && [ \$($(show NRestarts fabricwatch-aggregator)) = 0 ]"
check "a hung aggregator is killed by the watchdog and restarted" \
  "kill -STOP \$($(show MainPID fabricwatch-aggregator)) &&
   for i in \$(seq 60); do [ \$($(show NRestarts fabricwatch-aggregator)) = 1 ] && break; sleep 0.2; done &&
   journalctl -u fabricwatch-aggregator -o cat | grep -q 'Watchdog timeout' &&
   u=fabricwatch-aggregator && $wait_active"
check "a killed agent is restarted (Restart=on-failure)" \
  "kill -KILL \$($(show MainPID fabricwatch-agent)) && sleep 1 &&
   for i in \$(seq 60); do [ \$($(show NRestarts fabricwatch-agent)) = 1 ] && break; sleep 0.2; done &&
   u=fabricwatch-agent && $wait_active"
check "agent runs with the RDMA and NCCL drop-ins" \
  "mkdir -p /etc/systemd/system/fabricwatch-agent.service.d &&
   cp /usr/share/fabricwatch-test/*.conf /etc/systemd/system/fabricwatch-agent.service.d/ &&
   systemctl daemon-reload && systemctl restart fabricwatch-agent && u=fabricwatch-agent && $wait_active &&
   [ \$($(show DevicePolicy fabricwatch-agent)) = closed ] && [ \$($(show LimitMEMLOCK fabricwatch-agent)) = infinity ]"
check "both stop cleanly on SIGTERM (STOPPING=1, exit 0)" \
  "systemctl stop fabricwatch-agent fabricwatch-aggregator &&
   [ \$($(show Result fabricwatch-agent)) = success ] && [ \$($(show Result fabricwatch-aggregator)) = success ] &&
   ! systemctl is-failed --quiet fabricwatch-agent fabricwatch-aggregator"

if [ $fail -ne 0 ]; then
  echo "--- journal ---"
  in_ns journalctl --no-pager -o short-precise -u fabricwatch-agent -u fabricwatch-aggregator | tail -40
fi
exit $fail
