#!/usr/bin/env python3
"""Agent CPU with RDMA UD probes against the fake (docs/rdma.md "Agent CPU"); not a ctest.

Starts an aggregator with a one-leaf fabric map and N agents on loopback (127.0.0.1..N), the
first N-1 with fake verbs (--test-rdma-fake-lid) and the last without RDMA (unavailable here), so
both kinds run every other transport under the same plan. Intra-leaf RDMA targets get 10/s each,
so an RDMA agent probes (N-2) targets at 10/s. After a warm-up, scripts/perf/procstat.py samples
one RDMA agent and the plain one.

--split: the RDMA thread (fw-rdma-ud) of the first RDMA agent, which runs the mesh, the RC bursts
and the fake's loopback link, is also sampled apart: user and system CPU from
/proc/PID/task/TID/stat, ns per UD probe exchange (sent + answered), a `perf record` of its user
space (perf_event_paranoid 2: no kernel frames) grouped into the fake's share and the agent's, and
after the window 5 s of `strace -c` on it (syscalls per second; strace slows it, so no CPU figure
is taken then). The fake's loopback link makes syscalls on that thread that a NIC does not (a
sendto per UD message, recv drains of its socket, a timer set per arm): their counts from strace
times their unit costs measured in the same sitting (`fw_rdmaprobe linkcost`, next to the agent's
build: --rdmaprobe PATH otherwise) are the link's CPU, and the whole agent and its RDMA thread are
also printed less it: the estimate for the same agent on a NIC (the fake's user-space code, a few
% of the thread's samples, is not taken out).
Usage: rdma_agent_cpu.py AGGREGATOR AGENT TESTDATA [N] [SECONDS] [--threads] [--split]
                         [--rdmaprobe PATH]
"""
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "pylib"))
from loopback import get, series, stop, two_leaf_fabric, wait_for  # noqa: E402

AGG, AGENT, TESTDATA = sys.argv[1:4]
N = int(sys.argv[4]) if len(sys.argv) > 4 else 8
SECONDS = int(sys.argv[5]) if len(sys.argv) > 5 else 30
HWLOC = os.path.join(TESTDATA, "hwloc", "psmgmt-topo.jrc0386.xml")


def main():
    work = tempfile.mkdtemp(prefix="fw-rdma-cpu.")
    procs = {}
    base = random.randrange(20000, 60000, 100)
    nodes = [f"cpu{i}" for i in range(1, N + 1)]
    try:
        fabric = os.path.join(work, "fabric.yaml")
        with open(fabric, "w") as f:
            f.write(two_leaf_fabric([(n, "lo", f"127.0.0.{i}", "leaf1")
                                     for i, n in enumerate(nodes, 1)]))
        empty = os.path.join(work, "sys")
        os.makedirs(empty)
        pf = os.path.join(work, "agg.ports")
        procs["agg"] = subprocess.Popen(
            [AGG, "--grpc-listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0", "--insecure",
             "--fabric-map", fabric, "--state-dir", os.path.join(work, "state"),
             "--port-file", pf],
            stdout=open(os.path.join(work, "agg.log"), "w"), stderr=subprocess.STDOUT)
        ports = wait_for(lambda: json.load(open(pf)), 20, "the aggregator's port file")
        http = {}
        for i, n in enumerate(nodes, 1):
            apf = os.path.join(work, f"{n}.ports")
            argv = [AGENT, "--aggregator", f"127.0.0.1:{ports['grpc_port']}", "--insecure",
                    "--node-name", n, "--http-listen", "127.0.0.1:0", "--probe-address",
                    f"127.0.0.{i}", "--probe-port", "0", "--hwloc-xml", HWLOC, "--sysfs-root",
                    empty, "--port-file", apf]
            if i < N:
                argv += ["--test-rdma-fake-lid", str(i), "--test-rdma-fake-udp-base", str(base)]
            procs[n] = subprocess.Popen(argv, stdout=open(os.path.join(work, f"{n}.log"), "w"),
                                        stderr=subprocess.STDOUT)
            http[n] = wait_for(lambda: json.load(open(apf)), 20, f"{n}'s port file")["http_port"]
        time.sleep(15)  # plans applied, rates settled

        def sent(n):
            return series(get(f"http://127.0.0.1:{http[n]}/metrics"),
                          "fabricwatch_probe_sent_total")
        before = {n: sent(n) for n in (nodes[0], nodes[-1])}
        load0 = open("/proc/loadavg").read().split()[:3]
        split = "--split" in sys.argv
        if split:
            pid = procs[nodes[0]].pid
            tid = rdma_thread(pid)
            t0, cpu0 = time.monotonic(), thread_cpu(pid, tid)
            agent0 = thread_cpu(pid, None)
            perf_data = os.path.join(work, "perf.data")
            perf = subprocess.Popen(["perf", "record", "-q", "-F", "1999", "-t", str(tid), "-o",
                                     perf_data, "--", "sleep", str(SECONDS)],
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        out = subprocess.run(
            [sys.executable, os.path.join(HERE, "..", "..", "scripts", "perf", "procstat.py"),
             "--seconds", str(SECONDS)] + (["--threads"] if "--threads" in sys.argv else []) + [
             f"rdma_agent={procs[nodes[0]].pid}",
             f"plain_agent={procs[nodes[-1]].pid}"], capture_output=True, text=True)
        load1 = open("/proc/loadavg").read().split()[:3]
        after = {n: sent(n) for n in (nodes[0], nodes[-1])}
        if split:
            cpu1, t1 = thread_cpu(pid, tid), time.monotonic()
            agent1 = thread_cpu(pid, None)
            perf.wait()
            ud = (after[nodes[0]].get('{transport="rdma_ud"}', 0) -
                  before[nodes[0]].get('{transport="rdma_ud"}', 0)) / SECONDS
            report_split(cpu0, cpu1, t1 - t0, ud, perf_data, pid, tid,
                         sum(agent1) - sum(agent0))
        for n in (nodes[0], nodes[-1]):
            rates = {k: (after[n].get(k, 0) - before[n].get(k, 0)) / SECONDS
                     for k in after[n] if after[n].get(k, 0) > before[n].get(k, 0)}
            print(f"{n}: probes/s sent by transport over the window (approx.): {rates}")
        print(out.stdout, out.stderr)
        print(f"load before {load0} after {load1}; nproc {os.cpu_count()}")
    finally:
        stop(list(procs.values()))
        shutil.rmtree(work, ignore_errors=True)


def rdma_thread(pid):
    for tid in os.listdir(f"/proc/{pid}/task"):
        if open(f"/proc/{pid}/task/{tid}/comm").read().strip() == "fw-rdma-ud":
            return int(tid)
    raise SystemExit("no fw-rdma-ud thread")


def thread_cpu(pid, tid):
    """(user s, system s) of one thread (tid None: of the whole process)."""
    text = open(f"/proc/{pid}/stat" if tid is None else f"/proc/{pid}/task/{tid}/stat").read()
    rest = text[text.rindex(")") + 2:].split()
    tick = os.sysconf("SC_CLK_TCK")
    return int(rest[11]) / tick, int(rest[12]) / tick


# Symbols of the fake (verbs, fabric, loopback link) as opposed to the agent's own mesh and runner.
FAKE = re.compile(r"Fake|fake_|FakeLink|LoopbackLink")


def rdmaprobe_path():
    if "--rdmaprobe" in sys.argv:
        return sys.argv[sys.argv.index("--rdmaprobe") + 1]
    return os.path.join(os.path.dirname(os.path.abspath(AGENT)), "..", "..", "probes", "rdma",
                        "fw_rdmaprobe")


def link_unit_costs():
    """{sendto_ns, recv_ns, recv_empty_ns, timer_set_ns} measured now, or None."""
    try:
        out = subprocess.run([rdmaprobe_path(), "linkcost"], capture_output=True, text=True,
                             timeout=60).stdout
    except OSError:
        return None
    m = dict(re.findall(r"(\w+)=([0-9.]+)", out))
    keys = ("sendto_ns", "sendto_waking_ns", "recv_ns", "recv_empty_ns", "timer_set_ns")
    return {k: float(m[k]) for k in keys if k in m} if all(k in m for k in keys) else None


def strace_counts(text):
    """{syscall: (calls, errors)} from `strace -c` output."""
    out = {}
    for line in text.splitlines():
        f = line.split()
        if len(f) < 5 or not re.match(r"^[0-9.]+$", f[0]) or f[-1] == "total":
            continue
        nums = f[3:-1]
        out[f[-1]] = (int(nums[0]), int(nums[1]) if len(nums) > 1 else 0)
    return out


def report_split(cpu0, cpu1, wall, ud_per_s, perf_data, pid, tid, agent_cpu_s):
    user, system = cpu1[0] - cpu0[0], cpu1[1] - cpu0[1]
    exchanges = 2 * ud_per_s  # each probe sent is answered by a peer, and as many are answered
    total = (user + system) / wall
    print(f"fw-rdma-ud thread: {100 * total:.2f} % of a core (user {100 * user / wall:.2f} %, "
          f"system {100 * system / wall:.2f} %); rdma_ud sent {ud_per_s:.1f}/s, answered about "
          f"as many: {1e9 * total / exchanges:.0f} ns of thread CPU per exchange end "
          f"(user {1e9 * user / wall / exchanges:.0f} ns, system "
          f"{1e9 * system / wall / exchanges:.0f} ns)")
    rep = subprocess.run(["perf", "report", "-i", perf_data, "--stdio", "--no-children",
                          "--sort", "dso,symbol", "--percent-limit", "0.3"],
                         capture_output=True, text=True).stdout
    fake = agent = 0.0
    lines = []
    for line in rep.splitlines():
        m = re.match(r"\s*([0-9.]+)%\s+(\S+)\s+\[\.\]\s+(.*)", line)
        if not m:
            continue
        pct, dso, sym = float(m.group(1)), m.group(2), m.group(3).strip()
        if FAKE.search(sym):
            fake += pct
        elif "fabricwatch-agent" in dso:
            agent += pct
        lines.append(f"  {pct:5.1f}% {dso} {sym[:110]}")
    print(f"perf (user space of the thread, symbols >= 0.3 %): fake's own code {fake:.1f} %, "
          f"other agent code {agent:.1f} %, the rest libc/libstdc++/vdso (syscall wrappers, "
          f"malloc, clock_gettime):")
    print("\n".join(lines[:25]))
    st = subprocess.run(["timeout", "-s", "INT", "5", "strace", "-c", "-q", "-p", str(tid)],
                        capture_output=True, text=True)
    print("strace -c over 5 s of the thread (calls / 5 s):")
    print("\n".join(st.stderr.splitlines()[:16]))
    costs = link_unit_costs()
    counts = strace_counts(st.stderr)
    if not costs or not counts:
        print("the fake's link cost: not measured (no fw_rdmaprobe linkcost or no strace counts)")
        return
    per_s = {k: (c / 5.0, e / 5.0) for k, (c, e) in counts.items()}
    sends = per_s.get("sendto", (0, 0))[0]
    recv_calls, recv_empty = per_s.get("recvfrom", (0, 0))
    timers = per_s.get("timerfd_settime", (0, 0))[0]
    rest_ns = ((recv_calls - recv_empty) * costs["recv_ns"] +
               recv_empty * costs["recv_empty_ns"] + timers * costs["timer_set_ns"])
    # A sendto to a peer whose RDMA thread sleeps also wakes it (loopback delivers on the
    # sender's thread): the link's cost is between every send waking nobody and every one waking.
    low = 100 * 1e-9 * (sends * costs["sendto_ns"] + rest_ns)
    high = 100 * 1e-9 * (sends * costs["sendto_waking_ns"] + rest_ns)
    agent_pct = 100 * agent_cpu_s / wall
    print(f"the fake's loopback link on the RDMA thread: sendto {sends:.0f}/s x "
          f"{costs['sendto_ns']:.0f} ns (waking its reader: {costs['sendto_waking_ns']:.0f} ns) + "
          f"recv {recv_calls - recv_empty:.0f}/s x {costs['recv_ns']:.0f} ns + empty recv "
          f"{recv_empty:.0f}/s x {costs['recv_empty_ns']:.0f} ns + timer sets {timers:.0f}/s x "
          f"{costs['timer_set_ns']:.0f} ns = {low:.3f}-{high:.3f} % of a core")
    print(f"RDMA thread less the link: {100 * total - high:.3f}-{100 * total - low:.3f} % of a "
          f"core; whole RDMA agent {agent_pct:.3f} %, less the link "
          f"{agent_pct - high:.3f}-{agent_pct - low:.3f} % (the estimate for a NIC)")


if __name__ == "__main__":
    main()
