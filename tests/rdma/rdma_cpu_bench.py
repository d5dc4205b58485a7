#!/usr/bin/env python3
"""The agent's CPU at 64 RDMA UD targets/s, our code apart from the fake's (docs/rdma.md "Agent
CPU"); a benchmark, not a ctest (about 2 minutes).

1. `fw_rdmaprobe cpu`: the agent's RDMA runner (the same RdmaRunner, UdMesh and UdPort code the
   agent runs) probing 8 fake peers at 64 probes/s and answering their 64/s, each peer a runner
   on its own thread, with the fake delivering in memory (no loopback link: no UDP datagram per
   message; the receiving CQ's timer is re-armed per packet, on the sender's thread). Prints the
   RDMA thread's CPU, wakeups and ns per exchange end, and the same less what the fake did on
   that thread in place of a NIC (its timer sets and waits on its one mutex, counted by the fake
   per thread, at unit costs measured in the same run); meanwhile `perf record` of that thread
   (user space: perf_event_paranoid 2 here) splits its samples into the fake's functions and
   ours, and after the window `strace -c` counts its syscalls by kind.
2. With AGGREGATOR AGENT TESTDATA: tests/rdma/rdma_agent_cpu.py --threads (8 agents on loopback,
   every other transport on, the RDMA ones with the loopback-link fake) and the sum: the agent at
   64 UD targets/s = the RDMA agent's threads other than its RDMA thread (the uplink of its
   results included) + the RDMA thread against the in-memory fake less the fake's NIC stand-ins
   (1.); beside it the plain agent of the same run (UDP and TCP probes only) as the reference.
Usage: rdma_cpu_bench.py FW_RDMAPROBE [AGGREGATOR AGENT TESTDATA]
"""
import os
import re
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
FAKE = re.compile(r"Fake|fake_|FakeFabric|State::(Pump|Take|Complete|Wake|Deliver|Route|Check)")
OURS = re.compile(r"fw::rdma::(UdMesh|UdPort|RdmaRunner|RcPeers|ParseUd|WriteUd|SplitRtt|"
                  r"RawTicks|RdmaProbeResult|ProbeResult|CopyName)|fw::net::")


def loadavg():
    return open("/proc/loadavg").read().split()[:3]


def bench(probe, work):
    load0 = loadavg()
    p = subprocess.Popen([probe, "cpu", "--seconds", "20", "--warmup", "3", "--linger", "7"],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    out, tid, perf, perf_data = [], None, None, os.path.join(work, "perf.data")
    strace = None
    for line in p.stdout:
        out.append(line.rstrip())
        m = re.search(r"agent thread tid (\d+)", line)
        if m:
            tid = m.group(1)
        if "window start" in line and tid:
            perf = subprocess.Popen(["timeout", "-s", "INT", "18", "perf", "record", "-q", "-F",
                                     "20000", "-t", tid, "-o", perf_data],
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if "window end" in line and tid:
            strace = subprocess.Popen(["timeout", "-s", "INT", "5", "strace", "-c", "-q", "-p",
                                       tid], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                      text=True)
    p.wait()
    load1 = loadavg()
    print("\n".join(l for l in out if not l.startswith("cpu: window")))
    print(f"load before {load0} after {load1}; nproc {os.cpu_count()}")
    thread_pct = None
    for l in out:
        m = re.search(r"agent RDMA thread without them ([0-9.]+) %", l)
        if m:
            thread_pct = float(m.group(1))
    if perf:
        perf.wait()
        rep = subprocess.run(["perf", "report", "-i", perf_data, "--stdio", "--no-children",
                              "--sort", "dso,symbol"], capture_output=True, text=True).stdout
        groups = {"fake": 0.0, "ours": 0.0, "libc/libstdc++/vdso/other": 0.0}
        top = []
        samples = re.search(r"# Samples: (\S+)", rep)
        for line in rep.splitlines():
            m = re.match(r"\s*([0-9.]+)%\s+(\S+)\s+\[\.\]\s+(.*)", line)
            if not m:
                continue
            pct, dso, sym = float(m.group(1)), m.group(2), m.group(3).strip()
            key = ("fake" if FAKE.search(sym) else
                   "ours" if OURS.search(sym) or "fw_rdmaprobe" in dso and "fw::" in sym else
                   "libc/libstdc++/vdso/other")
            groups[key] += pct
            if len(top) < 20:
                top.append(f"  {pct:5.1f}% {key:<5} {dso} {sym[:100]}")
        print(f"perf, user space of the RDMA thread ({samples.group(1) if samples else '?'} "
              f"samples at 20 kHz): " + ", ".join(f"{k} {v:.1f} %" for k, v in groups.items()))
        print("\n".join(top))
    if strace:
        print("strace -c of the RDMA thread over 5 s after the window:")
        print("\n".join(strace.communicate()[0].splitlines()[:14]))
    return thread_pct


def main():
    probe = sys.argv[1]
    with tempfile.TemporaryDirectory(prefix="fw-rdma-cpu-bench.") as work:
        thread_pct = bench(probe, work)
    if len(sys.argv) < 5 or thread_pct is None:
        return
    agg, agent, testdata = sys.argv[2:5]
    load0 = loadavg()
    r = subprocess.run([sys.executable, os.path.join(HERE, "rdma_agent_cpu.py"), agg, agent,
                        testdata, "8", "30", "--threads"], capture_output=True, text=True)
    print(r.stdout[-4000:])
    cpu, section, threads = {}, None, {}
    for line in r.stdout.splitlines():
        m = re.match(r"(\w+)\s+pid \d+\s+CPU\s+([0-9.]+)%", line)
        if m:
            section = m.group(1)
            cpu[section] = float(m.group(2))
            continue
        m = re.match(r"\s+(\S+)\s+x\d+\s+CPU\s+([0-9.]+)%", line)
        if m and section == "rdma_agent":
            threads[m.group(1)] = float(m.group(2))
    if "rdma_agent" not in cpu or "plain_agent" not in cpu or "fw-rdma-ud" not in threads:
        sys.exit("rdma_agent_cpu.py gave no rdma_agent / plain_agent / fw-rdma-ud figures")
    rest = cpu["rdma_agent"] - threads["fw-rdma-ud"]
    print(f"agent at 64 UD targets/s with every other transport on (8 agents on loopback):\n"
          f"  measured with the loopback-link fake: {cpu['rdma_agent']:.3f} % of a core, of which "
          f"its RDMA thread {threads['fw-rdma-ud']:.3f} % (mesh + fake link syscalls)\n"
          f"  its other threads (incl. results upload) {rest:.3f} % + RDMA thread against the "
          f"in-memory fake, less the fake's NIC stand-ins, {thread_pct:.3f} % = "
          f"{rest + thread_pct:.3f} % of a core "
          f"(budget 0.5 %; the plain agent without RDMA {cpu['plain_agent']:.3f} %)\n"
          f"  load {load0} -> {loadavg()}")

if __name__ == "__main__":
    main()
