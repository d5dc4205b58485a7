#!/usr/bin/env python3
"""Self-tests of the namespace test fabric: reachability, ECMP spread, map, faults, teardown.

Run as root: python3 tests/fabric/test_fabric.py [-v] [TestClass]. Without root the fabric tests
exit 77 (ctest SKIP); SpecTest needs no privileges.
"""

import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import fabric  # noqa: E402
import fabric_cli  # noqa: E402
import netns  # noqa: E402

FABRIC_PY = os.path.join(HERE, "fabric.py")
UDP, TCP = 7007, 7008


def parse_flow_yaml(text):
    """Reads the map's subset of YAML: top-level scalars and lists of one-line flow mappings."""
    out, section = {}, None
    for line in text.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        m = re.fullmatch(r"(\w+):\s*(\S.*)?", line)
        if m:
            section = m.group(1)
            out[section] = m.group(2).split("#")[0].strip() if m.group(2) else []
            continue
        m = re.fullmatch(r"\s+-\s+\{(.*)\}\s*", line)
        if not m or not isinstance(out.get(section), list):
            raise ValueError(f"unexpected map line: {line!r}")
        # key: value pairs split on ", " outside [...] lists; a list becomes a Python list.
        row = {}
        for kv in re.findall(r"(\w+): (\[[^\]]*\]|[^,]+)", m.group(1)):
            k, v = kv
            row[k] = [x.strip() for x in v[1:-1].split(",") if x.strip()] if v.startswith("[") \
                else v.strip()
        out[section].append(row)
    return out


def spine_rx(fab, leaf):
    """Packets each spine received from `leaf` (its device is named after the leaf)."""
    return {s: fab.counters(s)[leaf]["rx_packets"] for s in fab.switches if s.startswith("spine")}


class SpecTest(unittest.TestCase):
    """Bad input gets a clear FabricError; needs no privileges."""

    def test_rejects_bad_shapes(self):
        for kw in ({"spines": 0}, {"leaves": 128}, {"hosts_per_leaf": "3"}, {"spines": True},
                   {"leaves": 2, "hosts_per_leaf": 200}):
            with self.assertRaises(fabric.FabricError, msg=kw):
                fabric.Fabric(**kw)

    def test_rejects_bad_prefixes(self):
        for p in ("fw", "fw1", "", "a b-", "x" * 50 + "-", "../etc-"):
            with self.assertRaises(fabric.FabricError, msg=p):
                fabric.Fabric(prefix=p)
            with self.assertRaises(fabric.FabricError, msg=p):
                netns.cleanup_prefix(p)

    def test_parse_rate(self):
        self.assertEqual(fabric.parse_rate("50mbit"), 50_000_000)
        self.assertEqual(fabric.parse_rate("1.5gbit"), 1_500_000_000)
        self.assertEqual(fabric.parse_rate(800_000), 800_000)
        for bad in ("fast", "50mbps", "-1mbit", "1bit", "", None, True):
            with self.assertRaises(fabric.FabricError, msg=bad):
                fabric.parse_rate(bad)

    def test_not_up_is_an_error(self):
        fab = fabric.Fabric(1, 1, 1)
        with self.assertRaises(fabric.FabricError):
            fab.map_yaml()
        with self.assertRaises(fabric.FabricError):
            fab.spawn("node01", ["true"])


class FabricTest(unittest.TestCase):
    """One 2 spines x 2 leaves x 3 hosts fabric shared by the tests; each test undoes its faults."""

    @classmethod
    def setUpClass(cls):
        cls.fab = fabric.Fabric(spines=2, leaves=2, hosts_per_leaf=3).up()
        try:
            for h in cls.fab.hosts:
                cls.fab.start_responder(h, UDP, TCP)
        except BaseException:
            cls.fab.close()
            raise

    @classmethod
    def tearDownClass(cls):
        prefix = cls.fab.prefix
        cls.fab.close()
        assert not netns.list_namespaces(prefix), "namespaces left after close()"

    def sports_via(self, src, dst, spine, proto, dport, want, start=40000):
        """Source ports whose forward path from src to dst crosses `spine`."""
        out = []
        for sport in range(start, start + 400):
            nodes, reached = self.fab.path_of(src, dst, proto, sport, dport)
            if reached and spine in nodes:
                out.append(sport)
                if len(out) == want:
                    return out
        self.fail(f"no {proto} flow from {src} to {dst} hashes onto {spine}")

    def test_every_host_reaches_every_other(self):
        for src in self.fab.hosts:
            for dst in self.fab.hosts:
                if src != dst:
                    st = self.fab.udp_probe(src, dst, UDP, count=3)
                    self.assertEqual(st.received, 3, f"{src} -> {dst}: {st} {st.errors}")

    def test_root_namespace_has_no_route_to_the_fabric(self):
        routes = json.loads(netns.sh(["ip", "-j", "route", "show", "table", "all"]).stdout)
        ours = [r for r in routes if str(r.get("dst", "")).startswith(("198.18.", "198.19."))]
        self.assertEqual(ours, [])

    def test_map_matches_topology(self):
        with tempfile.TemporaryDirectory() as d:
            path = self.fab.write_map(os.path.join(d, "map.yaml"))
            with open(path) as f:
                text = f.read()
        m = parse_flow_yaml(text)
        try:
            import yaml  # PyYAML, when present, must read the same document
            self.assertEqual(yaml.safe_load(text)["hosts"][0]["address"], m["hosts"][0]["address"])
        except ImportError:
            pass
        self.assertEqual(m["routing"], "ecmp")
        self.assertEqual(sorted((s["name"], s["tier"]) for s in m["switches"]),
                         [("leaf1", "leaf"), ("leaf2", "leaf"), ("spine1", "spine"),
                          ("spine2", "spine")])
        # Each switch lists every address it holds (path traces map answers back to switches).
        for s in m["switches"]:
            held = json.loads(netns.sh(["ip", "-n", self.fab.ns(s["name"]), "-j", "addr",
                                        "show"]).stdout)
            mine = {a["local"] for dev in held for a in dev.get("addr_info", [])
                    if a.get("family") == "inet" and not a["local"].startswith("127.")}
            self.assertEqual(set(s["addresses"]), mine, s["name"])
        self.assertEqual(m["switches"][0]["addresses"],
                         ["198.18.1.1", "198.18.128.3", "198.18.129.3"])  # leaf1
        ids = sorted(f"{lk['a']}~{lk['b']}" for lk in m["links"])
        self.assertEqual(ids, ["leaf1~spine1", "leaf1~spine2", "leaf2~spine1", "leaf2~spine2"])
        self.assertTrue(all(lk["a"] < lk["b"] for lk in m["links"]))
        self.assertEqual(len(m["hosts"]), 6)
        for h in m["hosts"]:
            host = self.fab.hosts[h["node"]]
            self.assertEqual((h["address"], h["switch"], h["nic"]),
                             (host.address, host.leaf, "eth0"))
            # The address really sits on that NIC, and the NIC's cable ends on that switch.
            addrs = json.loads(netns.sh(["ip", "-n", host.ns, "-j", "addr", "show", "dev",
                                         "eth0"]).stdout)
            self.assertIn(h["address"], [a["local"] for a in addrs[0]["addr_info"]])
            self.assertEqual(self.fab.path_of(h["node"], host.gateway, "udp", 1, 1),
                             ([h["node"], h["switch"]], True))
        for leaf in ("leaf1", "leaf2"):
            for spine in ("spine1", "spine2"):
                self.assertIn(spine, self.fab.counters(leaf))
                self.assertIn(leaf, self.fab.counters(spine))

    def test_ecmp_spreads_flows_across_spines(self):
        sports = list(range(42000, 42128))
        predicted = {"spine1": 0, "spine2": 0}
        for sp in sports:
            nodes, reached = self.fab.path_of("node01", "node04", "udp", sp, UDP)
            self.assertTrue(reached)
            predicted[nodes[2]] += 1
        before = spine_rx(self.fab, "leaf1")
        res = self.fab.udp_flows("node01", "node04", UDP, sports, count=1)
        after = spine_rx(self.fab, "leaf1")
        self.assertEqual(sum(st.received for st in res.values()), len(sports))
        got = {s: after[s] - before[s] for s in after}
        for s in got:
            self.assertGreaterEqual(got[s], 0.25 * len(sports), f"spine split {got}")
            # Counters also see the odd ARP packet; the kernel's hash prediction must match.
            self.assertLessEqual(abs(got[s] - predicted[s]), 3, f"counted {got}, predicted {predicted}")
        print(f"\n  ECMP: 128 flows leaf1->leaf2 split {got} (predicted {predicted})", file=sys.stderr)

    def test_every_switch_hashes_the_5_tuple_and_answers_icmp_unlimited(self):
        want = {"net.ipv4.fib_multipath_hash_policy": "3",
                "net.ipv4.fib_multipath_hash_fields": "55",  # 0x37
                "net.ipv4.icmp_ratelimit": "0"}
        if not os.path.exists("/proc/sys/net/ipv4/fib_multipath_hash_fields"):
            want = {"net.ipv4.fib_multipath_hash_policy": "1", "net.ipv4.icmp_ratelimit": "0"}
        for sw in self.fab.switches:
            out = self.fab.exec(sw, ["sysctl", "-n"] + list(want)).stdout.split()
            self.assertEqual(dict(zip(want, out)), want, sw)

    def test_switches_answer_ttl_expiry_for_each_flow(self):
        """A trace of each UDP 5-tuple (TTL 1..3, node01 -> node04 across the spines) gets an
        answer from every switch on that flow's own path: no ICMP rate limit hides a hop, even
        for 12 traces in a burst (the kernel's default allows 6), and the answering addresses
        name the switches path_of gives."""
        sports = range(44000, 44012)
        spines = set()
        for sp in sports:
            hops = self.fab.trace("node01", "node04", sp, UDP, max_ttl=3)
            nodes, reached = self.fab.path_of("node01", "node04", "udp", sp, UDP)
            self.assertTrue(reached)
            self.assertNotIn(None, hops, f"sport {sp}: silent hop in {hops}")
            self.assertEqual([self.fab.switch_at(a) for a in hops], nodes[1:-1], f"sport {sp}")
            spines.add(nodes[2])
        self.assertEqual(spines, {"spine1", "spine2"})

    def test_tbf_limits_goodput_only_on_its_link(self):
        limit = 40e6
        shaped_sport = self.sports_via("node01", "node04", "spine1", "tcp", TCP, 1, 43000)[0]
        free_sport = self.sports_via("node01", "node04", "spine2", "tcp", TCP, 1, 43000)[0]
        with self.fab.limit_bandwidth("leaf1~spine1", "40mbit"):
            before = self.fab.counters("spine1")["leaf1"]["rx_bytes"]
            shaped = self.fab.tcp_goodput("node01", "node04", TCP, 4 << 20, sport=shaped_sport)
            crossed = self.fab.counters("spine1")["leaf1"]["rx_bytes"] - before
            free = self.fab.tcp_goodput("node01", "node04", TCP, 4 << 20, sport=free_sport)
        after = self.fab.tcp_goodput("node01", "node04", TCP, 4 << 20, sport=shaped_sport + 1000)
        print(f"\n  tbf 40mbit: shaped {shaped['bps'] / 1e6:.1f} Mbit/s, other spine "
              f"{free['bps'] / 1e6:.0f} Mbit/s, after undo {after['bps'] / 1e6:.0f} Mbit/s",
              file=sys.stderr)
        self.assertEqual(shaped["bytes"], 4 << 20)
        self.assertGreaterEqual(crossed, 4 << 20)
        self.assertGreater(shaped["bps"], 0.8 * limit)
        self.assertLess(shaped["bps"], 1.05 * limit)
        self.assertGreater(free["bps"], 4 * limit)
        self.assertGreater(after["bps"], 4 * limit)

    def test_drop_on_a_link_direction(self):
        n = 2000
        with self.fab.drop("leaf2~node04", 20, toward="node04") as fault:
            st = self.fab.udp_probe("node01", "node04", UDP, count=n, sport=44000, rate_pps=4000,
                                    timeout=0.3)
            dropped = fault.stats()["dropped_packets"]
        print(f"\n  drop 20% on leaf2->node04: loss {st.loss:.3f} over {n} probes, nft dropped "
              f"{dropped}", file=sys.stderr)
        self.assertAlmostEqual(st.loss, 0.20, delta=0.04)
        self.assertLessEqual(abs(dropped - (st.sent - st.received)), 2)
        clean = self.fab.udp_probe("node01", "node04", UDP, count=200, sport=44001, rate_pps=4000)
        self.assertEqual(clean.received, 200)

    def test_drop_on_a_host_uplink(self):
        # Only node01 -> leaf1 drops (the leaf's prerouting hook); the echo back is untouched.
        with self.fab.drop("leaf1~node01", 50, toward="leaf1"):
            st = self.fab.udp_probe("node01", "node02", UDP, count=600, sport=44200, rate_pps=4000,
                                    timeout=0.3)
        self.assertAlmostEqual(st.loss, 0.50, delta=0.08)

    def test_daemons_run_in_their_namespaces_with_design_flags(self):
        with tempfile.TemporaryDirectory() as d:
            fake = os.path.join(d, "fake-daemon")
            with open(fake, "w") as f:  # records where it runs and with which flags
                f.write(f"#!{sys.executable}\nimport json, os, sys, time\n"
                        "print(json.dumps({'argv': sys.argv[1:], 'netns': os.readlink("
                        "'/proc/self/ns/net')}), flush=True)\ntime.sleep(30)\n")
            os.chmod(fake, 0o755)
            agg = self.fab.start_aggregator(fake)
            agents = self.fab.start_agents(fake, hosts=["node02", "node05"])
            time.sleep(0.5)
            seen = {p.node: json.loads(p.log().splitlines()[0]) for p in [agg, *agents.values()]}
            for p in [agg, *agents.values()]:
                self.fab.stop(p)
        self.assertIn("--fabric-map", seen["mgmt"]["argv"])
        self.assertIn(f"{self.fab.mgmt_address}:9750", seen["mgmt"]["argv"])
        a = seen["node05"]["argv"]
        self.assertEqual(a[a.index("--aggregator") + 1], f"{self.fab.mgmt_address}:9750")
        self.assertEqual(a[a.index("--probe-address") + 1], self.fab.hosts["node05"].address)
        self.assertEqual(len({v["netns"] for v in seen.values()}), 3)  # three namespaces
        own = os.readlink("/proc/self/ns/net")
        self.assertNotIn(own, {v["netns"] for v in seen.values()})

    def test_drop_on_a_switch(self):
        # node01 -> node02 crosses leaf1 twice (request and echo): loss = 1 - 0.8^2 = 0.36.
        n = 2000
        with self.fab.drop("leaf1", 20):
            st = self.fab.udp_probe("node01", "node02", UDP, count=n, sport=44100, rate_pps=4000,
                                    timeout=0.3)
        print(f"\n  drop 20% on switch leaf1: round-trip loss {st.loss:.3f} (expect 0.36)",
              file=sys.stderr)
        self.assertAlmostEqual(st.loss, 0.36, delta=0.04)

    def test_link_down_fails_or_reroutes_and_link_up_restores(self):
        sports = list(range(45000, 45032))
        with self.fab.link_down("leaf1~spine1"):
            self.assertEqual(set(self.fab.link_state("leaf1~spine1").values()), {"DOWN"})
            expect_ok = set()
            for sp in sports:
                fwd, fwd_ok = self.fab.path_of("node01", "node04", "udp", sp, UDP)
                self.assertTrue(fwd_ok)
                self.assertNotIn("spine1", fwd)  # leaf1 rerouted its uplink traffic
                back, back_ok = self.fab.path_of("node04", "node01", "udp", UDP, sp)
                if back_ok:
                    expect_ok.add(sp)
                else:
                    self.assertEqual(back[:3], ["node04", "leaf2", "spine1"])  # blackholed there
            res = self.fab.udp_flows("node01", "node04", UDP, sports, count=2, timeout=0.3)
            ok = {sp for sp, st in res.items() if st.received == 2}
            failed = {sp for sp, st in res.items() if st.received == 0}
            self.assertEqual(ok, expect_ok)
            self.assertEqual(ok | failed, set(sports))
            self.assertTrue(ok and failed, f"expected both outcomes, ok={len(ok)}")
        self.assertEqual(set(self.fab.link_state("leaf1~spine1").values()), {"UP"})
        before = spine_rx(self.fab, "leaf1")
        res = self.fab.udp_flows("node01", "node04", UDP, sports, count=2)
        self.assertEqual(sum(st.received for st in res.values()), 2 * len(sports))
        self.assertGreater(spine_rx(self.fab, "leaf1")["spine1"], before["spine1"])

    def test_flap_toggles_and_ends_up(self):
        seen = set()
        bg = self.fab.flap("leaf1~spine2", period=0.3, count=3)
        deadline = time.monotonic() + 10
        while not bg.done and time.monotonic() < deadline:
            seen.add(self.fab.link_state("leaf1~spine2")["leaf1"])
            time.sleep(0.03)
        self.assertEqual(bg.wait(5), {"cycles": 3})
        self.assertEqual(seen, {"UP", "DOWN"})
        self.assertEqual(set(self.fab.link_state("leaf1~spine2").values()), {"UP"})
        sports = self.sports_via("node01", "node04", "spine2", "udp", UDP, 8, 46000)
        res = self.fab.udp_flows("node01", "node04", UDP, sports, count=2)
        self.assertEqual(sum(st.received for st in res.values()), 16)

    def test_congestion_through_a_shaped_link(self):
        hot = self.sports_via("node01", "node04", "spine1", "udp", UDP, 4, 47000)
        cold = self.sports_via("node01", "node04", "spine2", "udp", UDP, 4, 47000)
        bg = self.fab.congest("leaf1~spine1", "40mbit", seconds=3, toward="spine1", shape="20mbit")
        time.sleep(0.7)
        res = self.fab.udp_flows("node01", "node04", UDP, hot + cold, count=10, rate_pps=80,
                                 timeout=0.5)
        out = bg.wait(20)
        hot_rtt = statistics.median(r for sp in hot for r in res[sp].rtts_s)
        cold_rtt = statistics.median(r for sp in cold for r in res[sp].rtts_s)
        sink_bps = out["sink"]["rate_bps"]
        print(f"\n  congestion 40mbit into tbf 20mbit: median RTT hot {hot_rtt * 1e3:.1f} ms, "
              f"cold {cold_rtt * 1e3:.2f} ms; sink {sink_bps / 1e6:.1f} Mbit/s; blaster "
              f"{out['blaster']}", file=sys.stderr)
        self.assertGreater(hot_rtt, 0.010)
        self.assertLess(cold_rtt, 0.005)
        self.assertGreater(sink_bps, 0.8 * 20e6)
        self.assertLess(sink_bps, 1.1 * 20e6)
        self.assertGreater(out["blaster"]["sent_bytes"] * 8 / 3, 0.8 * 40e6)
        self.assertEqual(self.fab.exec("leaf1", ["tc", "qdisc", "show", "dev", "spine1"])
                         .stdout.split()[1], "noqueue")  # the shaping went with it

    def test_mgmt_channel_survives_fabric_faults(self):
        agg = self.fab.spawn("mgmt", [sys.executable, fabric.TRAFFIC_PY, "serve", "--udp-port",
                                      9750, "--seconds", 60], name="fake-aggregator")
        self.fab._wait_ready(agg)
        with self.fab.link_down("leaf1~node01"):
            cut = self.fab.udp_probe("node01", "node04", UDP, count=3, timeout=0.2)
            self.assertEqual((cut.sent, cut.received), (3, 0))
            self.assertIn("ENETUNREACH", cut.errors)
            st = self.fab.udp_probe("node01", self.fab.mgmt_address, 9750, count=3)
            self.assertEqual(st.received, 3)
        self.assertEqual(self.fab.udp_probe("node01", "node04", UDP, count=3).received, 3)
        self.fab.stop(agg)

    def test_http_from_a_namespace(self):
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "healthz"), "w") as f:
                f.write("ok")
            srv = self.fab.spawn("mgmt", [sys.executable, "-m", "http.server", "--bind",
                                          self.fab.mgmt_address, "--directory", d, "9751"])
            url = f"http://{self.fab.mgmt_address}:9751/healthz"
            deadline = time.monotonic() + 10
            while True:
                try:
                    got = self.fab.http_get("node03", url)
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.1)
            self.fab.stop(srv)
        self.assertEqual(got, (200, "ok"))

    def test_spawned_processes_are_tracked_and_stopped_by_pid(self):
        p = self.fab.spawn("node05", ["sleep", "30"])
        time.sleep(0.1)
        self.assertIn(p.pid, netns.namespace_pids(self.fab.hosts["node05"].ns))
        self.assertIn(p, self.fab.processes())
        self.assertEqual(self.fab.stop(p), -signal.SIGTERM)
        self.assertFalse(p.running())
        self.assertNotIn(p, self.fab.processes())

    def test_bad_fault_arguments(self):
        for call in (lambda: self.fab.drop("leaf1~spine9", 5), lambda: self.fab.drop("leaf1", 101),
                     lambda: self.fab.drop("leaf1~spine1", 5, toward="node01"),
                     lambda: self.fab.limit_bandwidth("leaf1~spine1", "fast"),
                     lambda: self.fab.limit_bandwidth("leaf1~spine1", "10mbit", latency="1y"),
                     lambda: self.fab.flap("leaf1~spine1", period=0.001),
                     lambda: self.fab.congest("leaf1~spine1", "1mbit", seconds=10000),
                     lambda: self.fab.spawn("nosuch", ["true"])):
            with self.assertRaises(fabric.FabricError):
                call()


class TeardownTest(unittest.TestCase):
    """Namespaces and processes go away on every path."""

    def test_exception_inside_with(self):
        holder = {}
        with self.assertRaises(RuntimeError):
            with fabric.Fabric(1, 1, 2) as fab:
                holder["prefix"], holder["proc"] = fab.prefix, fab.spawn("node01", ["sleep", "30"])
                self.assertEqual(len(netns.list_namespaces(fab.prefix)), 5)  # leaf, spine, 2, mgmt
                raise RuntimeError("test failure inside the fabric")
        self.assertEqual(netns.list_namespaces(holder["prefix"]), [])
        self.assertFalse(holder["proc"].running())

    def start_cli(self, prefix, d):
        mp = os.path.join(d, "map.yaml")
        p = subprocess.Popen([sys.executable, FABRIC_PY, "up", "--spines", "1", "--leaves", "1",
                              "--hosts", "1", "--prefix", prefix, "--seconds", "60", "--map", mp],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.addCleanup(p.stderr.close)
        self.addCleanup(p.stdout.close)
        line = p.stderr.readline()  # "ready ..." once built
        self.assertTrue(line.startswith("ready"), line + p.stderr.read() if p.poll() else line)
        self.assertEqual(len(netns.list_namespaces(prefix)), 4)
        with open(mp) as f:
            self.assertIn("hosts:", f.read())
        return p

    def test_cli_down_signals_up_which_tears_down(self):
        prefix = f"fwt{os.getpid()}a-"
        with tempfile.TemporaryDirectory() as d:
            p = self.start_cli(prefix, d)
            try:
                down = subprocess.run([sys.executable, FABRIC_PY, "down", "--prefix", prefix],
                                      capture_output=True, text=True, timeout=30)
                self.assertEqual(down.returncode, 0, down.stderr)
                self.assertEqual(p.wait(timeout=10), 0)
            finally:
                if p.poll() is None:
                    netns.terminate_pid(p.pid, popen=p)
                netns.cleanup_prefix(prefix)
        self.assertEqual(netns.list_namespaces(prefix), [])

    def test_cli_sigkill_leaves_namespaces_that_cleanup_removes(self):
        prefix = f"fwt{os.getpid()}b-"
        with tempfile.TemporaryDirectory() as d:
            p = self.start_cli(prefix, d)
            os.kill(p.pid, signal.SIGKILL)
            p.wait(timeout=10)
            try:
                self.assertEqual(len(netns.list_namespaces(prefix)), 4)
                cp = subprocess.run([sys.executable, FABRIC_PY, "cleanup", "--prefix", prefix],
                                    capture_output=True, text=True, timeout=30)
                self.assertEqual(cp.returncode, 0, cp.stderr)
                self.assertFalse([d for d in os.listdir(tempfile.gettempdir())
                                  if d.startswith(prefix + "logs-")])
            finally:
                netns.cleanup_prefix(prefix)
                try:
                    os.unlink(fabric_cli._state_path(prefix))
                except OSError:
                    pass
        self.assertEqual(netns.list_namespaces(prefix), [])


if __name__ == "__main__":
    needs_root = not any(a == "SpecTest" or a.startswith("SpecTest.") for a in sys.argv[1:])
    if needs_root:
        try:
            netns.check_privileges()
        except fabric.NeedRoot as e:
            print(f"SKIP: {e}", file=sys.stderr)
            sys.exit(77)
    unittest.main()
