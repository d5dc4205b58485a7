#!/usr/bin/env python3
"""Collective probes end to end on loopback (no root): an aggregator and three agents.

  - the aggregator schedules Gloo all-reduce groups across the two leaves of its fabric map, the
    agents rendezvous through the aggregator's key-value service on their Connect streams, and the
    group's bus bandwidth appears in the aggregator's /metrics and GET /api/v1/collectives;
  - `fabricwatch collectives pause --nodes` (through the Slurm prolog) holds every group with that
    node: its agent starts no collective while the others go on; `resume` (the epilog) lets it
    run again.

Usage: collective_loopback_test.py CLI AGGREGATOR AGENT TESTDATA PROLOG EPILOG
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "pylib"))
from loopback import Checks, get, series, stop, two_leaf_fabric, wait_for  # noqa: E402

CLI, AGG, AGENT, TESTDATA, PROLOG, EPILOG = sys.argv[1:7]
HWLOC = os.path.join(TESTDATA, "hwloc", "psmgmt-topo.jrc0386.xml")
NODES = ["lc1", "lc2", "lc3"]
INTERVAL_S = 4
check = Checks()
failures = check.failures

# lc1 and lc2 on leaf1, lc3 on leaf2: rail 0 = {lc1, lc3}; the rotating group = {lc1, lc3, lc2}.
FABRIC = two_leaf_fabric([("lc1", "lo", "127.0.0.1", "leaf1"), ("lc2", "lo", "127.0.0.2", "leaf1"),
                          ("lc3", "lo", "127.0.0.3", "leaf2")])


def agent_ok_runs(port):
    s = series(get(f"http://127.0.0.1:{port}/metrics"), "fabricwatch_collective_runs_total")
    return sum(v for k, v in s.items() if 'outcome="ok"' in k)


def main():
    work = tempfile.mkdtemp(prefix="fw-collective.")
    procs = {}
    try:
        fabric = os.path.join(work, "fabric.yaml")
        with open(fabric, "w") as f:
            f.write(FABRIC)
        empty = os.path.join(work, "sys")
        os.makedirs(empty)
        ports_file = os.path.join(work, "agg.ports")
        procs["agg"] = subprocess.Popen(
            [AGG, "--grpc-listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0", "--insecure",
             "--tick", "1s", "--fabric-map", fabric, "--collective-interval", f"{INTERVAL_S}s",
             "--port-file", ports_file],
            stdout=open(os.path.join(work, "agg.log"), "w"), stderr=subprocess.STDOUT)
        ports = wait_for(lambda: json.load(open(ports_file)), 30, "the aggregator's port file")
        api = f"127.0.0.1:{ports['http_port']}"
        agent_ports = {}
        for i, n in enumerate(NODES, 1):
            pf = os.path.join(work, f"{n}.ports")
            procs[n] = subprocess.Popen(
                [AGENT, "--aggregator", f"127.0.0.1:{ports['grpc_port']}", "--insecure",
                 "--node-name", n, "--http-listen", "127.0.0.1:0", "--probe-address",
                 f"127.0.0.{i}", "--probe-port", "0", "--hwloc-xml", HWLOC, "--sysfs-root", empty,
                 "--port-file", pf],
                stdout=open(os.path.join(work, f"{n}.log"), "w"), stderr=subprocess.STDOUT)
            agent_ports[n] = wait_for(lambda: json.load(open(pf)), 30, f"{n}'s port file")["http_port"]

        # A Gloo all-reduce of all three through the real rendezvous, judged by the aggregator.
        t0 = time.monotonic()

        def rotating_measured():
            m = series(get(f"http://{api}/metrics"), "fabricwatch_collective_busbw_gbps")
            return m.get('{group_kind="rotating"}', 0) > 0 and m
        busbw = wait_for(rotating_measured, 90, "a rotating group's busbw on /metrics")
        took = time.monotonic() - t0
        metrics = get(f"http://{api}/metrics")
        runs = series(metrics, "fabricwatch_collective_group_runs_total").get("", 0)
        fails = series(metrics, "fabricwatch_collective_group_failures_total").get("", 0)
        check(runs >= 1, f"group runs on /metrics ({runs:.0f} runs, {fails:.0f} failed)", metrics)
        status = json.loads(get(f"http://{api}/api/v1/collectives"))
        check(status.get("busbw_gbps", {}).get("rotating", 0) > 0,
              "GET /api/v1/collectives has the rotating group's busbw", status)
        print(f"figure: first 3-rank Gloo all-reduce (1 MiB) measured {took:.1f} s after the agents "
              f"started; busbw Gbit/s by group kind {busbw}", flush=True)
        for n in NODES:
            check(agent_ok_runs(agent_ports[n]) >= 1, f"{n} ran a collective")

        # Pause lc2 through the Slurm prolog: only the rotating group holds it, so it stays idle
        # while lc1 and lc3 keep running their rail group.
        # Without SLURM_JOB_NODELIST the prolog pauses and skips qualification (qualify_loopback
        # covers that part).
        env = {k: v for k, v in os.environ.items() if k != "SLURM_JOB_NODELIST"}
        env.update(FABRICWATCH_API=api, FABRICWATCH_CLI=CLI, SLURMD_NODENAME="lc2",
                   SLURM_JOB_ID="77")
        p = subprocess.run([PROLOG], env=env, capture_output=True, text=True, timeout=60)
        check(p.returncode == 0 and "paused" in p.stderr, "the prolog paused lc2", p.stderr)
        status = json.loads(get(f"http://{api}/api/v1/collectives"))
        check(status.get("paused") == ["lc2"], "lc2 is listed as paused", status)
        # A job that started before the pause may still finish; after it, none starts.
        time.sleep(INTERVAL_S + 2)
        paused_runs = agent_ok_runs(agent_ports["lc2"])
        lc1_runs = agent_ok_runs(agent_ports["lc1"])
        time.sleep(3 * INTERVAL_S)
        check(agent_ok_runs(agent_ports["lc2"]) == paused_runs,
              f"no collective started on paused lc2 over {3 * INTERVAL_S} s")
        check(agent_ok_runs(agent_ports["lc1"]) > lc1_runs, "lc1 kept running its rail group")

        p = subprocess.run([EPILOG], env=env, capture_output=True, text=True, timeout=60)
        check(p.returncode == 0 and "resumed" in p.stderr, "the epilog resumed lc2", p.stderr)
        wait_for(lambda: agent_ok_runs(agent_ports["lc2"]) > paused_runs, 60,
                 "a collective on lc2 after resume")
        check(True, "lc2 runs collectives again after resume")

        # The CLI directly: a bad request is refused with exit 3, JSON output on success.
        p = subprocess.run([CLI, "--api", api, "--format", "json", "collectives", "pause",
                            "--nodes", "lc[1-3]"], capture_output=True, text=True, timeout=30)
        out = json.loads(p.stdout) if p.returncode == 0 else {}
        check(p.returncode == 0 and out.get("paused") == NODES, "CLI pause of lc[1-3]",
              p.stdout + p.stderr)
        p = subprocess.run([CLI, "--api", api, "collectives", "resume", "--nodes", "lc[1-3]"],
                           capture_output=True, text=True, timeout=30)
        check(p.returncode == 0 and "paused now: -" in p.stdout, "CLI resume of lc[1-3]",
              p.stdout + p.stderr)
        req = urllib.request.Request(f"http://{api}/api/v1/collectives/pause", data=b"{nodes",
                                     method="POST")
        try:
            urllib.request.urlopen(req, timeout=5)
            code = 200
        except urllib.error.HTTPError as e:
            code = e.code
        refused = series(get(f"http://{api}/metrics"), "fabricwatch_collective_pause_refused_total")
        check(code == 400 and refused.get('{reason="bad_request"}') == 1,
              "a malformed pause body is refused (400) and counted", refused)
    finally:
        stop(procs.values())
        if failures:
            for f in ("agg.log", "lc1.log", "lc2.log"):
                path = os.path.join(work, f)
                if os.path.exists(path):
                    print(f"--- {f} (tail)")
                    print("".join(open(path).readlines()[-40:]))
        shutil.rmtree(work, ignore_errors=True)
    print("PASS" if not failures else f"FAILED: {failures}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
