#!/usr/bin/env python3
"""Issue 16: exact localization on the namespace fabric under plain ECMP, with path tracing.

2 spines x 3 leaves x 2 hosts; the switches hash the 5-tuple (fabric.py) and answer TTL expiry;
the map says `routing: ecmp` and lists each switch's addresses. Nothing pins flows: the agents
(root, so CAP_NET_RAW) trace each planned flow and the echo of each flow they answer, and the
analyzer names links from the traced paths. One fabric, four faults in sequence, each found on
exactly its element with nothing else named, and each cleared before the next:

  5 % drop on leaf1~spine1 (both directions)  -> link_degraded on leaf1~spine1
  leaf1~spine1 down                           -> link_down (or link_degraded) on leaf1~spine1
  5 % drop in spine2 (everything it forwards) -> a finding on switch spine2
  tbf 20 Mbit/s with a 1 s queue on leaf2~spine1, filled by 21 Mbit/s of UDP
                                              -> congestion (or link_degraded) on leaf2~spine1

The last fault is removed but its resolution is not waited for (the run ends). Run as root:
python3 test_ecmp_traced.py -v.
"""

import os
import re
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fwe2e  # noqa: E402
from fwe2e import Pending, wait_for  # noqa: E402
from test_findings import (ACCESS_RATE, DETECT_S, RECOVERY_ARGS, FindingsCase,  # noqa: E402
                           brief, net_findings)

FABRIC = dict(spines=2, leaves=3, hosts_per_leaf=2)
# Six agents probing ~10 flows each at 1 Hz earn a trace every ~40 s at the production budget
# (2 % of probe packets); the test lets traces cost up to 4 probe packets each so that every flow
# and echo is traced within ~20 s of the plan.
AGENT_ARGS = ("--test-trace-budget", "4")
LINK = "leaf1~spine1"
TBF_LINK = "leaf2~spine1"
SPINE = "spine2"
RESOLVE_S = 60
# The analyzer judges loss over a 10 s window (AnalysisConfig): the next fault starts only once the
# last one's losses are out of it, or a fault whose finding resolved on dense data within a second
# or two (a link back up) still lends its losses to the next fault's roll-up (leaf1~spine1's
# outage and spine2's first lossy link came out as switch leaf1).
WINDOW_S = 10


def counter(text, name, labels):
    m = re.search(rf"^{re.escape(name)}\{{{re.escape(labels)}\}} (\S+)$", text, re.M)
    return float(m.group(1)) if m else 0.0


class EcmpTracedTest(FindingsCase):
    def fabric(self):
        return fwe2e.DaemonFabric(routing="ecmp", aggregator_args=list(RECOVERY_ARGS),
                                  agent_args=list(AGENT_ARGS), access_rate=ACCESS_RATE, **FABRIC)

    def wait_traced(self, run):
        """The flows are traced both ways: the aggregator resolved as many traces as two per
        planned UDP flow (forward and echo; a count, not checked flow by flow), each to a path
        the map knows, and none contradicts the map."""
        def traced():
            flows = sum(len(p["flows"]) for p in run.pairs("udp"))
            text = run.metrics()
            got = {o: counter(text, "fabricwatch_path_traces_total", f'outcome="{o}"')
                   for o in ("resolved", "ambiguous", "no_match", "unmapped")}
            self.assertEqual(got["no_match"], 0, f"traces the map does not explain: {got}")
            return (flows > 0 and got["resolved"] >= 2 * flows and (flows, got)) or \
                Pending(f"{flows} planned flows, traces {got}")

        start = time.monotonic()
        flows, got = wait_for("every flow traced both ways", traced, timeout=60)
        print(f"\n  traced: {flows} planned UDP flows, traces {got} after "
              f"{time.monotonic() - start:.1f} s", file=sys.stderr)

    def fault(self, run, name, inject, wait, undo, resolve=True, after_ok=()):
        """Injects, waits for the right finding, asserts nothing else is named, undoes; then
        waits until it resolved with nothing else left. `after_ok`: link ids that may be named
        on their own while the finding resolves (they must resolve too)."""
        t0 = time.monotonic()
        inject()
        try:
            f = wait()
            self.timings[name] = time.monotonic() - t0
            self.assert_only(run, f)
        finally:
            undo()
            undone = time.monotonic()
        if resolve and not after_ok:
            self.wait_resolved(run, f, within=RESOLVE_S)
        elif resolve:
            self.wait_clear(run, f, set(after_ok))
        time.sleep(max(0.0, undone + WINDOW_S + 1 - time.monotonic()))
        return f

    def wait_clear(self, run, finding, allowed):
        """Until `finding` resolved and no link or switch finding is active: every other one
        that shows up names one of `allowed`."""
        start, seen = time.monotonic(), {}

        def clear():
            active = net_findings(run, active_only=True)
            fabric = [f for f in active if f.get("location", {}).get("type") in ("link", "switch")
                      and f.get("id") != finding.get("id")]
            for f in fabric:
                self.assertIn(f["location"]["id"], allowed,
                              f"named while {finding['id']} resolved: {brief(f)}")
                seen.setdefault(f["id"], brief(f))
            mine = [f for f in active if f.get("id") == finding.get("id")]
            return (not mine and not fabric) or Pending(
                "still active: " + "; ".join(brief(f) for f in mine + fabric))

        wait_for(f"{finding['id']} and what it leaves to resolve", clear, timeout=RESOLVE_S)
        print(f"  clear {time.monotonic() - start:.1f} s after the fault was removed"
              + "".join(f"\n  note, named while it resolved: {b}" for b in seen.values()),
              file=sys.stderr)
        self.assert_only(run, {}, when="after the fault was removed")

    def test_each_fault_names_exactly_its_element(self):
        self.timings = {}
        t_start = time.monotonic()
        with self.fabric() as run:
            run.wait_connected()
            if run.get_json("/api/v1/findings", allow_404=True) is None:
                raise unittest.SkipTest("the aggregator answers 404 on /api/v1/findings")
            self.wait_traced(run)
            self.assert_only(run, {}, when="before the first fault")

            drop = {}
            self.fault(run, "drop 5% " + LINK,
                       inject=lambda: drop.setdefault("f", run.fab.drop(LINK, 5.0)),
                       wait=lambda: self.wait_finding(run, {"link_degraded"}, LINK)[0],
                       undo=lambda: drop["f"].undo())

            down = {}
            self.fault(run, "down " + LINK,
                       inject=lambda: down.setdefault("f", run.fab.link_down(LINK)),
                       wait=lambda: self.wait_finding(run, {"link_down", "link_degraded"},
                                                      LINK)[0],
                       undo=lambda: down["f"].undo())

            spine = {}
            self.fault(run, "drop 5% in " + SPINE,
                       inject=lambda: spine.setdefault("f", run.fab.drop(SPINE, 5.0)),
                       wait=lambda: self.wait_finding(run, None, SPINE, element="switch")[0],
                       undo=lambda: spine["f"].undo(),
                       # Not exact yet: as the spine's links age out of the 10 s window at
                       # different rates, the switch finding resolves first and one of its links
                       # can be named alone for a few seconds (4 runs of 6: leaf3~spine2 twice,
                       # leaf2~spine2 twice).
                       after_ok=[f"leaf{i}~{SPINE}" for i in range(1, FABRIC["leaves"] + 1)])

            load = {}
            self.fault(run, "tbf + load " + TBF_LINK,
                       inject=lambda: load.setdefault("f", run.fab.congest(
                           TBF_LINK, "21mbit", DETECT_S + 2, toward="spine1", shape="20mbit",
                           latency="1s")),
                       wait=lambda: self.wait_finding(run, {"congestion", "link_degraded"},
                                                      TBF_LINK)[0],
                       undo=lambda: load["f"].stop(timeout=30), resolve=False)
        with open("/proc/loadavg") as f:
            load = f.read().split()[0]
        print(f"\n  fault -> finding (s): "
              + ", ".join(f"{k}: {v:.1f}" for k, v in self.timings.items())
              + f"; whole run {time.monotonic() - t_start:.1f} s, load {load}", file=sys.stderr)


if __name__ == "__main__":
    fwe2e.main()
