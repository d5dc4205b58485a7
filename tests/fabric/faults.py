"""Fault injection for the test fabric: tbf shaping, nftables random drop, link down, flap, congestion.

FaultsMixin is part of fabric.Fabric; it needs the fabric's topology (links, ends, namespaces) and
its process table. netem is not in this kernel, so there is no delay or reorder fault.
"""

import json
import os
import re
import sys
import threading
import time

import netns
from netns import FabricError

TRAFFIC_PY = os.path.join(os.path.dirname(os.path.abspath(__file__)), "traffic.py")
_RATE_UNITS = {"bit": 1, "kbit": 10**3, "mbit": 10**6, "gbit": 10**9}


def parse_rate(rate):
    """'50mbit', '1.5gbit', '800kbit', '1000bit' or a number of bits/s -> int bits/s."""
    if isinstance(rate, (int, float)) and not isinstance(rate, bool):
        bps = float(rate)
    else:
        m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*(bit|kbit|mbit|gbit)?\s*", str(rate).lower())
        if not m:
            raise FabricError(f"bad rate {rate!r}: use bits/s, e.g. 50mbit, 800kbit, 1gbit")
        bps = float(m.group(1)) * _RATE_UNITS[m.group(2) or "bit"]
    if not 8000 <= bps <= 100e9:
        raise FabricError(f"rate {rate!r} is outside 8kbit..100gbit")
    return int(bps)


class Fault:
    """An applied fault. undo() is idempotent; a Fault is also a context manager."""

    def __init__(self, fabric, description, undo_fn, stats_fn=None):
        self.description = description
        self._fabric, self._undo_fn, self._stats_fn = fabric, undo_fn, stats_fn
        self.active = True

    def undo(self):
        if self.active:
            self.active = False
            if not self._fabric.closed:
                self._undo_fn()

    def stats(self):
        """Fault-specific counters (e.g. packets dropped), or {}."""
        return self._stats_fn() if self._stats_fn and not self._fabric.closed else {}

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.undo()

    def __repr__(self):
        return f"Fault({self.description}, active={self.active})"


class Background:
    """A bounded background activity (flap loop, congestion). stop() ends it early."""

    def __init__(self, description):
        self.description = description
        self.error = None
        self.result = None
        self._stop = threading.Event()
        self._thread = None

    def _start(self, body):
        def run():
            try:
                self.result = body(self._stop)
            except Exception as e:  # reported by wait()
                self.error = e

        self._thread = threading.Thread(target=run, name=self.description, daemon=True)
        self._thread.start()
        return self

    @property
    def done(self):
        return self._thread is not None and not self._thread.is_alive()

    def wait(self, timeout=None):
        """Waits for the end; returns the result, raises what the activity raised."""
        self._thread.join(timeout)
        if self._thread.is_alive():
            raise FabricError(f"{self.description} still running after {timeout} s")
        if self.error:
            raise self.error
        return self.result

    def stop(self, timeout=30):
        self._stop.set()
        self._thread.join(timeout)
        return self.result

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()


class FaultsMixin:
    """The fault helpers of Fabric."""

    def _next_fault_id(self):
        with self._lock:
            self._faults += 1
            return self._faults

    def limit_bandwidth(self, link_id, rate, burst=None, latency="50ms", toward=None):
        """tbf on the link's egress at both ends, or only in the direction toward `toward`.
        burst defaults to 10 ms at the rate (at least 16 KiB)."""
        self._require_up()
        lk = self.link(link_id)
        bps = parse_rate(rate)
        burst = int(burst) if burst is not None else max(16384, bps // 800)
        if not re.fullmatch(r"\d+(\.\d+)?(us|ms|s)", str(latency)):
            raise FabricError(f"bad latency {latency!r}: use e.g. 50ms")
        ends = self._senders(lk, toward)
        for e in ends:
            netns.sh(["tc", "-n", e.ns, "qdisc", "replace", "dev", e.dev, "root", "tbf", "rate",
                      f"{bps}bit", "burst", str(burst), "latency", str(latency)])

        def undo():
            for e in ends:
                netns.sh(["tc", "-n", e.ns, "qdisc", "del", "dev", e.dev, "root"], check=False)

        return Fault(self, f"tbf {bps}bit on {lk.id}" + (f" toward {toward}" if toward else ""),
                     undo)

    def _senders(self, lk, toward):
        """The ends whose egress carries traffic toward `toward` (both ends when None)."""
        if toward is None:
            return list(lk.ends.values())
        if toward not in lk.ends:
            raise FabricError(f"toward must be {lk.a} or {lk.b} for link {lk.id}")
        return [lk.ends[lk.other(toward)]]

    def drop(self, target, percent, toward=None):
        """Drops percent% of packets at random with nftables numgen: on a switch (everything it
        forwards) or on a link (each direction, or only toward `toward`)."""
        self._require_up()
        try:
            pct = float(percent)
        except (TypeError, ValueError):
            raise FabricError(f"percent must be a number, got {percent!r}") from None
        if not 0.0 <= pct <= 100.0:
            raise FabricError(f"percent must be within 0..100, got {percent}")
        threshold = int(round(pct * 10000))  # numgen over 1e6: 0.0001% resolution
        match = f"numgen random mod 1000000 < {threshold} counter drop"
        table = f"fwfault{self._next_fault_id()}"
        rules = {}  # ns -> [(hook, rule)]
        if target in self.switches:
            rules[self.switches[target].ns] = [("forward", match)]
            what = f"switch {target}"
        else:
            lk = self.link(target)
            for x in self._senders(lk, toward):
                y = lk.ends[lk.other(x.node)]
                if x.node in self.switches:
                    rules.setdefault(x.ns, []).append(("postrouting", f'oifname "{x.dev}" {match}'))
                else:
                    rules.setdefault(y.ns, []).append(("prerouting", f'iifname "{y.dev}" {match}'))
            what = f"link {lk.id}" + (f" toward {toward}" if toward else "")
        for ns_name, hooked in rules.items():
            # PLATFORM-NOTES: one statement per line; 'fwd' is a keyword, so chains are c_<hook>.
            text = [f"table inet {table} {{"]
            for hook, rule in hooked:
                text += [f"  chain c_{hook} {{",
                         f"    type filter hook {hook} priority 0; policy accept;",
                         f"    {rule}", "  }"]
            text.append("}")
            netns.sh(["ip", "netns", "exec", ns_name, "nft", "-f", "-"], input="\n".join(text) + "\n")

        def undo():
            for ns_name in rules:
                netns.sh(["ip", "netns", "exec", ns_name, "nft", "delete", "table", "inet", table],
                         check=False)

        def stats():
            dropped = 0
            for ns_name in rules:
                cp = netns.sh(["ip", "netns", "exec", ns_name, "nft", "-j", "list", "table", "inet",
                               table], check=False)
                if cp.returncode != 0:
                    continue
                for item in json.loads(cp.stdout).get("nftables", []):
                    for expr in item.get("rule", {}).get("expr", []):
                        if "counter" in expr:
                            dropped += expr["counter"].get("packets", 0)
            return {"dropped_packets": dropped}

        return Fault(self, f"drop {pct}% on {what}", undo, stats)

    def link_down(self, link_id):
        """Sets both ends of the link down; returns a Fault whose undo() is link_up()."""
        self._require_up()
        lk = self.link(link_id)
        with self._lock:
            self._down.add(lk.id)
            for e in lk.ends.values():
                netns.sh(["ip", "-n", e.ns, "link", "set", e.dev, "down"])
        return Fault(self, f"link {lk.id} down", lambda: self.link_up(lk.id))

    def link_up(self, link_id):
        """Sets both ends up and reinstalls the routes the kernel dropped with them."""
        self._require_up()
        lk = self.link(link_id)
        with self._lock:
            self._down.discard(lk.id)
            for e in lk.ends.values():
                netns.sh(["ip", "-n", e.ns, "link", "set", e.dev, "up"])
            for node in lk.ends:
                netns.ip_batch(self._route_lines(node), ns=self.ns(node))

    def flap(self, link_id, period=1.0, count=5, down_fraction=0.5):
        """Background loop: count times, link down for period*down_fraction, then up for the
        rest of the period. Bounded (count <= 10000, total <= 1 h); the link ends up."""
        self._require_up()
        lk = self.link(link_id)
        if not (0.02 <= period <= 600 and 1 <= count <= 10000 and 0 < down_fraction < 1
                and period * count <= 3600):
            raise FabricError("flap needs 0.02 <= period <= 600 s, 1 <= count <= 10000, "
                              "0 < down_fraction < 1 and period*count <= 3600 s")

        def body(stop):
            cycles = 0
            try:
                for _ in range(count):
                    if stop.is_set() or self._closing:
                        break
                    self.link_down(lk.id)
                    stop.wait(period * down_fraction)
                    self.link_up(lk.id)
                    cycles += 1
                    stop.wait(period * (1 - down_fraction))
            finally:
                if lk.id in self._down and not self.closed:
                    self.link_up(lk.id)
            return {"cycles": cycles}

        bg = Background(f"flap {lk.id}")
        self._background.append(bg)
        return bg._start(body)

    def congest(self, link_id, rate, seconds, toward=None, shape=None, burst=None,
                latency="50ms", size=1200):
        """Background UDP load at `rate` across one link for `seconds` (<= 600): a blaster at the
        sending end, bound to the link's device, and a counting sink at the receiving end.
        toward defaults to b; with shape, that direction also gets a tbf limit for the duration.
        wait() returns {"blaster": {...}, "sink": {...}}."""
        self._require_up()
        lk = self.link(link_id)
        bps = parse_rate(rate)
        if not 0 < float(seconds) <= 600:
            raise FabricError("congest needs 0 < seconds <= 600")
        toward = toward or lk.b
        x = self._senders(lk, toward)[0]
        y = lk.ends[toward]
        shaping = self.limit_bandwidth(lk.id, shape, burst, latency, toward=toward) if shape else None
        port = 48000 + self._next_fault_id()
        sink = self.spawn(y.node, [sys.executable, TRAFFIC_PY, "sink", "--port", port,
                                   "--seconds", float(seconds) + 5], name="sink")
        try:
            self._wait_ready(sink)
            blaster = self.spawn(x.node, [sys.executable, TRAFFIC_PY, "blast", "--dst", y.address,
                                          "--port", port, "--rate-bps", bps, "--seconds", seconds,
                                          "--size", size, "--dev", x.dev], name="blast")
        except BaseException:
            self.stop(sink)
            if shaping:
                shaping.undo()
            raise

        def body(stop):
            try:
                deadline = time.monotonic() + float(seconds) + 10
                while blaster.running() and not stop.is_set() and time.monotonic() < deadline:
                    stop.wait(0.05)
                self.stop(blaster)
                time.sleep(0.2)  # let the last queued packets drain into the sink
                self.stop(sink)
                return {"blaster": _last_json(blaster.log()), "sink": _last_json(sink.log())}
            finally:
                if shaping:
                    shaping.undo()

        bg = Background(f"congest {lk.id} toward {toward}")
        self._background.append(bg)
        return bg._start(body)


def _last_json(text):
    for line in reversed(text.strip().splitlines()):
        try:
            return json.loads(line)
        except ValueError:
            continue
    return {"error": f"no summary in output: {text.strip()[-300:]!r}"}
