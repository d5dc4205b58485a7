#!/usr/bin/env python3
"""Samples processes from /proc over a window: CPU % of one core, RSS, threads, wakeups/s.

Usage: procstat.py --seconds S [--threads] [--smaps] LABEL=PID [LABEL=PID ...]

CPU is read from each thread's /proc/PID/task/TID/schedstat (nanoseconds of run time), summed
over the threads; /proc's utime + stime count 10 ms ticks, too coarse for an agent that runs a few
ms a second (the tick figure is printed beside it). Wakeups are context switches (voluntary + involuntary) summed over the process's threads, the
same count `pidstat -w -t` reports; a thread that sleeps and wakes once costs one. Threads that
start or end inside the window count from when they are first or last seen. Prints one line per
process, then (--threads) CPU and wakeups by thread name with the involuntary switches among them
(preemptions, not waits of the thread's own), (--smaps) RSS by mapping kind.
"""
import argparse
import os
import sys
import time

TICK = os.sysconf("SC_CLK_TCK")


def read(path):
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None


def stat_cpu_ticks(text):
    # Fields after the parenthesised comm, which may contain spaces.
    rest = text[text.rindex(")") + 2:].split()
    return int(rest[11]) + int(rest[12])  # utime, stime


def task_sample(pid):
    """{tid: (comm, cpu_ticks, ctxt_switches, run_ns)} for every thread of pid."""
    out = {}
    base = f"/proc/{pid}/task"
    try:
        tids = os.listdir(base)
    except OSError:
        return out
    for tid in tids:
        st = read(f"{base}/{tid}/stat")
        status = read(f"{base}/{tid}/status")
        comm = read(f"{base}/{tid}/comm")
        sched = read(f"{base}/{tid}/schedstat")
        if st is None or status is None or comm is None or sched is None:
            continue
        cs = nv = 0
        for line in status.splitlines():
            if line.startswith(("voluntary_ctxt_switches", "nonvoluntary_ctxt_switches")):
                cs += int(line.split()[1])
            if line.startswith("nonvoluntary_ctxt_switches"):
                nv = int(line.split()[1])
        out[tid] = (comm.strip(), stat_cpu_ticks(st), cs, int(sched.split()[0]), nv)
    return out


def proc_cpu_ticks(pid):
    st = read(f"/proc/{pid}/stat")
    return stat_cpu_ticks(st) if st else None


def status_field(pid, name):
    text = read(f"/proc/{pid}/status") or ""
    for line in text.splitlines():
        if line.startswith(name + ":"):
            return int(line.split()[1])
    return 0


def smaps_by_kind(pid):
    """RSS in kB by mapping kind: heap/arenas, stacks, the binary, shared libraries, other."""
    text = read(f"/proc/{pid}/smaps") or ""
    exe = os.path.realpath(f"/proc/{pid}/exe")
    kinds = {}
    kind = "other"
    for line in text.splitlines():
        parts = line.split()
        if parts and "-" in parts[0] and len(parts) >= 5 and ":" not in parts[0]:
            path = parts[5] if len(parts) > 5 else ""
            if path == "[heap]":
                kind = "[heap] (main arena)"
            elif path.startswith("[stack"):
                kind = "[stack] (main)"
            elif path.startswith("["):
                kind = path
            elif path == exe:
                kind = "the binary"
            elif path:
                kind = "lib " + os.path.basename(path).split(".so")[0]
            else:
                # Anonymous: thread stacks (8 MiB + guard) and malloc's per-thread arenas (64 MiB
                # reservations) look alike here; the size tells them apart well enough.
                lo, hi = (int(x, 16) for x in parts[0].split("-"))
                size = hi - lo
                kind = "anon (thread arenas, 64 MiB maps)" if size >= 60 << 20 or size in (
                    (64 << 20) - 4096, 132 << 10) else "anon (stacks, other)"
        elif line.startswith("Rss:"):
            kinds[kind] = kinds.get(kind, 0) + int(parts[1])
    return kinds


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=30)
    ap.add_argument("--threads", action="store_true")
    ap.add_argument("--smaps", action="store_true")
    ap.add_argument("procs", nargs="+", help="LABEL=PID")
    a = ap.parse_args()
    procs = []
    for p in a.procs:
        label, pid = p.split("=")
        procs.append((label, int(pid)))
    t0 = time.monotonic()
    c0 = {pid: proc_cpu_ticks(pid) for _, pid in procs}
    k0 = {pid: task_sample(pid) for _, pid in procs}
    time.sleep(a.seconds)
    dt = time.monotonic() - t0
    c1 = {pid: proc_cpu_ticks(pid) for _, pid in procs}
    k1 = {pid: task_sample(pid) for _, pid in procs}
    rc = 0
    for label, pid in procs:
        if c0[pid] is None or c1[pid] is None:
            print(f"{label}: pid {pid} is gone")
            rc = 1
            continue
        ticks_cpu = (c1[pid] - c0[pid]) / TICK / dt * 100
        # A thread first seen in the second sample counts from 0; one that ended inside the
        # window is missing from both sums (threads here live for the whole window).
        cpu = sum(v[3] - k0[pid].get(t, (0, 0, 0, 0, 0))[3] for t, v in k1[pid].items()) / 1e9 / dt * 100
        wake = sum(v[2] - k0[pid].get(t, (0, 0, v[2], 0, 0))[2] for t, v in k1[pid].items()) / dt
        rss = status_field(pid, "VmRSS") / 1024
        print(f"{label:<12} pid {pid:<7} CPU {cpu:6.3f}% of a core  RSS {rss:6.1f} MiB  "
              f"threads {len(k1[pid]):3d}  wakeups {wake:7.1f}/s  ({dt:.0f} s; "
              f"ticks {ticks_cpu:.3f}%)")
        if a.threads:
            by = {}
            for t, (comm, ticks, cs, ns, nv) in k1[pid].items():
                _, _, cs0, ns0, nv0 = k0[pid].get(t, (comm, ticks, 0, 0, 0))
                e = by.setdefault(comm, [0, 0, 0, 0])
                e[0] += 1
                e[1] += ns - ns0
                e[2] += cs - cs0
                e[3] += nv - nv0
            for comm, (n, ns, cs, nv) in sorted(by.items(), key=lambda kv: (-kv[1][1], -kv[1][2])):
                per = f"  {ns / cs / 1e3:5.1f} us/wakeup" if cs else ""
                # Involuntary switches: preempted (on loopback often by a peer's thread that the
                # thread's own send woke), not a wait of its own that ended.
                print(f"    {comm:<18} x{n:<2} CPU {ns / 1e9 / dt * 100:6.3f}%  "
                      f"wakeups {cs / dt:6.1f}/s{per}  (involuntary {nv / dt:.1f}/s)")
        if a.smaps:
            kinds = smaps_by_kind(pid)
            small = sum(kb for kb in kinds.values() if kb < 256)
            for kind, kb in sorted(kinds.items(), key=lambda kv: -kv[1]):
                if kb >= 256:
                    print(f"    rss {kind:<36} {kb / 1024:6.2f} MiB")
            print(f"    rss {'maps under 0.25 MiB each':<36} {small / 1024:6.2f} MiB")
    return rc


if __name__ == "__main__":
    sys.exit(main())
