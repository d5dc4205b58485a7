#!/usr/bin/env python3
"""Issue 5 section 4: each injected fault gets the right finding on the right link, then resolves.

The fabric is 2 spines x 3 leaves x 2 hosts with flow pinning (fwe2e.FlowPinning): the map says
`routing: deterministic` and the leaves route probe flow i over spine (i mod 2)+1, the analyzer's
convention, so that end-to-end evidence can name one link. Three leaves, because with two every
flow through leaf1~spine1 also crosses leaf2~spine1 and nothing could tell those apart; with
three, the leaf2<->leaf3 flows over spine1 exonerate leaf2~spine1 and leaf3~spine1.

Every test skips (exit 77) while the aggregator answers 404 on /api/v1/findings (the analyzer
not wired in yet). Run as root: python3 test_findings.py [-v] [DropTest].
"""

import os
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fwe2e  # noqa: E402
from fwe2e import Pending, wait_for, window  # noqa: E402

LINK = "leaf1~spine1"  # the faulty link in every test; flows pinned to spine1 cross it
DETECT_S = 30  # issue 5: the finding must appear within 30 s of the fault
# Baselines need 30 RTT samples per pair in the long window and are refreshed every 30 ticks,
# so latency findings need about a minute of healthy history before the fault.
BASELINE_S = 65
# Loss faults need no RTT baseline, only every planned flow seen in a full 10 s window: 25 s from
# the start (as test_status_page_fault's link-down case) keeps the healthy fabric clear of
# findings before the fault.
LOSS_WARMUP_S = 25
FABRIC = dict(spines=2, leaves=3, hosts_per_leaf=2)
# Resolution waits shortened with the aggregator's test-only flags (production: 30 s good, which
# analysis scenarios_test checks, and 60 s without a toggle for a flapping link). A resolution still
# needs the fault's evidence to age out of the 10 s short window and then the shortened run of good
# ticks, so each fault clears for real before the next begins.
RECOVERY_ARGS = ("--test-recovery", "10s", "--test-flap-quiet", "20s")
# Host links run at a line rate so that bandwidth bursts measure links, not CPU (fwe2e).
ACCESS_RATE = "1gbit"
# The finding kinds the probe mesh can raise (DESIGN.md: links and switches, NICs and hosts,
# probing). The node-hardware kinds (port_errors, pcie_downtrained, ...) come from the agents'
# node checks of the real sysfs and hwloc test data, which has saturated error counters; they say
# nothing about the namespace fabric, so these tests leave them out.
NET_KINDS = {"link_degraded", "link_down", "link_flapping", "congestion", "switch_degraded",
             "nic_degraded", "nic_down", "host_network", "probe_unreachable", "collective_slow"}


def net_findings(run, active_only):
    rows = run.get_json("/api/v1/findings" + ("?active=true" if active_only else ""))
    return [f for f in rows if f.get("kind") in NET_KINDS]


def brief(f):
    loc = f.get("location", {})
    return (f"{f.get('kind')}@{loc.get('type')}:{loc.get('id')} active={f.get('active')} "
            f"confidence={f.get('confidence')} summary={f.get('summary')!r}")


class FindingsCase(unittest.TestCase):
    """Builds the pinned fabric, checks the analyzer is served, warms up the baselines."""

    aggregator_args = ()
    access_rate = ACCESS_RATE
    # Before a fault, only link and switch findings fail the test; host-level ones are printed (see
    # assert_only). HealthyTest is strict about every kind.
    strict_before_fault = False
    OBSERVE_S = 30  # observe_healthy()

    def fabric(self):
        return fwe2e.DaemonFabric(routing="deterministic",
                                  aggregator_args=[*RECOVERY_ARGS, *self.aggregator_args],
                                  access_rate=self.access_rate, **FABRIC)

    def start(self, run, baseline_s=BASELINE_S):
        t0 = time.monotonic()
        run.wait_connected()
        if run.get_json("/api/v1/findings", allow_404=True) is None:
            raise unittest.SkipTest("the aggregator answers 404 on /api/v1/findings: the analyzer "
                                    "(daemon/aggregator/analysis) is not wired in yet")
        if run.get_json("/api/v1/links", allow_404=True) is None:
            raise unittest.SkipTest("the aggregator answers 404 on /api/v1/links")
        self.check_pinned_plan(run)
        time.sleep(max(0.0, baseline_s - (time.monotonic() - t0)))
        run.check_daemons_running()
        if self.strict_before_fault:
            active = net_findings(run, active_only=True)
            self.assertEqual(active, [], "findings before any fault:\n"
                             + "\n".join(brief(f) for f in active))
        else:
            self.assert_only(run, {}, when="before the fault")

    def check_pinned_plan(self, run):
        """Some planned flows cross LINK (else the test could not see anything)."""
        def crossing():
            pairs = run.pairs("udp")
            n = sum(1 for p in pairs if p["path_class"] == "inter_leaf"
                    and "leaf1" in (run.leaf_of(p["src"]), run.leaf_of(p["dst"]))
                    for f in p["flows"] if f["flow_id"] % run.fab.spines == 0)
            return n >= 3 or Pending(f"{n} probe flows pinned across {LINK} so far")

        wait_for(f">= 3 planned flows across {LINK}", crossing, timeout=40)

    def wait_finding(self, run, kinds, link=LINK, within=DETECT_S, element="link"):
        """Waits for an active finding of one of `kinds` (None: any kind) located on the
        `element` (a location type) whose id is `link`; returns it and the seconds it took.
        Fails naming every active finding when it does not come."""
        start = time.monotonic()

        def found():
            run.check_daemons_running()
            active = net_findings(run, active_only=True)
            for f in active:
                loc = f.get("location", {})
                if ((kinds is None or f.get("kind") in kinds) and loc.get("type") == element
                        and loc.get("id") == link):
                    return f
            return Pending("active: " + ("; ".join(brief(f) for f in active) or "none"))

        what = "a finding" if kinds is None else f"a {'/'.join(sorted(kinds))} finding"
        f = wait_for(f"{what} on {element} {link}", found, timeout=within)
        took = time.monotonic() - start
        print(f"\n  {brief(f)} after {took:.1f} s", file=sys.stderr)
        return f, took

    def assert_only(self, run, finding, when="while the fault is on"):
        """No other active finding blames a link or a switch. Host-level ones (host_network, NIC
        kinds) are printed, not failed: every namespace host shares this machine's two cores, so
        CPU contention from outside the test can make one host's probes slow for real."""
        others = [f for f in net_findings(run, active_only=True)
                  if f.get("id") != finding.get("id")]
        fabric = [f for f in others if f.get("location", {}).get("type") in ("link", "switch")]
        for f in others:
            if f not in fabric:
                print(f"  note, host-level finding {when}: {brief(f)}", file=sys.stderr)
        self.assertEqual(fabric, [], f"link or switch findings beside the right one {when}:\n"
                         + "\n".join(brief(f) for f in fabric))

    def assert_link_state(self, run, link, states):
        rows = {r["id"]: r for r in run.get_json("/api/v1/links")}
        self.assertIn(link, rows, f"/api/v1/links has no {link}: {sorted(rows)}")
        self.assertIn(rows[link]["state"], states, f"{link}: {rows[link]}")

    def inject(self, run, kinds, states, undo, resolve_within, stats=None, during=None):
        """With the fault already injected: the right finding on LINK within DETECT_S, the link's
        state in `states`, nothing else blamed, then during(run, finding) if given, while the fault
        is still on; then undo() and the finding resolves."""
        try:
            f, _ = self.wait_finding(run, kinds)
            self.assert_link_state(run, LINK, states)
            self.assert_only(run, f)
            if stats:
                print(f"  fault so far: {stats()}", file=sys.stderr)
            if during:
                during(run, f)
        finally:
            undo()
        return self.wait_resolved(run, f, within=resolve_within)

    def wait_resolved(self, run, finding, within):
        start = time.monotonic()

        def resolved():
            rows = [f for f in run.get_json("/api/v1/findings") if f.get("id") == finding["id"]]
            if rows and not rows[0].get("active"):
                return rows[0]
            return Pending(f"still {'active' if rows else 'missing'}: "
                           + (brief(rows[0]) if rows else finding["id"]))

        f = wait_for(f"finding {finding['id']} to resolve", resolved, timeout=within)
        print(f"  resolved {time.monotonic() - start:.1f} s after the fault was removed "
              f"(last_seen {f.get('last_seen')})", file=sys.stderr)
        self.assert_only(run, f, when="after the fault was removed")
        return f

    # The scenarios, each run on a fabric that start() has warmed up.

    def observe_healthy(self, run):
        """OBSERVE_S more seconds: no network finding at all, every fabric link ok or unknown."""
        time.sleep(self.OBSERVE_S)
        every = net_findings(run, active_only=False)
        self.assertEqual(every, [], "findings in a healthy run:\n"
                         + "\n".join(brief(f) for f in every))
        links = run.get_json("/api/v1/links")
        fabric_links = {lk.id for lk in run.fab.links.values() if lk.kind == "fabric"}
        self.assertLessEqual(fabric_links, {r["id"] for r in links})
        for r in links:
            self.assertIn(r["state"], {"ok", "unknown"}, f"healthy link {r}")
        udp = run.pairs("udp")
        lost = sum(window(p, "60s")["probes"] * window(p, "60s")["loss_ratio"] for p in udp)
        print(f"\n  healthy: {len(udp)} udp pairs, {lost:.0f} probes lost in the 60 s windows, "
              f"link states {sorted((r['id'], r['state']) for r in links)}", file=sys.stderr)

    def drop_five_percent(self, run):
        fault = run.fab.drop(LINK, 5.0)
        self.inject(run, {"link_degraded"}, {"degraded"}, undo=fault.undo, resolve_within=60,
                    stats=fault.stats)

    def link_down(self, run):
        fault = run.fab.link_down(LINK)

        def undo():
            fault.undo()
            run.pinning.refresh()  # link_up restores the main routes, not the pinned ones

        self.inject(run, {"link_down"}, {"down"}, undo=undo, resolve_within=60,
                    during=self.while_link_down)

    def while_link_down(self, run, finding):
        """More checks while LINK is down and its link_down finding is active (none here; the
        status page test adds its page, tests/browser/test_status_page_fault.py)."""

    FLAP_PERIOD, FLAP_COUNT = 6.0, 10  # 3 s down, 3 s up; the loop stops once the finding is out

    def flap(self, run):
        run.pinning.start_keeper()
        loop = run.fab.flap(LINK, period=self.FLAP_PERIOD, count=self.FLAP_COUNT,
                            down_fraction=0.5)

        def undo():
            loop.stop(timeout=30)
            run.pinning.stop_keeper()
            run.pinning.refresh()

        # A flapping link resolves only after flap_quiet_s (--test-flap-quiet) without a toggle.
        self.inject(run, {"link_flapping"}, {"flapping", "down"}, undo=undo, resolve_within=100)

    def congest(self, run):
        load = run.fab.congest(LINK, "21mbit", DETECT_S + 2, toward="spine1", shape="20mbit",
                               latency="1s")
        self.inject(run, {"congestion"}, {"congested"}, undo=lambda: load.stop(timeout=30),
                    resolve_within=60)


class HealthyTest(FindingsCase):
    strict_before_fault = True

    def test_a_healthy_run_has_no_findings(self):
        with self.fabric() as run:
            self.start(run)
            self.observe_healthy(run)


class DropTest(FindingsCase):
    def test_five_percent_drop_is_link_degraded(self):
        with self.fabric() as run:
            self.start(run, baseline_s=LOSS_WARMUP_S)
            self.drop_five_percent(run)


class LinkDownTest(FindingsCase):
    def test_link_down_is_link_down(self):
        with self.fabric() as run:
            self.start(run, baseline_s=LOSS_WARMUP_S)
            self.link_down(run)


class FlapTest(FindingsCase):
    def test_flap_loop_is_link_flapping(self):
        with self.fabric() as run:
            self.start(run, baseline_s=LOSS_WARMUP_S)
            self.flap(run)


class CongestionTest(FindingsCase):
    """21 Mbit/s of UDP into a 20 Mbit/s tbf with a 1 s queue: the queue grows by ~50 ms each
    second with no drop for its first ~20 s, so the flows across it see inflated latency with
    little loss. The load stops once the finding is out (at most DETECT_S + 2 s)."""

    def test_background_load_is_congestion(self):
        with self.fabric() as run:
            self.start(run)
            self.congest(run)


class TbfDegradedTest(FindingsCase):
    """tbf 50 Mbit/s on the link (host links run at ACCESS_RATE): only the agents' bandwidth bursts
    can see it, so this needs bursts far more often than the default 300 s per peer."""

    BW_FLAG = "--bandwidth-interval"
    # Bursts at 1 Gbit/s are CPU-bound on a loaded 2-core machine (a healthy host read 58% of the
    # median); at 200 Mbit/s the tbf, not the CPU, sets their pace. The fault is still 4x slower.
    access_rate = "200mbit"

    def setUp(self):
        text = fwe2e.help_text(fwe2e.aggregator_bin())
        if self.BW_FLAG not in text:
            self.skipTest(f"fabricwatch-aggregator has no {self.BW_FLAG} flag: bandwidth bursts "
                          "come every 300 s per peer, too rare to detect a tbf limit in 30 s")
        self.aggregator_args = [self.BW_FLAG, "10s"]

    def test_tbf_limit_is_link_degraded(self):
        with self.fabric() as run:
            self.start(run)
            fault = run.fab.limit_bandwidth(LINK, "50mbit")
            # Bad bandwidth samples stay in the analyzer's 180 s bandwidth window.
            self.inject(run, {"link_degraded"}, {"degraded"}, undo=fault.undo, resolve_within=240)


# ctest runs these two instead of the five classes they combine (DropLinkDownFlapTest through
# tests/browser/test_status_page_fault.py's DropLinkDownFlapPageTest, which adds the status page
# while the link is down): each fabric costs ~40-65 s of
# start-up and baseline on 2 cores, and a fault that resolved cleanly leaves the fabric as healthy
# as a new one (inject() asserts that nothing else is blamed after the undo).
class DropLinkDownFlapTest(FindingsCase):
    def test_drop_then_link_down_then_flap(self):
        with self.fabric() as run:
            self.start(run, baseline_s=LOSS_WARMUP_S)
            self.drop_five_percent(run)
            self.link_down(run)
            self.flap(run)


class HealthyThenCongestionTest(FindingsCase):
    strict_before_fault = True

    def test_healthy_then_congestion(self):
        with self.fabric() as run:
            self.start(run)
            self.observe_healthy(run)
            self.congest(run)


if __name__ == "__main__":
    fwe2e.main()
