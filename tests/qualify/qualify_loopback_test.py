#!/usr/bin/env python3
"""fabricwatch qualify against a live aggregator and six agents on loopback (no root needed).

Cases (issue 14), in one run to keep CI short:
  healthy set                        -> exit 0, every node pass, the mesh, bandwidth, rdma and
                                        collective steps done; lq1-lq4 run fake RDMA devices
                                        (the agent's hidden --test-rdma-fake-* mode, joined over
                                        loopback as in rdma_fleet_fake): the RDMA UD mesh and RC
                                        write rounds run among them, lq5 and lq6 are skipped by
                                        name ("rdma unavailable on lq5")
  one agent stopped                  -> exit 2, that node fails with "agent down"
  the Slurm prolog (packaging/slurm) -> 0 on a healthy node, 1 on the stopped one
  the aggregator unreachable         -> exit 3
Also GET /api/v1/qualifications and fabricwatch_qualification_result{node,suite}. Overlapping
runs and a timeout shorter than the suite are tested on the namespace fabric (fabric_qualify,
test_qualify_fabric.py) with the rest of the issue's table; the suite's rules for both are unit
tests (suite_test.cc).

Usage: qualify_loopback_test.py CLI AGGREGATOR AGENT TESTDATA PROLOG
"""
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "pylib"))
from loopback import Checks, stop, wait_for  # noqa: E402

CLI, AGG, AGENT, TESTDATA, PROLOG = sys.argv[1:6]
HWLOC = os.path.join(TESTDATA, "hwloc", "psmgmt-topo.jrc0386.xml")
NODES = [f"lq{i}" for i in range(1, 7)]
RDMA_NODES = NODES[:4]
check = Checks()
failures = check.failures


def qualify(api, *args, timeout=60):
    t0 = time.monotonic()
    p = subprocess.run([CLI, "--api", api, "--format", "json", "qualify", *args],
                       capture_output=True, text=True, timeout=timeout)
    took = time.monotonic() - t0
    try:
        report = json.loads(p.stdout) if p.stdout.strip() else {}
    except ValueError:
        report = {}
    return p.returncode, report, p.stderr, took


def verdicts(report):
    return {n["node"]: n for n in report.get("nodes", [])}


def only_noise_outliers(report):
    """True when every non-pass node and pair of a finished report fails or warns on RTT p99 or
    burst goodput alone (scheduling noise on a loaded host), never on anything else."""
    bad = [x for x in report.get("nodes", []) + report.get("pairs", [])
           if x.get("verdict") != "pass"]
    return (report.get("state") == "done" and bool(bad) and
            all(x.get("reasons") and all(r.startswith(("RTT p99", "goodput", "RDMA UD RTT p99",
                                                             "RDMA RC goodput"))
                                         for r in x["reasons"]) for x in bad))


def main():
    work = tempfile.mkdtemp(prefix="fw-qualify.")
    procs = {}
    try:
        empty = os.path.join(work, "sys")  # no IB ports: no port findings to warn about
        os.makedirs(empty)
        ports_file = os.path.join(work, "agg.ports")
        procs["agg"] = subprocess.Popen(
            [AGG, "--grpc-listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0", "--insecure",
             "--tick", "1s", "--heartbeat-timeout", "5s", "--port-file", ports_file],
            stdout=open(os.path.join(work, "agg.log"), "w"), stderr=subprocess.STDOUT)
        ports = wait_for(lambda: json.load(open(ports_file)), 30, "the aggregator's port file")
        api = f"127.0.0.1:{ports['http_port']}"
        # The fake RDMA ports listen on base + LID; a random base keeps parallel runs apart.
        rdma_base = random.randrange(20000, 60000, 10)
        for i, n in enumerate(NODES, 1):
            fake = (["--test-rdma-fake-lid", str(i), "--test-rdma-fake-udp-base", str(rdma_base)]
                    if n in RDMA_NODES else [])
            procs[n] = subprocess.Popen(
                [AGENT, "--aggregator", f"127.0.0.1:{ports['grpc_port']}", "--insecure",
                 "--node-name", n, "--http-listen", "127.0.0.1:0", "--probe-address",
                 f"127.0.0.{i}", "--probe-port", "0", "--hwloc-xml", HWLOC, "--sysfs-root", empty,
                 *fake],
                stdout=open(os.path.join(work, f"{n}.log"), "w"), stderr=subprocess.STDOUT)

        def connected():
            with urllib.request.urlopen(f"http://{api}/api/v1/nodes", timeout=5) as r:
                up = {x["name"] for x in json.load(r) if x["connected"]}
            return up >= set(NODES)
        wait_for(connected, 60, "six agents connected")
        nodes_arg = "lq[1-6]"

        # Healthy set. Loopback RTTs and burst times are scheduling noise: on a loaded 2-core CI
        # host one pair's p99 can reach milliseconds, or one burst stall, which the suite rightly
        # calls an outlier. That alone earns one rerun (said in the output); any other reason, or
        # a second such run, fails.
        rc, rep, err, took = qualify(api, "--nodes", nodes_arg, "--timeout", "30")
        if rc != 0 and only_noise_outliers(rep):
            print(f"note: RTT or goodput outlier on loopback (load {os.getloadavg()[0]:.1f}); "
                  "one rerun", flush=True)
            rc, rep, err, took = qualify(api, "--nodes", nodes_arg, "--timeout", "30")
        check(rc == 0 and all(v["verdict"] == "pass" for v in verdicts(rep).values()),
              f"healthy set of 6: exit 0 ({took:.1f} s)", json.dumps(rep, indent=1) + err)
        steps = {s["name"]: s for s in rep.get("steps", [])}
        check(steps.get("mesh", {}).get("state") == "done", "the mesh step ran",
              json.dumps(steps))
        check(steps.get("bandwidth", {}).get("state") == "done"
              and "ring: 2 of 2 rounds, 6 bursts" in steps["bandwidth"].get("note", ""),
              "the bandwidth step ran its ring (2 rounds of bursts)", json.dumps(steps))
        check(steps.get("collective", {}).get("state") == "done"
              and "Gloo all-reduce of 1 MiB x 5 over 6 nodes" in steps["collective"]["note"]
              and "busbw" in steps["collective"]["note"],
              "the collective step ran one Gloo all-reduce over the six", json.dumps(steps))
        rdma_note = steps.get("rdma", {}).get("note", "")
        check(steps.get("rdma", {}).get("state") == "done"
              and "12 RDMA UD pairs" in rdma_note
              and "RDMA RC ring: 2 of 2 rounds, 4 bursts" in rdma_note
              and "rdma unavailable on lq5" in rdma_note and "rdma unavailable on lq6" in rdma_note,
              "the rdma step ran the UD mesh and RC rounds among lq1-lq4 and named lq5, lq6",
              json.dumps(steps))
        print(f"figure: 6 nodes quick, wall {took:.1f} s; steps "
              + ", ".join(f"{s['name']} {s['duration_s']} s" for s in rep.get("steps", [])))

        # One agent stopped.
        procs["lq5"].send_signal(signal.SIGTERM)
        procs["lq5"].wait(20)
        wait_for(lambda: not connected(), 30, "lq5 seen as disconnected")
        rc, rep, err, took = qualify(api, "--nodes", nodes_arg, "--timeout", "30")
        others = dict(rep, nodes=[n for n in rep.get("nodes", []) if n["node"] != "lq5"],
                      pairs=[p for p in rep.get("pairs", []) if "lq5" not in (p["src"], p["dst"])])
        if only_noise_outliers(others):  # as for the healthy set: one rerun, said
            print(f"note: RTT or goodput outlier on loopback (load {os.getloadavg()[0]:.1f}); "
                  "one rerun", flush=True)
            rc, rep, err, took = qualify(api, "--nodes", nodes_arg, "--timeout", "30")
        v = verdicts(rep)
        check(rc == 2 and v.get("lq5", {}).get("verdict") == "fail"
              and any("agent down" in r for r in v["lq5"]["reasons"]),
              "one agent stopped: exit 2, lq5 fails with 'agent down'", json.dumps(rep) + err)
        check(all(v[n]["verdict"] == "pass" for n in NODES if n != "lq5"),
              "the other five pass", json.dumps(rep))

        # The Slurm prolog against the live aggregator.
        env = dict(os.environ, FABRICWATCH_API=api, FABRICWATCH_CLI=CLI,
                   SLURM_JOB_NODELIST=nodes_arg, SLURM_JOB_ID="42", FABRICWATCH_PROLOG_TIMEOUT="30")
        p_ok = subprocess.run(["sh", PROLOG], env=dict(env, SLURMD_NODENAME="lq1"),
                              capture_output=True, text=True, timeout=60)
        check(p_ok.returncode == 0 and "lq1 passed" in p_ok.stderr,
              "prolog on healthy lq1: exit 0", p_ok.stderr)
        p_bad = subprocess.run(["sh", PROLOG], env=dict(env, SLURMD_NODENAME="lq5"),
                               capture_output=True, text=True, timeout=60)
        check(p_bad.returncode == 1 and "agent down" in p_bad.stderr,
              "prolog on lq5 (agent stopped): exit 1 naming the reason", p_bad.stderr)

        # History and metric.
        with urllib.request.urlopen(f"http://{api}/api/v1/qualifications", timeout=5) as r:
            hist = json.load(r)
        check(len(hist) >= 3 and hist[0]["exit_code"] in (2,), "GET /api/v1/qualifications",
              json.dumps(hist)[:600])
        with urllib.request.urlopen(f"http://{api}/metrics", timeout=5) as r:
            metrics = r.read().decode()
        check('fabricwatch_qualification_result{node="lq5",suite="quick"} 2' in metrics
              and 'fabricwatch_qualification_result{node="lq1",suite="quick"} 0' in metrics,
              "fabricwatch_qualification_result{node,suite}",
              [l for l in metrics.splitlines() if "qualification_result" in l])

        # The aggregator unreachable.
        procs["agg"].send_signal(signal.SIGTERM)
        procs["agg"].wait(30)
        rc, rep, err, took = qualify(api, "--nodes", nodes_arg, "--timeout", "5")
        check(rc == 3 and "could not qualify" in err, "aggregator unreachable: exit 3", err)
    finally:
        stop(procs.values())
        if failures:
            for name in ["agg.log"]:
                path = os.path.join(work, name)
                if os.path.exists(path):
                    print(f"----- {name}\n" + open(path).read()[-3000:])
        shutil.rmtree(work, ignore_errors=True)
    if failures:
        print(f"{len(failures)} failed: {failures}")
        sys.exit(1)
    print("all passed")


if __name__ == "__main__":
    main()
