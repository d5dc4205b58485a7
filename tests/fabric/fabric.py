#!/usr/bin/env python3
"""A leaf-spine test fabric built from Linux network namespaces (Python 3 stdlib, needs root).

API (put tests/fabric on sys.path, then `import fabric`):

    with fabric.Fabric(spines=2, leaves=2, hosts_per_leaf=3) as fab:   # builds; always tears down
        fab.prefix                      # unique per run, e.g. "fw4242-"; every namespace starts with it
        fab.hosts["node01"]             # Host(name, ns, address, nic, leaf, mgmt_address)
        fab.write_map("map.yaml")       # the DESIGN.md fabric map of this topology
        agg = fab.spawn("mgmt", ["fabricwatch-aggregator", "--grpc-listen", f"{fab.mgmt_address}:9750",
                                 "--insecure"])
        fab.spawn("node01", ["fabricwatch-agent", "--aggregator", f"{fab.mgmt_address}:9750",
                             "--insecure"])
        fab.start_aggregator(agg_bin); fab.start_agents(agent_bin)    # the same, DESIGN.md flags
        fab.stop(agg)                   # by PID: SIGTERM, then SIGKILL (teardown stops the rest)
        fab.start_responder("node04")   # UDP echo + TCP byte counter on ports 7007/7008
        fab.udp_flows("node01", "node04", 7007, sports=range(40000, 40032))   # {sport: FlowStats}
        fab.tcp_goodput("node01", "node04", 7008, 4 << 20, sport=41000)      # {"bps": ...}
        fab.path_of("node01", "node04", "udp", 40000, 7007)  # (["node01","leaf1","spine2",...], True)
        fab.counters("spine1")          # {dev: {"rx_packets", "tx_packets", "rx_bytes", ...}}
        fab.http_get("mgmt", "http://198.19.255.1:9751/api/v1/pairs")
        with fab.limit_bandwidth("leaf1~spine1", "50mbit"):          # tbf; each fault has .undo()
            ...
        fault = fab.drop("leaf1~spine1", 20.0, toward="spine1")      # or fab.drop("spine1", 5.0)
        fab.link_down("leaf1~spine2"); fab.link_up("leaf1~spine2")
        fab.flap("leaf1~spine2", period=1.0, count=5).wait()         # background, bounded
        fab.congest("leaf1~spine1", "40mbit", seconds=3, shape="20mbit").wait()

Addresses (all inside the namespaces; the root namespace gets no route to any of them):
  host k of leaf L       198.18.L.(k+1)/32, gateway 198.18.L.1 (every leaf port holds it)
  spine S -- leaf L      198.18.(127+S).(2L) on the spine, 198.18.(127+S).(2L+1) on the leaf (/31)
  management             bridge in namespace <prefix>mgmt, 198.19.255.1/24; host n has
                         198.19.255.(n+1) on its mgmt0, which never crosses a fabric switch
CLI: fabric.py up|down|cleanup|list|exec (see --help; fabric_cli.py). Faults live in faults.py,
bounded traffic tools in traffic.py, namespaces and processes in netns.py; docs/test-fabric.md.
"""

import atexit
import json
import os
import re
import shutil
import signal
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import netns  # noqa: E402
import traffic  # noqa: E402
from faults import TRAFFIC_PY, Background, Fault, FaultsMixin, parse_rate  # noqa: E402,F401
from netns import FabricError, NeedRoot  # noqa: E402,F401

FABRIC_NET = "198.18.0.0/16"
MGMT_GATEWAY = "198.19.255.1"
# Rail r's first two address octets and the prefix its hosts route over it (rails=2: rail 2 uses
# 198.19.0.0/17, below the management /24 at 198.19.255.0).
RAIL_BASE = {1: "198.18", 2: "198.19"}
RAIL_NET = {1: FABRIC_NET, 2: "198.19.0.0/17"}


def rail_switch(rail, name):
    """A switch's name on `rail`: rail 1 keeps leaf1/spine1, rail 2 is r2leaf1/r2spine1."""
    return name if rail == 1 else f"r{rail}{name}"


class HostNic:
    """One fabric NIC of a host: eth(rail-1) on its rail's leaf."""

    def __init__(self, nic, rail, address, gateway, leaf):
        self.nic, self.rail, self.address, self.gateway, self.leaf = nic, rail, address, gateway, leaf

    def __repr__(self):
        return f"HostNic({self.nic}, rail={self.rail}, address={self.address}, leaf={self.leaf})"


class Host:
    def __init__(self, name, ns, leaf, leaf_index, index, address, gateway, mgmt_address):
        self.name, self.ns, self.leaf = name, ns, leaf
        self.leaf_index, self.index = leaf_index, index
        self.address, self.gateway, self.mgmt_address = address, gateway, mgmt_address
        self.nic = "eth0"
        self.nics = []  # HostNic per rail, rail 1 (eth0, address, leaf) first

    def __repr__(self):
        return f"Host({self.name}, ns={self.ns}, address={self.address}, leaf={self.leaf})"


class Switch:
    def __init__(self, name, ns, tier, index, rail=1):
        self.name, self.ns, self.tier, self.index, self.rail = name, ns, tier, index, rail

    def __repr__(self):
        return f"Switch({self.name}, tier={self.tier}, ns={self.ns})"


class End:
    """One end of a cable: the node, its namespace, the device there and its address."""

    def __init__(self, node, ns, dev, address):
        self.node, self.ns, self.dev, self.address = node, ns, dev, address


class Link:
    """A veth pair. id is "a~b" with a < b; kind is "fabric" (switch-switch) or "host"."""

    def __init__(self, end1, end2, kind):
        e = sorted([end1, end2], key=lambda x: x.node)
        self.a, self.b = e[0].node, e[1].node
        self.id = f"{self.a}~{self.b}"
        self.kind = kind
        self.ends = {e[0].node: e[0], e[1].node: e[1]}

    def other(self, node):
        return self.b if node == self.a else self.a

    def __repr__(self):
        return f"Link({self.id})"

class Fabric(FaultsMixin):
    """A leaf-spine fabric of network namespaces. Nothing exists until up() (or `with`)."""

    _instances = 0

    def __init__(self, spines=2, leaves=2, hosts_per_leaf=3, prefix=None, log_dir=None,
                 handle_signals=True, rails=1):
        for what, value, top in (("spines", spines, 128 if rails == 1 else 127),
                                 ("leaves", leaves, 127), ("hosts_per_leaf", hosts_per_leaf, 253),
                                 ("rails", rails, 2)):
            if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= top:
                raise FabricError(f"{what} must be an integer in 1..{top}, got {value!r}")
        if leaves * hosts_per_leaf > 253:
            raise FabricError(f"{leaves * hosts_per_leaf} hosts do not fit the /24 management "
                              "subnet; at most 253 hosts in all")
        if prefix is not None and not netns.PREFIX_RE.match(prefix):
            raise FabricError(f"bad prefix {prefix!r}: 2-40 letters, digits, '_' or '.', then '-'")
        self.spines, self.leaves, self.hosts_per_leaf = spines, leaves, hosts_per_leaf
        # rails=2: a second, separate leaf-spine fabric (r2leaf*, r2spine*); every host has eth1
        # on it, on the leaf of the same number as its eth0's (a rail-optimized fabric).
        self.rails = rails
        self.prefix = prefix
        self.handle_signals = handle_signals
        self._user_log_dir = log_dir
        self.log_dir = None
        self.closed = False
        self._is_up = False
        self._closing = False
        self._created = []
        self._down = set()
        self._lock = threading.RLock()
        self._procs = None
        self._background = []
        self._faults = 0
        self._old_handlers = {}
        self.mgmt_address = MGMT_GATEWAY

    # ------------------------------------------------------------------ topology (pure)

    def _build_topology(self):
        p = self.prefix
        self.mgmt_ns = p + "mgmt"
        self.switches, self.hosts, self.links = {}, {}, {}
        for rail in range(1, self.rails + 1):
            for li in range(1, self.leaves + 1):
                name = rail_switch(rail, f"leaf{li}")
                self.switches[name] = Switch(name, p + name, "leaf", li, rail)
            for si in range(1, self.spines + 1):
                name = rail_switch(rail, f"spine{si}")
                self.switches[name] = Switch(name, p + name, "spine", si, rail)
        n = 0
        for li in range(1, self.leaves + 1):
            for k in range(1, self.hosts_per_leaf + 1):
                n += 1
                name = f"node{n:02d}"
                h = Host(name, p + name, f"leaf{li}", li, n, f"198.18.{li}.{k + 1}",
                         f"198.18.{li}.1", f"198.19.255.{n + 1}")
                self.hosts[name] = h
                for rail in range(1, self.rails + 1):
                    base, leaf = RAIL_BASE[rail], rail_switch(rail, f"leaf{li}")
                    nic = HostNic(f"eth{rail - 1}", rail, f"{base}.{li}.{k + 1}", f"{base}.{li}.1",
                                  leaf)
                    h.nics.append(nic)
                    lk = Link(End(name, h.ns, nic.nic, nic.address),
                              End(leaf, self.switches[leaf].ns, name, nic.gateway), "host")
                    self.links[lk.id] = lk
        for rail in range(1, self.rails + 1):
            base = RAIL_BASE[rail]
            for li in range(1, self.leaves + 1):
                leaf = rail_switch(rail, f"leaf{li}")
                for si in range(1, self.spines + 1):
                    spine = rail_switch(rail, f"spine{si}")
                    lk = Link(End(leaf, self.switches[leaf].ns, spine,
                                  f"{base}.{127 + si}.{2 * li + 1}"),
                              End(spine, self.switches[spine].ns, leaf,
                                  f"{base}.{127 + si}.{2 * li}"),
                              "fabric")
                    self.links[lk.id] = lk

    def ns(self, node):
        """The namespace of a host, a switch or "mgmt"."""
        if node == "mgmt":
            return self.mgmt_ns
        if node in self.hosts:
            return self.hosts[node].ns
        if node in self.switches:
            return self.switches[node].ns
        raise FabricError(f"unknown node {node!r}; nodes are {self._node_names()}")

    def _node_names(self):
        return ", ".join(list(self.switches) + list(self.hosts) + ["mgmt"])

    def link(self, link_id):
        """The Link for "a~b" in either order."""
        parts = str(link_id).split("~")
        if len(parts) == 2:
            key = "~".join(sorted(parts))
            if key in self.links:
                return self.links[key]
        raise FabricError(f"unknown link {link_id!r}; links look like 'leaf1~spine1' or "
                          "'leaf1~node01'")

    def _links_of(self, node):
        return [lk for lk in self.links.values() if node in lk.ends]

    def _address_of(self, target):
        if target in self.hosts:
            return self.hosts[target].address
        if re.fullmatch(r"\d+\.\d+\.\d+\.\d+", str(target)):
            return str(target)
        raise FabricError(f"{target!r} is neither a host name nor an IPv4 address")

    # ------------------------------------------------------------------ lifecycle

    def __enter__(self):
        return self.up()

    def __exit__(self, exc_type, exc, tb):
        try:
            self.close()
        except FabricError as e:
            if exc_type is None:
                raise
            # Keep the error that unwound the `with`; still say what teardown left behind.
            print(f"fabric: teardown after {exc_type.__name__}: {e}", file=sys.stderr)

    def up(self):
        """Creates the namespaces, cables, addresses and routes. Tears down if anything fails."""
        if self._is_up or self.closed:
            raise FabricError("a Fabric can be brought up once")
        netns.check_privileges()
        with self._lock:
            if self.prefix is None:
                self.prefix = self._unique_prefix()
            elif netns.list_namespaces(self.prefix):
                raise FabricError(f"namespaces with prefix {self.prefix} exist already; run "
                                  f"'fabric.py cleanup --prefix {self.prefix}' first")
        self._is_up = True
        atexit.register(self.close)
        self._install_signal_handlers()
        try:
            self._build_topology()
            self.log_dir = self._user_log_dir or tempfile.mkdtemp(prefix=f"{self.prefix}logs-")
            os.makedirs(self.log_dir, exist_ok=True)
            self._procs = netns.ProcessTable(self.log_dir)
            self._create()
        except BaseException:
            self.close()
            raise
        return self

    def _unique_prefix(self):
        Fabric._instances += 1
        n = Fabric._instances
        while True:
            p = f"fw{os.getpid()}-" if n == 1 else f"fw{os.getpid()}x{n}-"
            if not netns.list_namespaces(p):
                return p
            n += 1
            Fabric._instances = n

    def _create(self):
        names = [s.ns for s in self.switches.values()] + [h.ns for h in self.hosts.values()]
        names.append(self.mgmt_ns)
        self._created = list(names)
        netns.add_namespaces(names)
        common = ["net.ipv6.conf.all.disable_ipv6=1", "net.ipv6.conf.default.disable_ipv6=1",
                  "net.ipv4.conf.all.rp_filter=0", "net.ipv4.conf.default.rp_filter=0"]
        # Switches answer TTL expiry (ICMP time exceeded), as Linux routers do, without the
        # kernel's ICMP rate limits: 1 answer/s per destination after a burst of 6
        # (icmp_ratelimit) and 1,000/s in all (icmp_msgs_per_sec) would hide hops from path
        # traces that come in bursts (a fresh plan traces every flow).
        switch = ["net.ipv4.ip_forward=1"] + self._hash_sysctls() + [
                  "net.ipv4.conf.all.ignore_routes_with_linkdown=1",
                  "net.ipv4.conf.default.ignore_routes_with_linkdown=1",
                  "net.ipv4.icmp_ratelimit=0", "net.ipv4.icmp_msgs_per_sec=100000",
                  "net.ipv4.icmp_msgs_burst=10000"]
        for n in names:
            extra = switch if any(s.ns == n for s in self.switches.values()) else []
            netns.sh(["ip", "netns", "exec", n, "sysctl", "-q", "-w"] + common + extra)
        cables = []
        for lk in self.links.values():
            x, y = lk.ends[lk.a], lk.ends[lk.b]
            cables.append(f"link add {x.dev} netns {x.ns} type veth peer name {y.dev} netns {y.ns}")
        for h in self.hosts.values():
            cables.append(f"link add mgmt0 netns {h.ns} type veth peer name {h.name} "
                          f"netns {self.mgmt_ns}")
        netns.ip_batch(cables)
        # Addresses and links first everywhere, routes second: a gateway must be reachable.
        mgmt = ["link set lo up", "link add br0 type bridge", "link set br0 up",
                f"address add {MGMT_GATEWAY}/24 dev br0"]
        for h in self.hosts.values():
            mgmt += [f"link set {h.name} master br0", f"link set {h.name} up"]
        netns.ip_batch(mgmt, ns=self.mgmt_ns)
        for node in list(self.switches) + list(self.hosts):
            lines = ["link set lo up"]
            for lk in self._links_of(node):
                e = lk.ends[node]
                plen = 31 if lk.kind == "fabric" else 32
                lines += [f"link set {e.dev} up", f"address add {e.address}/{plen} dev {e.dev}"]
            if node in self.hosts:
                h = self.hosts[node]
                lines += ["link set mgmt0 up", f"address add {h.mgmt_address}/24 dev mgmt0"]
            netns.ip_batch(lines, ns=self.ns(node))
        for node in list(self.switches) + list(self.hosts):
            netns.ip_batch(self._route_lines(node), ns=self.ns(node))

    @staticmethod
    def _hash_sysctls():
        """The ECMP hash: the L4 5-tuple of each packet, as a hardware switch computes it.

        Policy 1 is not that on veth: it reuses skb->hash when the sender's socket set one, and a
        connected UDP or any TCP socket sets a random per-socket txhash that survives the veth
        crossing (TCP even re-rolls it after a timeout). Policy 3 with fields src/dst address,
        protocol, src/dst port (0x37) always dissects the packet, so a 5-tuple keeps its path and
        'ip route get ... sport/dport' predicts it. Kernels before 5.16 fall back to policy 1.
        """
        if os.path.exists("/proc/sys/net/ipv4/fib_multipath_hash_fields"):
            return ["net.ipv4.fib_multipath_hash_policy=3", "net.ipv4.fib_multipath_hash_fields=0x37"]
        return ["net.ipv4.fib_multipath_hash_policy=1"]

    def _route_lines(self, node):
        """'route replace' commands for node, using only the links that are up."""
        up = [lk for lk in self._links_of(node) if lk.id not in self._down]
        if node in self.hosts:
            h = self.hosts[node]
            lines = []
            for nic in h.nics:
                if "~".join(sorted((node, nic.leaf))) in self._down:
                    continue
                lines += [f"route replace {nic.gateway}/32 dev {nic.nic} scope link",
                          f"route replace {RAIL_NET[nic.rail]} via {nic.gateway} dev {nic.nic} "
                          f"src {nic.address}"]
            return lines
        sw = self.switches[node]
        base = RAIL_BASE[sw.rail]
        lines = []
        if sw.tier == "leaf":
            lines.append(f"route replace unreachable {base}.{sw.index}.0/24")
            hops = []
            for lk in up:
                peer = lk.other(node)
                if lk.kind == "host":
                    lines.append(f"route replace {lk.ends[peer].address}/32 dev {peer} scope link "
                                 f"src {lk.ends[node].address}")
                else:
                    hops.append(f"via {lk.ends[peer].address} dev {peer}")
            net = RAIL_NET[sw.rail]
            if len(hops) == 1:
                lines.append(f"route replace {net} {hops[0]}")
            elif hops:
                lines.append(f"route replace {net} " + " ".join(f"nexthop {h}" for h in hops))
        else:
            for lk in up:
                peer = lk.other(node)
                lines.append(f"route replace {base}.{self.switches[peer].index}.0/24 "
                             f"via {lk.ends[peer].address} dev {peer}")
        return lines

    def _install_signal_handlers(self):
        if not self.handle_signals or threading.current_thread() is not threading.main_thread():
            return

        def on_signal(signum, frame):
            if not self._closing:
                raise SystemExit(128 + signum)  # unwinds through `with`; close() runs

        for sig in (signal.SIGTERM, signal.SIGHUP):
            if signal.getsignal(sig) in (signal.SIG_DFL, None):
                self._old_handlers[sig] = signal.signal(sig, on_signal)

    def close(self):
        """Stops background work and processes (by PID) and deletes every namespace of this run.
        Idempotent; runs from `with`, atexit and the SIGTERM/SIGHUP handlers."""
        with self._lock:
            if self.closed or self._closing:
                return
            self._closing = True
        errors = []
        try:
            for bg in list(self._background):
                bg.stop(timeout=15)
            if self._procs:
                self._procs.stop_all()
            left = netns.delete_namespaces(self._created) if self._created else []
            if self.prefix and netns.PREFIX_RE.match(self.prefix):
                _, more = netns.cleanup_prefix(self.prefix, remove_logs=False)
                left = sorted(set(left) | set(more))
            if left:
                errors.append(f"namespaces left behind: {left}; run 'fabric.py cleanup --prefix "
                              f"{self.prefix}'")
            if self.log_dir and not self._user_log_dir and not os.environ.get("FW_FABRIC_KEEP_LOGS"):
                shutil.rmtree(self.log_dir, ignore_errors=True)
        finally:
            self.closed = True
            atexit.unregister(self.close)
            if threading.current_thread() is threading.main_thread():
                for sig, old in self._old_handlers.items():
                    signal.signal(sig, old)
            self._old_handlers = {}
        if errors:
            raise FabricError("; ".join(errors))

    def _require_up(self):
        if not self._is_up or self.closed:
            raise FabricError("the fabric is not up")

    # ------------------------------------------------------------------ map and description

    def switch_addresses(self, name):
        """The addresses switch `name` holds (and answers TTL expiry from), sorted: a leaf's
        host-port gateway and its uplink ends, a spine's downlink ends."""
        seen = {lk.ends[name].address for lk in self._links_of(name)}
        return sorted(seen, key=lambda a: tuple(int(x) for x in a.split(".")))

    def switch_at(self, address):
        """The switch that holds `address`, or None."""
        return next((s for s in self.switches if address in self.switch_addresses(s)), None)

    def map_yaml(self):
        """The fabric map in the DESIGN.md format, with each switch's `addresses` (the addresses
        its ICMP answers to path traces come from)."""
        self._require_up()
        out = [f"# fabric map of test fabric {self.prefix} "
               f"({self.spines} spines, {self.leaves} leaves, {self.hosts_per_leaf} hosts/leaf)",
               "routing: ecmp", "switches:"]
        out += [f"  - {{name: {s.name}, tier: {s.tier}, "
                f"addresses: [{', '.join(self.switch_addresses(s.name))}]}}"
                for s in self.switches.values()]
        out.append("links:")
        out += [f"  - {{a: {lk.a}, b: {lk.b}}}" for lk in self.links.values() if lk.kind == "fabric"]
        out.append("hosts:")
        out += [f"  - {{node: {h.name}, nic: {n.nic}, address: {n.address}, switch: {n.leaf}}}"
                for h in self.hosts.values() for n in h.nics]
        return "\n".join(out) + "\n"

    def write_map(self, path):
        try:
            with open(path, "w") as f:
                f.write(self.map_yaml())
        except OSError as e:
            raise FabricError(f"cannot write fabric map {path}: {e}") from None
        return path

    def describe(self):
        """Plain data: prefix, management address, hosts, switches, links."""
        self._require_up()
        return {
            "prefix": self.prefix,
            "mgmt": {"ns": self.mgmt_ns, "address": self.mgmt_address},
            "hosts": {h.name: {"ns": h.ns, "address": h.address, "nic": h.nic, "leaf": h.leaf,
                               "mgmt_address": h.mgmt_address,
                               "nics": [{"nic": n.nic, "rail": n.rail, "address": n.address,
                                         "leaf": n.leaf} for n in h.nics]}
                      for h in self.hosts.values()},
            "switches": {s.name: {"ns": s.ns, "tier": s.tier,
                                  "addresses": self.switch_addresses(s.name)}
                         for s in self.switches.values()},
            "links": {lk.id: {e.node: {"dev": e.dev, "address": e.address}
                              for e in lk.ends.values()} for lk in self.links.values()},
            "log_dir": self.log_dir,
        }

    # ------------------------------------------------------------------ processes and calls

    def spawn(self, node, argv, env=None, name=None):
        """Starts argv inside node's namespace; its output goes to a log under log_dir."""
        self._require_up()
        return self._procs.spawn(node, self.ns(node), argv, env=env, name=name)

    def stop(self, proc, grace=3.0):
        """Stops a spawned process by PID; returns its exit status."""
        return self._procs.stop(proc, grace=grace)

    def processes(self):
        return self._procs.all() if self._procs else []

    def exec(self, node, argv, timeout=30):
        """Runs argv to completion inside node's namespace; returns the CompletedProcess."""
        self._require_up()
        return netns.sh(["ip", "netns", "exec", self.ns(node)] + [str(a) for a in argv],
                        timeout=timeout, check=False)

    def run_in(self, node, fn, *args, timeout=120, **kwargs):
        """Calls fn on a thread inside node's namespace (sockets it opens live there)."""
        self._require_up()
        return netns.call_in_namespace(self.ns(node), fn, *args, timeout=timeout, **kwargs)

    def start_aggregator(self, binary, grpc_port=9750, http_port=9751, map_path=None, args=()):
        """Starts fabricwatch-aggregator in the management namespace with the DESIGN.md flags,
        listening on the management address, with this fabric's map (written to log_dir)."""
        map_path = map_path or self.write_map(os.path.join(self.log_dir, "fabric-map.yaml"))
        argv = [binary, "--grpc-listen", f"{self.mgmt_address}:{grpc_port}",
                "--http-listen", f"{self.mgmt_address}:{http_port}", "--fabric-map", map_path,
                "--insecure"]
        return self.spawn("mgmt", argv + list(args), name="aggregator")

    def start_agents(self, binary, grpc_port=9750, probe_port=9753, http_port=9752, args=(),
                     hosts=None):
        """Starts fabricwatch-agent in each host namespace (all hosts by default): it reports to
        the aggregator over the management network, probes on its fabric address and serves
        /metrics on its management address. Returns {host: Proc}."""
        procs = {}
        for name in hosts or list(self.hosts):
            h = self.hosts[name] if name in self.hosts else None
            if h is None:
                raise FabricError(f"unknown host {name!r}")
            argv = [binary, "--aggregator", f"{self.mgmt_address}:{grpc_port}", "--node-name",
                    h.name, "--probe-address", h.address, "--probe-port", probe_port,
                    "--http-listen", f"{h.mgmt_address}:{http_port}", "--insecure"]
            procs[name] = self.spawn(name, argv + list(args), name="agent")
        return procs

    def start_responder(self, node, udp_port=7007, tcp_port=7008, seconds=3600):
        """Starts traffic.py serve (UDP echo, TCP byte counter) and waits until it listens."""
        proc = self.spawn(node, [sys.executable, TRAFFIC_PY, "serve", "--udp-port", udp_port,
                                 "--tcp-port", tcp_port, "--seconds", seconds], name="responder")
        self._wait_ready(proc)
        return proc

    def _wait_ready(self, proc, timeout=10.0):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if "ready" in proc.log():
                return
            if not proc.running():
                raise FabricError(f"{proc.argv[1:3]} on {proc.node} exited: {proc.log().strip()}")
            time.sleep(0.02)
        self.stop(proc)
        raise FabricError(f"{proc.argv[1:3]} on {proc.node} not ready after {timeout} s")

    def udp_flows(self, src, dst, port, sports, count=1, rate_pps=2000.0, timeout=0.5,
                  payload=64):
        """Echo probes from host src to dst (host or address), one flow per source port."""
        return self.run_in(src, traffic.udp_flows, self._address_of(dst), port, list(sports),
                           count, rate_pps, timeout, payload)

    def udp_probe(self, src, dst, port, count=1, sport=0, **kw):
        """Echo probes on one flow; returns its FlowStats."""
        return next(iter(self.udp_flows(src, dst, port, [sport], count, **kw).values()))

    def tcp_goodput(self, src, dst, port, nbytes, sport=0, timeout=30.0):
        """One bounded TCP transfer to a responder; {"bytes", "seconds", "bps", "sport"}."""
        return self.run_in(src, traffic.tcp_goodput, self._address_of(dst), port, nbytes, sport,
                           timeout, timeout=timeout + 10)

    def trace(self, src, dst, sport, dport, max_ttl=8):
        """The hop addresses a UDP flow's TTL-limited probes get answers from (traffic.udp_trace),
        one per TTL (None: silent), ending at dst's own answer."""
        return self.run_in(src, traffic.udp_trace, self._address_of(dst), sport, dport, max_ttl)

    def http_get(self, node, url, timeout=5.0):
        """HTTP GET from inside node's namespace (e.g. "mgmt" to read the aggregator's API)."""
        return self.run_in(node, traffic.http_get, url, timeout, timeout=timeout + 5)

    # ------------------------------------------------------------------ observation

    def counters(self, node):
        """{dev: {rx_packets, tx_packets, rx_bytes, tx_bytes, rx_dropped, tx_dropped, operstate}}."""
        self._require_up()
        cp = netns.sh(["ip", "-n", self.ns(node), "-s", "-j", "link", "show"])
        try:
            links = json.loads(cp.stdout)
        except ValueError as e:
            raise FabricError(f"unparseable 'ip -j link' output in {node}: {e}") from None
        out = {}
        for li in links:
            st = li.get("stats64", {})
            rx, tx = st.get("rx", {}), st.get("tx", {})
            out[li["ifname"]] = {"rx_packets": rx.get("packets", 0), "tx_packets": tx.get("packets", 0),
                                 "rx_bytes": rx.get("bytes", 0), "tx_bytes": tx.get("bytes", 0),
                                 "rx_dropped": rx.get("dropped", 0),
                                 "tx_dropped": tx.get("dropped", 0),
                                 "operstate": li.get("operstate", "UNKNOWN")}
        return out

    def link_state(self, link_id):
        """{node: operstate} for both ends of a link."""
        lk = self.link(link_id)
        return {n: self.counters(n)[e.dev]["operstate"] for n, e in lk.ends.items()}

    def path_of(self, src, dst, proto, sport, dport):
        """The nodes a packet of this 5-tuple crosses, asking each hop's kernel ('ip route get'
        with the L4 ports, so the ECMP hash is the one forwarding uses). Returns (nodes, reached).
        """
        self._require_up()
        if proto not in ("udp", "tcp"):
            raise FabricError(f"proto must be udp or tcp, got {proto!r}")
        src_addr, dst_addr = self.hosts[src].address, self._address_of(dst)
        nodes, node, iif = [src], src, None
        for _ in range(16):
            argv = ["ip", "-n", self.ns(node), "-j", "route", "get", dst_addr, "from", src_addr]
            if iif:
                argv += ["iif", iif]
            argv += ["ipproto", proto, "sport", str(sport), "dport", str(dport)]
            cp = netns.sh(argv, check=False)
            if cp.returncode != 0:
                return nodes, False
            route = (json.loads(cp.stdout) or [{}])[0]
            if route.get("type") == "local" or route.get("dev") == "lo":
                return nodes, True
            dev = route.get("dev")
            lk = next((lk for lk in self._links_of(node) if lk.ends[node].dev == dev), None)
            if lk is None:
                return nodes, False
            peer = lk.other(node)
            nodes.append(peer)
            if peer in self.hosts:
                return nodes, self.hosts[peer].address == dst_addr
            node, iif = peer, lk.ends[peer].dev
        return nodes, False


if __name__ == "__main__":
    import fabric_cli  # noqa: E402

    sys.exit(fabric_cli.main())
