"""Shared plumbing of the fabric end-to-end tests: the real daemons on the namespace fabric.

    run = fwe2e.DaemonFabric(spines=2, leaves=2, hosts_per_leaf=3)   # a context manager
    with run:                        # builds the fabric, starts the aggregator and one agent per host
        run.wait_connected()         # every agent connected (GET /api/v1/nodes)
        run.pairs()                  # GET /api/v1/pairs as a list of dicts
        run.crossing_flows(pair, [("leaf1", "spine1")])   # src ports whose round trip crosses it

Binaries come from FW_AGGREGATOR_BIN / FW_AGENT_BIN (ctest sets them), or FW_BUILD_DIR/daemon/....
Without root, main() exits 77 (ctest SKIP). Everything the fabric created is deleted on every path
(fabric.Fabric tears down on exceptions, atexit and SIGTERM).
"""

import json
import math
import os
import subprocess
import sys
import threading
import time
import unittest
import urllib.error

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE_DIR = os.environ.get("FW_SOURCE_DIR") or os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(SOURCE_DIR, "tests", "fabric"))
import fabric  # noqa: E402
import netns  # noqa: E402

SKIP = 77
PROBE_PORT = 9753
GRPC_PORT, HTTP_PORT, AGENT_HTTP_PORT = 9750, 9751, 9752
WINDOWS = ("10s", "60s", "600s")
TESTDATA = os.environ.get("FW_TESTDATA") or os.path.join(SOURCE_DIR, "tests", "testdata")
HWLOC_XML = os.path.join(TESTDATA, "hwloc", "psmgmt-topo.jrc0386.xml")
SYSFS_ROOT = os.path.join(TESTDATA, "sysfs", "gpud-h100")


class Skip(Exception):
    """The test cannot run here (no root, a missing endpoint); main() exits 77."""


def binary(env_name, rel):
    """The daemon binary from env_name, or FW_BUILD_DIR/rel; raises when it is not executable."""
    path = os.environ.get(env_name)
    if not path and os.environ.get("FW_BUILD_DIR"):
        path = os.path.join(os.environ["FW_BUILD_DIR"], rel)
    if not path:
        raise RuntimeError(f"set {env_name} (ctest does) or FW_BUILD_DIR to the build directory")
    if not os.access(path, os.X_OK):
        raise RuntimeError(f"{env_name}: {path} is not an executable file; build it first")
    return path


def aggregator_bin():
    return binary("FW_AGGREGATOR_BIN", "daemon/aggregator/fabricwatch-aggregator")


def agent_bin():
    return binary("FW_AGENT_BIN", "daemon/agent/fabricwatch-agent")


def help_text(path):
    """`path --help` (stdout and stderr); used to see which optional flags a build has."""
    cp = subprocess.run([path, "--help"], capture_output=True, text=True, timeout=30, check=False)
    return cp.stdout + cp.stderr


def flows_for_coverage(paths, coverage=0.99):
    """The planner's coupon-collector bound (docs/planner.md): the smallest k with
    S*(1-1/S)^k <= 1 - coverage, so k flows hashed uniformly hit every one of S paths with
    probability >= coverage."""
    if paths <= 1:
        return 1
    k = 1
    while paths * (1 - 1 / paths) ** k > 1 - coverage:
        k += 1
    return k


def wait_for(what, fn, timeout, interval=1.0):
    """Calls fn until it returns a truthy value; returns it, or raises AssertionError naming `what`
    and the last value seen when timeout seconds pass."""
    deadline = time.monotonic() + timeout
    last = None
    while True:
        last = fn()
        if last and not isinstance(last, Pending):
            return last
        if time.monotonic() >= deadline:
            detail = last.why if isinstance(last, Pending) else repr(last)[:600]
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}: {detail}")
        time.sleep(interval)


class Pending:
    """A falsy 'not yet' that says why, for wait_for's timeout message."""

    def __init__(self, why):
        self.why = why

    def __bool__(self):
        return False


class DaemonFabric:
    """A namespace fabric running the real aggregator (in mgmt) and one real agent per host."""

    def __init__(self, spines=2, leaves=2, hosts_per_leaf=3, aggregator_args=(), agent_args=(),
                 routing="ecmp", access_rate=None, rails=1):
        if routing not in ("ecmp", "deterministic"):
            raise ValueError(f"routing must be ecmp or deterministic, got {routing!r}")
        self.fab = fabric.Fabric(spines=spines, leaves=leaves, hosts_per_leaf=hosts_per_leaf,
                                 rails=rails)
        self.routing = routing
        # A line rate for every host link (tbf, both directions), e.g. "1gbit". Unshaped veth
        # moves as many bits as the CPU can copy, so on a shared 2-core machine a bandwidth burst
        # measures CPU contention (2x swings between bursts), not the fabric. With a line rate
        # bursts measure the link, as on real NICs, and a slower fabric link stands out.
        self.access_rate = access_rate
        self.pinning = None
        # FW_E2E_AGGREGATOR_ARGS (split on spaces) is appended to every test's aggregator flags,
        # e.g. "--log-level=debug" for the analyzer's per-tick timeline; with
        # FW_FABRIC_KEEP_LOGS=1 the logs stay in the fabric's log_dir after the test.
        self.aggregator_args = list(aggregator_args) + \
            os.environ.get("FW_E2E_AGGREGATOR_ARGS", "").split()
        self.agent_args = list(agent_args)
        if rails > 1:
            # Every fabric NIC probes: eth0 on rail 1, eth1 on rail 2 (docs/probes.md).
            self.agent_args += ["--probe-nics", ",".join(f"eth{r}" for r in range(rails))]
        self.agg = None
        self.agents = {}
        self.base = f"http://{fabric.MGMT_GATEWAY}:{HTTP_PORT}"
        self._path_cache = {}

    # -------------------------------------------------------------- lifecycle

    def __enter__(self):
        agg_bin, ag_bin = aggregator_bin(), agent_bin()
        self.fab.up()
        try:
            if self.access_rate:
                for lk in self.fab.links.values():
                    if lk.kind == "host":
                        self.fab.limit_bandwidth(lk.id, self.access_rate, latency="5ms")
            self._start(agg_bin, ag_bin)
        except BaseException:
            self.dump_logs()
            self.fab.close()
            raise
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is not None and not issubclass(exc_type, unittest.SkipTest):
            self.dump_logs()
        if self.pinning:
            self.pinning.stop_keeper()
        self.fab.__exit__(exc_type, exc, tb)

    def _start(self, agg_bin, ag_bin):
        fab = self.fab
        state = os.path.join(fab.log_dir, "state")
        os.makedirs(state, exist_ok=True)
        map_path = os.path.join(fab.log_dir, "fabric-map.yaml")
        text = fab.map_yaml()
        if self.routing == "deterministic":
            if "routing: ecmp\n" not in text:
                raise AssertionError(f"the harness map has no 'routing: ecmp' line:\n{text}")
            text = text.replace("routing: ecmp\n", "routing: deterministic\n")
            self.pinning = FlowPinning(fab)
            self.pinning.install()
            self.agent_args += ["--probe-source-port-base", str(FlowPinning.PORT_BASE)]
        with open(map_path, "w") as f:
            f.write(text)
        self.agg = fab.start_aggregator(
            agg_bin, grpc_port=GRPC_PORT, http_port=HTTP_PORT, map_path=map_path,
            args=["--state-dir", state, "--tick", "1s", "--heartbeat-timeout", "5s",
                  "--port-file", os.path.join(fab.log_dir, "aggregator.ports")]
            + self.aggregator_args)
        wait_for("the aggregator's /readyz", self._ready, timeout=20, interval=0.2)
        for name in fab.hosts:
            self.agents[name] = fab.start_agents(
                ag_bin, grpc_port=GRPC_PORT, probe_port=PROBE_PORT, http_port=AGENT_HTTP_PORT,
                hosts=[name],
                args=["--sysfs-root", SYSFS_ROOT, "--hwloc-xml", HWLOC_XML,
                      "--port-file", os.path.join(fab.log_dir, f"{name}.ports")]
                + self.agent_args)[name]

    def _ready(self):
        if not self.agg.running():
            raise AssertionError(f"the aggregator exited:\n{self.agg.log()[-3000:]}")
        try:
            status, _ = self.fab.http_get("mgmt", self.base + "/readyz", timeout=2)
        except (OSError, urllib.error.URLError) as e:
            return Pending(str(e))
        return status == 200 or Pending(f"/readyz answered {status}")

    def dump_logs(self, tail=2500):
        """Prints the end of every daemon log to stderr (on failures)."""
        procs = ([self.agg] if self.agg else []) + list(self.agents.values())
        for p in procs:
            try:
                text = p.log()
            except OSError as e:
                text = f"(log unreadable: {e})"
            print(f"----- {p.node} {os.path.basename(p.argv[0]) if p.argv else ''} "
                  f"(running={p.running()}) -----\n{text[-tail:]}", file=sys.stderr)

    # -------------------------------------------------------------- the aggregator's API

    def get_json(self, path, allow_404=False):
        """GET path on the aggregator from the mgmt namespace; the decoded JSON body.
        With allow_404, a 404 returns None (an endpoint this build does not serve)."""
        status, body = self.fab.http_get("mgmt", self.base + path, timeout=5)
        if status == 404 and allow_404:
            return None
        if status != 200:
            raise AssertionError(f"GET {path} answered {status}: {body[:300]}")
        try:
            return json.loads(body)
        except ValueError as e:
            raise AssertionError(f"GET {path}: not JSON ({e}): {body[:300]}") from None

    def nodes(self):
        return self.get_json("/api/v1/nodes")

    def pairs(self, transport="udp"):
        rows = self.get_json("/api/v1/pairs?limit=100000")
        return [r for r in rows if transport is None or r.get("transport") == transport]

    def metrics(self):
        status, body = self.fab.http_get("mgmt", self.base + "/metrics", timeout=5)
        if status != 200:
            raise AssertionError(f"GET /metrics answered {status}")
        return body

    def check_daemons_running(self):
        for p in [self.agg] + list(self.agents.values()):
            if not p.running():
                raise AssertionError(f"{p.node}: {os.path.basename(p.argv[0])} exited:\n"
                                     f"{p.log()[-3000:]}")

    def wait_connected(self, timeout=30):
        want = set(self.fab.hosts)

        def all_connected():
            self.check_daemons_running()
            up = {n["name"] for n in self.nodes() if n.get("connected")}
            return up >= want or Pending(f"connected {sorted(up)}, missing {sorted(want - up)}")

        return wait_for("every agent to connect", all_connected, timeout)

    # -------------------------------------------------------------- the plan we expect

    def leaf_of(self, node):
        return self.fab.hosts[node].leaf

    def expected_intra_pairs(self):
        """Ordered pairs of distinct hosts on one leaf: the planner's full mesh."""
        hs = self.fab.hosts
        return {(a, b) for a in hs for b in hs if a != b and hs[a].leaf == hs[b].leaf}

    def inter_leaf_flows(self):
        """The flows the planner gives each ordered leaf pair (one spine hop: S equal-cost paths)."""
        return flows_for_coverage(self.fab.spines)

    # -------------------------------------------------------------- paths of probe flows

    def _path(self, src, dst, sport, dport):
        key = (src, dst, sport, dport)
        if key not in self._path_cache:
            nodes, reached = self.fab.path_of(src, dst, "udp", sport, dport)
            if not reached:
                raise AssertionError(f"udp {src}:{sport} -> {dst}:{dport} does not arrive: {nodes}")
            self._path_cache[key] = nodes
        return self._path_cache[key]

    def round_trip(self, src, dst, sport):
        """(request path, reply path) of a latency probe flow: the prober's source port to the
        responder's probe port, and the echo back."""
        return self._path(src, dst, sport, PROBE_PORT), self._path(dst, src, PROBE_PORT, sport)

    def crossing_flows(self, pair, hops):
        """The source ports of pair's flows whose request or reply crosses any directed hop
        (x, y) in hops, i.e. leaves x toward y."""
        out = []
        for f in pair["flows"]:
            sport = f["src_port"]
            req, rep = self.round_trip(pair["src"], pair["dst"], sport)
            steps = set(zip(req, req[1:])) | set(zip(rep, rep[1:]))
            if steps & set(hops):
                out.append(sport)
        return out


class FlowPinning:
    """Makes the fabric follow the analyzer's convention for `routing: deterministic` maps (flow i
    of a pair takes equal-cost path i mod n, paths in the map's sorted order; see
    daemon/aggregator/analysis/flow_table.h DeterministicPath), so that findings can name a link.

    With the ECMP 5-tuple hash nobody outside the kernel knows which uplink a flow takes, so every
    leaf uplink of a leaf carries the same candidate flows and no end-to-end evidence can tell
    them apart. Here the agents run with --probe-source-port-base PORT_BASE (flow j to every peer
    uses source port PORT_BASE + j), each leaf marks probe packets that leave the leaf in
    prerouting (nftables), and a policy rule per mark looks up a table whose only route goes to
    one spine:
      UDP to the probe port: by the source port, flow j -> spine (j mod S) + 1, and the echo by
        its destination port the same way (PORT_BASE is a multiple of S);
      TCP to or from the probe port (connect probes and bandwidth bursts, reported as flow 0 from
        ephemeral ports): spine1.
    The flow id inside the probe header cannot be used: on the wire it is the agent's index over
    all its flows (probes/net/udp_prober.cc), not the per-peer flow id the results report.
    Requests and echoes take the same spine, as the map's undirected links assume. Other traffic
    (the fault helpers' load) still follows the ECMP hash. A downed link flushes its table route;
    refresh() puts it back once the link is up again, and the keeper thread does so while a flap
    loop runs.
    """

    PORT_BASE = 40000
    MARK_BASE = 100  # mark and table 101 = spine1, 102 = spine2, ...

    def __init__(self, fab):
        if fab.spines not in (1, 2, 4, 8):
            raise ValueError(f"flow pinning needs a power of two spines (the source port's low "
                             f"bits pick one), got {fab.spines}")
        self.fab = fab
        self._stop = None
        self._thread = None

    def _leaves(self):
        return [s for s in self.fab.switches.values() if s.tier == "leaf"]

    def _routes(self, leaf):
        lines = []
        for si in range(1, self.fab.spines + 1):
            lk = self.fab.link(f"{leaf.name}~spine{si}")
            spine = lk.ends[f"spine{si}"]
            lines.append(f"route replace {fabric.FABRIC_NET} via {spine.address} "
                         f"dev {lk.ends[leaf.name].dev} table {self.MARK_BASE + si}")
        return lines

    def install(self):
        for leaf in self._leaves():
            rules = [f"ip daddr 198.18.{leaf.index}.0/24 return"]
            mask = self.fab.spines - 1
            for field, other in (("dport", "sport"), ("sport", "dport")):
                for v in range(self.fab.spines):
                    rules.append(f"udp {field} {PROBE_PORT} udp {other} & {mask:#x} == {v:#x} "
                                 f"meta mark set {self.MARK_BASE + 1 + v}")
                rules.append(f"tcp {field} {PROBE_PORT} meta mark set {self.MARK_BASE + 1}")
            text = ["table ip fwpin {", "  chain c_prerouting {",
                    "    type filter hook prerouting priority -150; policy accept;"]
            text += [f"    {r}" for r in rules] + ["  }", "}"]
            netns.sh(["ip", "netns", "exec", leaf.ns, "nft", "-f", "-"],
                     input="\n".join(text) + "\n")
            lines = [f"rule add fwmark {self.MARK_BASE + si} lookup {self.MARK_BASE + si} "
                     f"pref {1000 + si}" for si in range(1, self.fab.spines + 1)]
            netns.ip_batch(lines + self._routes(leaf), ns=leaf.ns)

    def refresh(self):
        """Re-adds the pinned routes the kernel flushed with a downed link (those whose link is
        still down fail, and stay away until it is up)."""
        for leaf in self._leaves():
            netns.ip_batch(self._routes(leaf), ns=leaf.ns, force=True)

    def start_keeper(self, period=0.25, max_seconds=600):
        """Refreshes the routes every `period` s (bounded) in the background, for flap loops."""
        self.stop_keeper()
        stop = threading.Event()
        deadline = time.monotonic() + max_seconds

        def loop():
            while not stop.wait(period) and time.monotonic() < deadline and not self.fab.closed:
                try:
                    self.refresh()
                except fabric.FabricError:
                    return

        self._stop, self._thread = stop, threading.Thread(target=loop, daemon=True,
                                                          name="route keeper")
        self._thread.start()

    def stop_keeper(self):
        if self._thread:
            self._stop.set()
            self._thread.join(10)
            self._thread = None

    def spine_of(self, flow_id):
        return f"spine{flow_id % self.fab.spines + 1}"


def window(pair, name="10s"):
    return pair["windows"][name]


def fmt_ms(seconds):
    return "null" if seconds is None or (isinstance(seconds, float) and math.isnan(seconds)) \
        else f"{seconds * 1e3:.3f} ms"


def pair_name(p):
    return f"{p['src']}->{p['dst']}"


def main():
    """unittest.main(), with exit 77 when the fabric cannot be built here (no root)."""
    try:
        netns.check_privileges()
    except fabric.NeedRoot as e:
        print(f"SKIP: {e}", file=sys.stderr)
        sys.exit(SKIP)
    prog = unittest.main(exit=False)
    result = prog.result
    if not result.wasSuccessful():
        sys.exit(1)
    if result.testsRun and len(result.skipped) == result.testsRun:
        sys.exit(SKIP)  # every test skipped itself: report SKIP, not a pass
    sys.exit(0)
