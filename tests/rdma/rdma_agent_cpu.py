#!/usr/bin/env python3
"""Agent CPU with RDMA UD probes against the fake (docs/rdma.md "Agent CPU"); not a ctest.

Starts an aggregator with a one-leaf fabric map and N agents on loopback (127.0.0.1..N), the
first N-1 with fake verbs (--test-rdma-fake-lid) and the last without RDMA (unavailable here), so
both kinds run every other transport under the same plan. Intra-leaf RDMA targets get 10/s each,
so an RDMA agent probes (N-2) targets at 10/s. After a warm-up, scripts/perf/procstat.py samples
one RDMA agent and the plain one.
Usage: rdma_agent_cpu.py AGGREGATOR AGENT TESTDATA [N] [SECONDS] [--threads]
"""
import json
import os
import random
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
        out = subprocess.run(
            [sys.executable, os.path.join(HERE, "..", "..", "scripts", "perf", "procstat.py"),
             "--seconds", str(SECONDS)] + (["--threads"] if "--threads" in sys.argv else []) + [
             f"rdma_agent={procs[nodes[0]].pid}",
             f"plain_agent={procs[nodes[-1]].pid}"], capture_output=True, text=True)
        load1 = open("/proc/loadavg").read().split()[:3]
        after = {n: sent(n) for n in (nodes[0], nodes[-1])}
        for n in (nodes[0], nodes[-1]):
            rates = {k: (after[n].get(k, 0) - before[n].get(k, 0)) / SECONDS
                     for k in after[n] if after[n].get(k, 0) > before[n].get(k, 0)}
            print(f"{n}: probes/s sent by transport over the window (approx.): {rates}")
        print(out.stdout, out.stderr)
        print(f"load before {load0} after {load1}; nproc {os.cpu_count()}")
    finally:
        stop(list(procs.values()))
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
