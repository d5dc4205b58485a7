#!/usr/bin/env python3
"""Issue 15 on the namespace fabric: collective probes with the real agents and aggregator.

One fabric (1 spine, 3 leaves, 2 hosts each; host links shaped to 400 Mbit/s; collective interval
1 s) serves every case, about 45-50 s in all on the loaded 2-core VM:
  1. Gloo TCP all-reduce groups (rail/0 = node01, node03, node05; rail/1; the rotating group of
     all six) run through the real rendezvous (the aggregator's key-value service on the Connect
     streams); their busbw reaches /metrics and GET /api/v1/collectives.
  2. A pause during a run: node06 is paused while jobs run and stays paused through cases 3 and 4;
     no collective starts on it (its agent's run counter stands still) until it is resumed, and it
     runs again after the resume. Its groups (rail/1, rotating) are held, so rail/0 runs alone.
  3. A tbf limit (half the rate) on node01's host link: rail/0 slows down as a whole
     (synchronization amplification: node03's and node05's own busbw fall by the ratio, although
     their links are healthy), and bisection names node01 and nothing else. With the limit
     removed, rail/0 recovers (its finding resolves).
  4. The same limit on leaf1's only uplink (leaf1~spine1): bisection ends at leaf1's uplink or a
     leaf pair with leaf1, never at a host (node05 has no known-good leaf-mate: node06 is paused).

Run as root: python3 test_collective.py [-v] CollectiveTest. Without root it exits 77 (SKIP).
"""

import json
import os
import shutil
import sys
import tempfile
import time
import unittest
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fwe2e  # noqa: E402
from fwe2e import Pending, wait_for  # noqa: E402

LINK_RATE = "400mbit"
FAULT_RATE = "200mbit"  # half the link rate
# node01's slow link must cost its healthy rail peers at least this factor of their own busbw
# (the rate ratio is 2; the fixed rendezvous and latency costs of each iteration take a little).
AMPLIFICATION_MIN = 1.6
SLOW_HOST, SLOW_LEAF = "node01", "leaf1"
PAUSED = "node06"  # in rail1 and the rotating group only
# A hwloc topology with one GPU: no intra-node NCCL group, so Gloo groups get every job slot.
ONE_GPU_HWLOC = os.path.join(fwe2e.TESTDATA, "hwloc", "psmgmt-topo.dp-esb01.xml")


def post(url, body, timeout=5.0):
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    with opener.open(req, timeout=timeout) as r:
        return r.status, json.loads(r.read().decode())


def series(text, name):
    """{label text: value} of one metric family in a Prometheus exposition."""
    out = {}
    for line in text.splitlines():
        if line.startswith(name) and line[len(name)] in "{ ":
            key, _, value = line[len(name):].rpartition(" ")
            out[key.strip()] = float(value)
    return out


class CollectiveTest(unittest.TestCase):
    def test_gloo_groups_pause_host_and_leaf_uplink_faults(self):
        empty_sysfs = tempfile.mkdtemp(prefix="fw-collective-sysfs.")
        self.addCleanup(shutil.rmtree, empty_sysfs, ignore_errors=True)
        fwe2e.SYSFS_ROOT, fwe2e.HWLOC_XML = empty_sysfs, ONE_GPU_HWLOC
        t0 = time.monotonic()
        with fwe2e.DaemonFabric(spines=1, leaves=3, hosts_per_leaf=2, access_rate=LINK_RATE,
                                aggregator_args=["--collective-interval", "1s"]) as run:
            self.run = run
            run.wait_connected()
            self.check_first_runs()
            self.pause(PAUSED)
            paused_runs = self.wait_idle(PAUSED)
            self.host_link_case()
            self.wait_recovered()
            self.leaf_uplink_case()
            self.assertEqual(self.agent_runs(PAUSED), paused_runs,
                             f"a collective started on paused {PAUSED}")
            print(f"  {PAUSED}: no collective started while paused "
                  f"({paused_runs:.0f} runs before and after)", file=sys.stderr)
            self.resume(PAUSED)
            wait_for(f"a collective on {PAUSED} after its resume",
                     lambda: self.agent_runs(PAUSED) > paused_runs, timeout=15, interval=0.5)
            run.check_daemons_running()
        with open("/proc/loadavg") as f:
            load = f.read().strip()
        print(f"  total {time.monotonic() - t0:.1f} s (load {load})", file=sys.stderr)

    # ---------------------------------------------------------------- helpers

    def status(self):
        return self.run.get_json("/api/v1/collectives")

    def agent_metrics(self, node):
        h = self.run.fab.hosts[node]
        code, body = self.run.fab.http_get(
            "mgmt", f"http://{h.mgmt_address}:{fwe2e.AGENT_HTTP_PORT}/metrics")
        self.assertEqual(code, 200, f"{node} /metrics")
        return body

    def agent_runs(self, node):
        """Collectives the node's agent has run (every outcome)."""
        return sum(series(self.agent_metrics(node), "fabricwatch_collective_runs_total").values())

    def agent_busbw(self, node):
        return series(self.agent_metrics(node), "fabricwatch_collective_last_busbw_gbps").get("", 0)

    def pause(self, node):
        code, out = self.run.fab.run_in("mgmt", post, self.run.base + "/api/v1/collectives/pause",
                                        {"nodes": [node]}, timeout=10)
        self.assertEqual((code, out.get("paused")), (200, [node]), f"pause {node}: {out}")

    def resume(self, node):
        code, out = self.run.fab.run_in("mgmt", post, self.run.base + "/api/v1/collectives/resume",
                                        {"nodes": [node]}, timeout=10)
        self.assertEqual((code, out.get("paused")), (200, []), f"resume {node}: {out}")

    def wait_idle(self, node):
        """After a pause: the node's run count once a job that was running has ended."""
        last = [self.agent_runs(node), time.monotonic()]

        def settled():
            n = self.agent_runs(node)
            if n != last[0]:
                last[:] = [n, time.monotonic()]
            # A job takes under 2 s here; 3 s without a new run means none is running.
            return time.monotonic() - last[1] >= 3 or Pending(f"{node} still running ({n})")

        wait_for(f"{node} to finish its running job", settled, timeout=15, interval=0.5)
        return last[0]

    def new_findings(self, seen):
        return self.status()["findings"][seen:]

    def wait_findings(self, seen, what, timeout):
        def found():
            self.run.check_daemons_running()
            s = self.status()
            return (s["findings"][seen:] if s["active_bisections"] == 0 else None) or Pending(
                f"{s['bisections']} bisections, {s['active_bisections']} active, "
                f"findings {s['findings'][seen:]}")

        return wait_for(what, found, timeout=timeout, interval=0.5)

    # ---------------------------------------------------------------- the cases

    def check_first_runs(self):
        """Case 1, and a healthy baseline for every group (3 runs each before a shift counts)."""
        def measured():
            s = self.status()
            return (s["busbw_gbps"].get("rail", 0) > 0 and s["busbw_gbps"].get("rotating", 0) > 0
                    and s["runs"] >= 9 and s) or Pending(f"{s}")

        # The scheduler serves its three groups in turn: 9 runs hold 3 of each.
        s = wait_for("rail and rotating groups measured 9 times", measured, timeout=30,
                     interval=0.5)
        metrics = self.run.metrics()
        busbw = series(metrics, "fabricwatch_collective_busbw_gbps")
        self.assertGreater(busbw.get('{group_kind="rail"}', 0), 0, "rail busbw on /metrics")
        self.assertGreater(busbw.get('{group_kind="rotating"}', 0), 0, "rotating busbw on /metrics")
        self.assertEqual(s["failures"], 0, f"failed Gloo runs: {s}")
        self.assertEqual(s["findings"], [], "findings on the healthy fabric")
        print(f"\n  healthy: {s['runs']} runs, busbw Gbit/s {s['busbw_gbps']} "
              f"(links shaped to {LINK_RATE})", file=sys.stderr)
        self.healthy_rail_gbps = s["busbw_gbps"]["rail"]

    def host_link_case(self):
        seen = len(self.status()["findings"])
        before = {n: self.agent_busbw(n) for n in ("node03", "node05")}
        t = time.monotonic()
        fault = self.run.fab.limit_bandwidth(f"{SLOW_LEAF}~{SLOW_HOST}", FAULT_RATE, latency="5ms")
        try:
            # The first slow run of rail/0 (its bisection waits for three): every member's own
            # busbw, read before a bisection run overwrites them.
            rail = wait_for("rail/0's first slow run", lambda: (
                lambda b: b < self.healthy_rail_gbps / AMPLIFICATION_MIN and b)(
                self.status()["busbw_gbps"]["rail"]), timeout=20, interval=0.25)
            after = {n: self.agent_busbw(n) for n in before}
            found = self.wait_findings(seen, f"a finding after the limit on {SLOW_HOST}'s link", 40)
            took = time.monotonic() - t
        finally:
            fault.undo()
        print(f"  tbf {FAULT_RATE} on {SLOW_LEAF}~{SLOW_HOST}: findings after {took:.1f} s: "
              f"{[(f['location'], f['cause']) for f in found]}; rail busbw "
              f"{self.healthy_rail_gbps:.3f} -> {rail:.3f} Gbit/s; healthy members' own busbw "
              f"{before} -> {after}", file=sys.stderr)
        for n in before:
            self.assertGreaterEqual(before[n] / max(after[n], 1e-9), AMPLIFICATION_MIN,
                                    f"{n}'s busbw with {SLOW_HOST}'s link slowed: {before[n]} -> "
                                    f"{after[n]}")
        self.assertEqual({f["location"] for f in found}, {f"node {SLOW_HOST}"}, found)

    def wait_recovered(self):
        """rail/0 runs at its expected rate again: its slow spell ends (and its finding with it)."""
        t = time.monotonic()
        wait_for("rail/0's recovery", lambda: 'msg="group recovered" group=rail/0' in
                 self.run.agg.log(), timeout=20, interval=0.5)
        print(f"  rail/0 recovered {time.monotonic() - t:.1f} s after the limit was removed",
              file=sys.stderr)

    def leaf_uplink_case(self):
        seen = len(self.status()["findings"])
        t = time.monotonic()
        fault = self.run.fab.limit_bandwidth(f"{SLOW_LEAF}~spine1", FAULT_RATE, latency="5ms")
        try:
            found = self.wait_findings(seen, f"a finding after the limit on {SLOW_LEAF}'s uplink",
                                       40)
            took = time.monotonic() - t
        finally:
            fault.undo()
        print(f"  tbf {FAULT_RATE} on {SLOW_LEAF}~spine1: findings after {took:.1f} s: "
              f"{[(f['location'], f['cause']) for f in found]}", file=sys.stderr)
        for f in found:
            loc = f["location"]
            self.assertTrue(loc == f"link {SLOW_LEAF}-spine" or
                            (loc.startswith("link ") and SLOW_LEAF in loc.split(" ", 1)[1]
                             .split("-")), f"bisection ended at {loc}, not at {SLOW_LEAF}'s "
                            f"uplink or a leaf pair with {SLOW_LEAF}: {f}")


if __name__ == "__main__":
    fwe2e.main()
