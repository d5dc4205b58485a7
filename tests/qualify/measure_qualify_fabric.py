#!/usr/bin/env python3
"""Measures the issue-14 target (not a ctest): `fabricwatch qualify --quick` of 8 healthy hosts on
the namespace fabric (1 spine, 2 leaves x 4 hosts) should take <= 20 s wall. Runs the qualification
RUNS times (default 3), SETTLE seconds (default 0) after the agents connected, and prints the wall time, the exit code and each step's duration.
Run as root after a build: FW_BUILD_DIR=build python3 tests/qualify/measure_qualify_fabric.py
"""
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE_DIR = os.environ.get("FW_SOURCE_DIR") or os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(SOURCE_DIR, "tests", "fabric_e2e"))
import fwe2e  # noqa: E402


def daemon_cpu(run):
    """CPU seconds (user + system) this fabric's daemons used so far: the aggregator's, and the
    agents' summed."""
    hz = os.sysconf("SC_CLK_TCK")

    def cpu(pid):
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / hz
        except (OSError, IndexError, ValueError):
            return 0.0
    out = {"agents": sum(cpu(a.pid) for a in run.agents.values()), "aggregator": cpu(run.agg.pid)}
    # The agents' threads by name (summed over the agents): which part of the agent worked.
    for a in run.agents.values():
        try:
            tids = os.listdir(f"/proc/{a.pid}/task")
        except OSError:
            continue
        for tid in tids:
            try:
                with open(f"/proc/{a.pid}/task/{tid}/comm") as f:
                    name = "agent:" + f.read().strip()
            except OSError:
                continue
            out[name] = out.get(name, 0) + cpu(f"{a.pid}/task/{tid}")
    return out


def trace_count(run):
    """Path traces the aggregator took in so far (fabricwatch_path_traces_total, all outcomes)."""
    total = 0
    for line in run.metrics().splitlines():
        if line.startswith("fabricwatch_path_traces_total"):
            total += float(line.split()[-1])
    return total


def main():
    if os.geteuid() != 0:
        print("needs root (network namespaces)", file=sys.stderr)
        return 77
    runs = int(os.environ.get("RUNS", "3"))
    suite = os.environ.get("SUITE", "quick")
    fwe2e.SYSFS_ROOT = os.environ.get("FW_EMPTY_SYSFS") or __import__("tempfile").mkdtemp(
        prefix="fw-q-sys.")
    cli = fwe2e.binary("FW_CLI_BIN", "daemon/cli/fabricwatch")
    worst = 0
    with fwe2e.DaemonFabric(spines=1, leaves=2, hosts_per_leaf=4) as run:
        run.wait_connected()
        print("at connect: daemon CPU so far " + ", ".join(
            f"{k} {v:.2f} s" for k, v in daemon_cpu(run).items() if v >= 0.05), flush=True)
        time.sleep(float(os.environ.get("SETTLE", "0")))  # seconds between connect and run 1
        hosts = sorted(run.fab.hosts)
        api = f"{fwe2e.fabric.MGMT_GATEWAY}:{fwe2e.HTTP_PORT}"
        for i in range(runs):
            with open("/proc/loadavg") as f:
                load = f.read().split()[0]
            cpu0, traces0 = daemon_cpu(run), trace_count(run)
            t0 = time.monotonic()
            p = run.fab.exec("mgmt", [cli, "--api", api, "--format", "json", "qualify",
                                      f"--{suite}", "--nodes", ",".join(hosts), "--timeout", "60"],
                             timeout=90)
            took = time.monotonic() - t0
            cpu1, traces1 = daemon_cpu(run), trace_count(run)
            # What the daemons did meanwhile: a start-up transient shows as CPU or traces that
            # later runs do not have.
            print(f"run {i + 1}: daemon CPU " + ", ".join(
                f"{k} {cpu1.get(k, 0) - cpu0.get(k, 0):.2f} s" for k in sorted(cpu1)
                if cpu1.get(k, 0) - cpu0.get(k, 0) >= 0.05)
                + f"; path traces in {traces1 - traces0:.0f}")
            rep = json.loads(p.stdout) if p.stdout.strip() else {}
            steps = ", ".join(f"{s['name']} {s['duration_s']} s" for s in rep.get("steps", [])
                              if s.get("state") != "skipped")
            verdicts = {n["node"]: n["verdict"] for n in rep.get("nodes", [])}
            print(f"run {i + 1}: {len(hosts)} hosts {suite}: exit {p.returncode}, wall {took:.1f} s "
                  f"(load {load}); {steps}; {verdicts}")
            if p.returncode != 0:
                for x in rep.get("nodes", []):
                    if x["verdict"] != "pass":
                        print(f"  node {x['node']} {x['verdict']}: {'; '.join(x['reasons'])}")
                for x in rep.get("pairs", []):
                    print(f"  pair {x['src']}-{x['dst']} {x['verdict']}: {'; '.join(x['reasons'])}")
                print(p.stderr[-500:])
            worst = max(worst, took)
    print(f"worst wall {worst:.1f} s (target <= 20 s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
