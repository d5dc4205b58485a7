#!/usr/bin/env python3
"""Collective probe figures on the namespace fabric (issue 15); root; about 2.5 minutes.

  1. Gloo all-reduce busbw at 1 MiB and 64 MiB for 4 and 8 hosts, one fw_collective_probe process
     per host (rendezvous through a shared directory), on 2 leaves x 4 hosts with every host link
     shaped to LINK_RATE; then the same with node01's link degraded to half of it.
  2. The agent's CPU time and memory with collectives on at the default schedule (300 s: the first
     round starts when the agents connect) against collectives off, over WINDOW_S each, 6 hosts.
The time from a fault to a collective_slow finding is measured by the fabric test
(tests/fabric_e2e/test_collective.py prints it).

Usage: sudo FW_BUILD_DIR=build python3 tests/bench/collective_fabric.py [--part busbw|agent]
(--part: only the busbw table, about 1.5 minutes, or only the agent's cost, about 1.5 minutes)
"""

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "fabric_e2e"))
import fwe2e  # noqa: E402  (it puts tests/fabric on the path)
import fabric  # noqa: E402

LINK_RATE = "400mbit"
DEGRADED_RATE = "200mbit"
WINDOW_S = 30
BUILD = os.path.abspath(os.environ.get("FW_BUILD_DIR", "build"))
os.environ["FW_BUILD_DIR"] = BUILD  # fwe2e finds the daemons there
PROBE = os.path.join(BUILD, "probes", "collective", "fw_collective_probe")


def loadavg():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def allreduce(fab, hosts, nbytes, tag):
    """One all-reduce group over `hosts` (one process each); the group's busbw (its slowest
    rank's) in Gbit/s and the median time per operation in ms."""
    store = tempfile.mkdtemp(prefix="fw-coll-store.")
    iterations, warmup = (20, 5) if nbytes <= 1 << 20 else (3, 1)
    procs = []
    try:
        for rank, h in enumerate(hosts):
            argv = [PROBE, "gloo", "--ranks", str(len(hosts)), "--rank", str(rank), "--address",
                    fab.hosts[h].address, "--store-dir", store, "--group", tag, "--bytes",
                    str(nbytes), "--iterations", str(iterations), "--warmup", str(warmup),
                    "--timeout-ms", "60000"]
            procs.append(subprocess.Popen(["ip", "netns", "exec", fab.hosts[h].ns] + argv,
                                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                          text=True))
        outs = [p.communicate(timeout=120)[0] for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        shutil.rmtree(store, ignore_errors=True)
    busbw, times = [], []
    for h, p, out in zip(hosts, procs, outs):
        if p.returncode != 0:
            raise RuntimeError(f"{h}: fw_collective_probe failed ({p.returncode}): {out}")
        kv = dict(x.split("=", 1) for x in out.split() if "=" in x)
        busbw.append(float(kv["busbw_GBps"]) * 8)
        times.append(float(kv["time_us"]) / 1e3)
    return min(busbw), max(times)


def busbw_table():
    fab = fabric.Fabric(spines=1, leaves=2, hosts_per_leaf=4)
    rows = []
    with fab:
        for lk in fab.links.values():
            if lk.kind == "host":
                fab.limit_bandwidth(lk.id, LINK_RATE, latency="5ms")
        # 4 hosts: two per leaf; 8 hosts: all. Ring order = rank order, 2 ring edges cross leaves.
        groups = {4: ["node01", "node02", "node05", "node06"], 8: sorted(fab.hosts)}
        for degraded in (False, True):
            fault = (fab.limit_bandwidth("leaf1~node01", DEGRADED_RATE, latency="5ms")
                     if degraded else None)
            for n, hosts in groups.items():
                for nbytes in (1 << 20, 64 << 20):
                    t = time.monotonic()
                    bw, ms = allreduce(fab, hosts, nbytes, f"b{n}-{nbytes}-{int(degraded)}")
                    rows.append((n, nbytes, degraded, bw, ms, time.monotonic() - t, loadavg()))
                    print(f"hosts={n} bytes={nbytes} node01_link="
                          f"{DEGRADED_RATE if degraded else LINK_RATE} busbw_gbps={bw:.3f} "
                          f"time_ms={ms:.1f} wall_s={rows[-1][5]:.1f} load={rows[-1][6]}",
                          flush=True)
            if fault:
                fault.undo()
    return rows


def proc_cpu_rss(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    cpu = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    with open(f"/proc/{pid}/status") as f:
        rss = next(int(x.split()[1]) for x in f if x.startswith("VmRSS:"))
    return cpu, rss / 1024.0


def agent_cost(interval):
    """Mean agent CPU seconds and max RSS over WINDOW_S after every agent connected."""
    fwe2e.SYSFS_ROOT = tempfile.mkdtemp(prefix="fw-coll-sysfs.")
    fwe2e.HWLOC_XML = os.path.join(fwe2e.TESTDATA, "hwloc", "psmgmt-topo.dp-esb01.xml")
    with fwe2e.DaemonFabric(spines=1, leaves=3, hosts_per_leaf=2, access_rate=LINK_RATE,
                            aggregator_args=["--collective-interval", interval]) as run:
        run.wait_connected()
        start = {n: proc_cpu_rss(p.pid) for n, p in run.agents.items()}
        time.sleep(WINDOW_S)
        end = {n: proc_cpu_rss(p.pid) for n, p in run.agents.items()}
        runs = run.get_json("/api/v1/collectives")["runs"]
    cpu = [end[n][0] - start[n][0] for n in end]
    rss = [end[n][1] for n in end]
    print(f"collective_interval={interval} window_s={WINDOW_S} group_runs={runs} "
          f"agent_cpu_s_mean={sum(cpu) / len(cpu):.2f} agent_cpu_s_max={max(cpu):.2f} "
          f"agent_rss_mib_max={max(rss):.1f} load={loadavg()}", flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--part", choices=("all", "busbw", "agent"), default="all")
    part = ap.parse_args().part
    try:
        fwe2e.netns.check_privileges()
    except fabric.NeedRoot as e:
        print(f"SKIP: {e}", file=sys.stderr)
        return 77
    if part != "agent" and not os.access(PROBE, os.X_OK):
        print(f"build fw_collective_probe first ({PROBE})", file=sys.stderr)
        return 2
    t0 = time.monotonic()
    print(f"load at start {loadavg()}; host links {LINK_RATE} (tbf), node01 degraded to "
          f"{DEGRADED_RATE} in the second half", flush=True)
    if part in ("all", "busbw"):
        busbw_table()
    if part in ("all", "agent"):
        agent_cost("300s")
        agent_cost("0s")
    print(f"total {time.monotonic() - t0:.0f} s, load {loadavg()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
