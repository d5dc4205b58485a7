#!/usr/bin/env python3
"""Issue 4 integration tests: the real agent and aggregator probing a 2x2x3 namespace fabric.

HealthyTest: every planned pair has populated RTT windows and no pair loses more than 0.1%.
DegradedTest: a tbf-shaped, loaded leaf1->spine1 link shows up in /api/v1/pairs on exactly the
pairs whose probe flows cross it. ctest runs HealthyThenDegradedTest: both on one fabric.
Run as root: python3 test_probe_mesh.py [-v] [HealthyTest].
"""

import os
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fwe2e  # noqa: E402
from fwe2e import Pending, fmt_ms, pair_name, wait_for, window  # noqa: E402

# The 10 s window of a pair holds 10 probes per flow at 1 Hz; it counts as full from this share
# on (a batch still in flight, a probe still waiting for its timeout).
FULL_WINDOW_SHARE = 0.7
# Sanity bound on any RTT quantile of a healthy veth fabric on this loaded 2-core VM: the tbf
# queue of the degraded test adds ~60 ms, so healthy must stay well below that.
HEALTHY_RTT_MAX_S = 0.020
MAX_HEALTHY_LOSS = 0.001  # issue 4: no pair above 0.1 %


def planned_flows(run, pair):
    return 1 if pair["path_class"] == "intra_leaf" else len(pair["flows"])


def warm(run, timeout=45):
    """Waits until every intra-leaf pair and a representative of every ordered leaf pair has a
    full 10 s window; returns the UDP pairs then."""
    intra = run.expected_intra_pairs()
    leaves = sorted({h.leaf for h in run.fab.hosts.values()})

    def ready():
        run.check_daemons_running()
        pairs = run.pairs()
        have = {(p["src"], p["dst"]): p for p in pairs}
        missing = sorted(intra - set(have))
        if missing:
            return Pending(f"intra-leaf pairs missing: {missing}")
        for la in leaves:
            for lb in leaves:
                if la != lb and not any(run.leaf_of(p["src"]) == la and run.leaf_of(p["dst"]) == lb
                                        for p in pairs):
                    return Pending(f"no inter-leaf pair {la}->{lb} yet")
        thin = [f"{pair_name(p)}={window(p)['probes']}" for p in pairs
                if window(p)["probes"] < FULL_WINDOW_SHARE * 10 * planned_flows(run, p)]
        return pairs if not thin else Pending(f"10 s windows not full yet: {thin}")

    return wait_for("full 10 s windows on every planned pair", ready, timeout)


def fabric():
    return fwe2e.DaemonFabric(spines=2, leaves=2, hosts_per_leaf=3)


class ProbeMeshCase(unittest.TestCase):
    """The two scenarios; the test classes below run them on a fabric of their own or, for ctest,
    one after the other on one fabric."""

    # The degraded scenario: tbf 20 Mbit/s on leaf1->spine1, then 26 Mbit/s of UDP pushed through
    # it: the tbf queue holds ~60 ms (50 ms latency + 10 ms burst) and drops the excess; tbf alone
    # would not delay 1 Hz probes. Probes that cross it, request or echo, must show it in
    # /api/v1/pairs; the others must not.
    LINK, SENDER, TOWARD = "leaf1~spine1", "leaf1", "spine1"
    SHAPE, LOAD, SECONDS = "20mbit", "26mbit", 45
    SLOW_S = 0.030  # the tbf queue adds ~60 ms; a crossing pair's quantile must reach this
    CLEAN_S = 0.010  # a pair that does not cross must stay below this

    def healthy(self, run):
        """Every planned pair has full RTT windows, the planned shape, TCP connect probes and no
        loss, 30 s after the start."""
        t0 = time.monotonic()
        run.wait_connected()
        warm(run)
        # Let every window hold at least 20 s and every pair at least one TCP connect probe
        # (one per 10 s per peer, first one within 10 s of the plan).
        time.sleep(max(0.0, 30 - (time.monotonic() - t0)))
        run.check_daemons_running()
        udp = run.pairs("udp")
        tcp = run.pairs("tcp_connect")
        self.check_plan_shape(run, udp)
        self.check_windows(run, udp)
        self.check_connect_pairs(run, udp, tcp)
        self.report_healthy(run, udp, tcp, time.monotonic() - t0)

    def check_plan_shape(self, run, udp):
        have = {(p["src"], p["dst"]): p for p in udp}
        self.assertEqual(len(have), len(udp), "a (src, dst) pair appears twice for udp")
        for (a, b), p in have.items():
            want = "intra_leaf" if run.leaf_of(a) == run.leaf_of(b) else "inter_leaf"
            self.assertEqual(p["path_class"], want, f"path_class of {a}->{b}")
        # Full mesh inside each leaf, one flow each.
        intra = {k for k, p in have.items() if p["path_class"] == "intra_leaf"}
        self.assertEqual(intra, run.expected_intra_pairs())
        for k in intra:
            self.assertEqual(len(have[k]["flows"]), 1, f"flows of intra-leaf pair {k}")
        # Across leaves: every ordered leaf pair gets k flows in all (the coverage bound).
        k = run.inter_leaf_flows()
        per_leaf_pair = {}
        for (a, b), p in have.items():
            if p["path_class"] == "inter_leaf":
                ports = per_leaf_pair.setdefault((run.leaf_of(a), run.leaf_of(b)), set())
                ports |= {(a, b, f["src_port"]) for f in p["flows"]}
        leaves = sorted({h.leaf for h in run.fab.hosts.values()})
        for la in leaves:
            for lb in leaves:
                if la != lb:
                    self.assertGreaterEqual(len(per_leaf_pair.get((la, lb), ())), k,
                                            f"flows planned {la}->{lb}")

    def check_windows(self, run, udp):
        for p in udp:
            name = pair_name(p)
            w10 = window(p, "10s")
            self.assertGreaterEqual(w10["probes"], FULL_WINDOW_SHARE * 10 * planned_flows(run, p),
                                    f"{name}: 10 s window probes")
            previous = 0
            for wn in fwe2e.WINDOWS:
                w = window(p, wn)
                self.assertGreaterEqual(w["probes"], previous, f"{name} {wn}: a longer window "
                                        "holds fewer probes than a shorter one")
                previous = w["probes"]
                q = [w["rtt_p50_s"], w["rtt_p99_s"], w["rtt_p999_s"]]
                self.assertTrue(all(isinstance(x, (int, float)) for x in q),
                                f"{name} {wn}: RTT quantiles not populated: {w}")
                self.assertGreater(q[0], 0, f"{name} {wn}: p50")
                self.assertLessEqual(q[0], q[1], f"{name} {wn}: p50 > p99")
                self.assertLessEqual(q[1], q[2], f"{name} {wn}: p99 > p99.9")
                self.assertLess(q[2], HEALTHY_RTT_MAX_S, f"{name} {wn}: p99.9 of a healthy pair")
                self.assertLessEqual(w["loss_ratio"], MAX_HEALTHY_LOSS, f"{name} {wn}: loss {w}")

    def check_connect_pairs(self, run, udp, tcp):
        have = {(p["src"], p["dst"]): p for p in tcp}
        for p in udp:
            key = (p["src"], p["dst"])
            self.assertIn(key, have, f"no tcp_connect probes for planned pair {key}")
            w = window(have[key], "60s")
            self.assertGreaterEqual(w["probes"], 1, f"tcp_connect {key}")
            self.assertIsNotNone(w["rtt_p50_s"], f"tcp_connect {key}: {w}")
            self.assertLessEqual(w["loss_ratio"], MAX_HEALTHY_LOSS, f"tcp_connect {key}: {w}")

    def report_healthy(self, run, udp, tcp, elapsed):
        print(f"\nhealthy fabric after {elapsed:.0f} s: {len(udp)} udp pairs, {len(tcp)} "
              "tcp_connect pairs", file=sys.stderr)
        for cls in ("intra_leaf", "inter_leaf"):
            rows = [p for p in udp if p["path_class"] == cls]
            p50 = sorted(window(p, "60s")["rtt_p50_s"] for p in rows)
            p99 = sorted(window(p, "60s")["rtt_p99_s"] for p in rows)
            probes = sum(window(p, "60s")["probes"] for p in rows)
            lost = sum(window(p, "60s")["probes"] * window(p, "60s")["loss_ratio"] for p in rows)
            print(f"  {cls}: {len(rows)} pairs, 60 s window: p50 {fmt_ms(p50[0])}..{fmt_ms(p50[-1])}"
                  f", p99 {fmt_ms(p99[0])}..{fmt_ms(p99[-1])}, {probes} probes, {lost:.0f} lost",
                  file=sys.stderr)
        for p in udp:
            if p["path_class"] == "inter_leaf":
                spines = {}
                for f in p["flows"]:
                    req, _ = run.round_trip(p["src"], p["dst"], f["src_port"])
                    spines[req[2]] = spines.get(req[2], 0) + 1
                print(f"  {pair_name(p)}: {len(p['flows'])} flows, requests per spine "
                      f"{dict(sorted(spines.items()))}", file=sys.stderr)

    def degraded(self, run):
        """The shaped, loaded link shows on exactly the pairs whose flows cross it, and they
        recover once the load stops."""
        run.wait_connected()
        before = {(p["src"], p["dst"]): p for p in warm(run)}
        hop = (self.SENDER, self.TOWARD)
        crossing = {k: run.crossing_flows(p, [hop]) for k, p in before.items()}
        self.assertTrue(any(crossing.values()),
                        f"no planned flow crosses {hop}; the test cannot judge anything")
        shaping = run.fab.limit_bandwidth(self.LINK, self.SHAPE, toward=self.TOWARD)
        try:
            goodput = self.goodput_through(run, hop)
            self.assertLess(goodput.get(True, 0), 1.1 * 20e6, f"the tbf is not in effect: "
                            f"{goodput}")
            load = run.fab.congest(self.LINK, self.LOAD, self.SECONDS, toward=self.TOWARD)
            try:
                time.sleep(12)  # the whole 10 s window now lies inside the fault
                during = {(p["src"], p["dst"]): p for p in run.pairs("udp")}
            finally:
                summary = load.stop(timeout=30)
        finally:
            shaping.undo()
        self.report_degraded(before, during, crossing, goodput, summary)
        self.check_during(run, during, crossing)
        self.check_recovery(run, crossing)

    def goodput_through(self, run, hop):
        """Our own bounded TCP transfer (1 MiB, before the load starts) node01 -> node04 on a
        source port whose path crosses the shaped hop, and one on a port that does not: the
        bandwidth effect, since the agents' bandwidth bursts are minutes apart."""
        run.fab.start_responder("node04", udp_port=7007, tcp_port=7008, seconds=60)
        out = {}
        for sport in range(41000, 41200):
            nodes, _ = run.fab.path_of("node01", "node04", "tcp", sport, 7008)
            via = hop in set(zip(nodes, nodes[1:]))
            if via not in out:
                out[via] = run.fab.tcp_goodput("node01", "node04", 7008, 1 << 20, sport=sport,
                                               timeout=20)["bps"]
            if len(out) == 2:
                return out
        return out

    def check_during(self, run, during, crossing):
        for key, ports in crossing.items():
            self.assertIn(key, during, f"pair {key} vanished during the fault")
            p = during[key]
            w = window(p, "10s")
            name = pair_name(p)
            cur = {f["src_port"] for f in p["flows"]}
            n = len(cur)
            if not ports:
                self.assertIsNotNone(w["rtt_p99_s"], f"{name}: no RTTs during the fault: {w}")
                self.assertLess(w["rtt_p99_s"], self.CLEAN_S,
                                f"{name} crosses no shaped hop, yet its 10 s p99 is "
                                f"{fmt_ms(w['rtt_p99_s'])}")
                self.assertLessEqual(w["loss_ratio"], 0.02, f"{name}: loss without the fault")
                continue
            # At least one flow in n crosses: >= 1/n of the window's probes ride the tbf queue.
            self.assertIsNotNone(w["rtt_p99_s"], f"{name}: no RTTs during the fault: {w}")
            self.assertGreaterEqual(w["rtt_p99_s"], self.SLOW_S,
                                    f"{name}: {len(ports)}/{n} flows cross the shaped hop, yet "
                                    f"its 10 s p99 is {fmt_ms(w['rtt_p99_s'])}")
            share = len(ports) / max(n, 1)
            if share >= 0.75:
                self.assertGreaterEqual(w["rtt_p50_s"], self.SLOW_S,
                                        f"{name}: {share:.0%} of flows cross, p50 {w}")
            elif share <= 0.25:
                self.assertLess(w["rtt_p50_s"], self.CLEAN_S,
                                f"{name}: {share:.0%} of flows cross, p50 {w}")

    def check_recovery(self, run, crossing):
        def clean():
            pairs = {(p["src"], p["dst"]): p for p in run.pairs("udp")}
            slow = [f"{pair_name(p)} p99 {fmt_ms(window(p)['rtt_p99_s'])}"
                    for k, p in pairs.items() if k in crossing
                    and (window(p)["rtt_p99_s"] is None or window(p)["rtt_p99_s"] >= self.CLEAN_S)]
            return pairs if not slow else Pending(f"still slow: {slow}")

        start = time.monotonic()
        wait_for("the 10 s windows to recover after the fault", clean, timeout=25)
        print(f"  recovered: every pair's 10 s p99 below {fmt_ms(self.CLEAN_S)} "
              f"{time.monotonic() - start:.0f} s after the load stopped", file=sys.stderr)

    def report_degraded(self, before, during, crossing, goodput, summary):
        print(f"\n{self.LOAD} of UDP into tbf {self.SHAPE} on {self.SENDER}->{self.TOWARD}; "
              f"load summary {summary}", file=sys.stderr)
        if goodput:
            print("  own TCP goodput node01->node04, 1 MiB: "
                  + ", ".join(f"{'through' if via else 'around'} the shaped hop "
                              f"{bps / 1e6:.1f} Mbit/s" for via, bps in sorted(goodput.items())),
                  file=sys.stderr)
        for key in sorted(before):
            b, d = window(before[key]), window(during[key]) if key in during else {}
            n = len(before[key]["flows"])
            print(f"  {key[0]}->{key[1]} {len(crossing[key])}/{n} flows cross: p50 "
                  f"{fmt_ms(b['rtt_p50_s'])} -> {fmt_ms(d.get('rtt_p50_s'))}, p99 "
                  f"{fmt_ms(b['rtt_p99_s'])} -> {fmt_ms(d.get('rtt_p99_s'))}, loss "
                  f"{b['loss_ratio']:.3f} -> {d.get('loss_ratio', float('nan')):.3f}",
                  file=sys.stderr)


class HealthyTest(ProbeMeshCase):
    def test_every_planned_pair_has_rtt_windows_and_no_loss(self):
        with fabric() as run:
            self.healthy(run)


class DegradedTest(ProbeMeshCase):
    def test_flows_through_the_shaped_link_show_it_and_others_do_not(self):
        with fabric() as run:
            self.degraded(run)


# ctest runs this instead of the two classes above: the degraded scenario warms up as the healthy
# one ends (full windows on every planned pair), so one fabric start-up and warm-up serves both.
class HealthyThenDegradedTest(ProbeMeshCase):
    def test_healthy_then_degraded(self):
        with fabric() as run:
            self.healthy(run)
            self.degraded(run)


if __name__ == "__main__":
    fwe2e.main()
