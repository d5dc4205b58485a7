#!/usr/bin/env python3
"""Cardinality guard for the aggregator's /metrics (issue 17, part 7).

Streams a simulated fleet of a given shape (fw_sim: spines x leaves x hosts per leaf, NIC ports per
node) into a real aggregator that holds the fleet's fabric map, scrapes /metrics while the fleet is
live, and checks:

  * every family's series count equals what the fleet shape predicts (per node, per NIC port, per
    link, or a fixed number), and the total equals the golden count for the shape;
  * no series names two nodes in its labels (per-pair data belongs to /api/v1/pairs, never to
    /metrics: it grows with nodes squared);
  * no family outside the golden list appears (a new family must be added on purpose).

With --report only (no --golden), it prints the series count and the scrape time (median of several
scrapes, wall clock, client side), which is how the 2,000- and 16,000-node figures in
docs/metrics.md are measured.

Exit codes: 0 pass, 1 fail, 77 skipped (binaries missing).
"""
import argparse
import json
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

SERIES_RE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)(\s+\d+)?$')
LABEL_RE = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def parse_exposition(text):
    """Returns [(family, name, {label: value})] for every sample line."""
    types = {}
    out = []
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ", 3)
            types[name] = kind
            continue
        if not line or line.startswith("#"):
            continue
        m = SERIES_RE.match(line)
        if not m:
            raise ValueError("unparsable exposition line: %r" % line)
        name = m.group(1)
        labels = dict(LABEL_RE.findall(m.group(3) or ""))
        family = name
        for suffix in ("_bucket", "_sum", "_count"):
            base = name[: -len(suffix)] if name.endswith(suffix) else None
            if base and types.get(base) in ("histogram", "summary"):
                family = base
                break
        out.append((family, name, labels))
    return out


def scrape(url, timeout=60):
    t0 = time.monotonic()
    with urllib.request.urlopen(url, timeout=timeout) as r:
        body = r.read().decode()
    return body, time.monotonic() - t0


def wait_http(url, deadline):
    while time.monotonic() < deadline:
        try:
            scrape(url, timeout=2)
            return True
        except OSError:
            time.sleep(0.2)
    return False


def counts(series):
    by_family = {}
    for fam, _, _ in series:
        by_family[fam] = by_family.get(fam, 0) + 1
    return by_family


def expected_counts(golden, shape):
    """Per-family expected series from the golden file's per-family formulas."""
    env = dict(shape)
    return {fam: eval(expr, {"__builtins__": {}}, env)  # formulas are ours, in the golden file
            for fam, expr in golden["families"].items()}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--fw-sim", required=True)
    ap.add_argument("--aggregator-bin", required=True)
    ap.add_argument("--spines", type=int, default=2)
    ap.add_argument("--leaves", type=int, default=4)
    ap.add_argument("--hosts-per-leaf", type=int, default=4)
    ap.add_argument("--inter-leaf-flows", type=int, default=2)
    ap.add_argument("--ports", type=int, default=4, help="NIC ports each simulated node reports")
    ap.add_argument("--duration", type=float, default=90, help="simulated seconds of streaming")
    ap.add_argument("--scrape-at", type=float, default=60,
                    help="seconds after the fleet connects to scrape (with --golden: at most)")
    ap.add_argument("--scrapes", type=int, default=3)
    ap.add_argument("--golden", help="golden JSON: per-family formulas over the shape")
    ap.add_argument("--json-out")
    ap.add_argument("--sim-arg", action="append", default=[],
                    help="extra fw_sim argument (repeatable), e.g. --sim-arg=--time-scale=0.5")
    a = ap.parse_args()

    for b in (a.fw_sim, a.aggregator_bin):
        if not os.access(b, os.X_OK):
            print("SKIP: %s not built" % b)
            return 77

    nodes = a.leaves * a.hosts_per_leaf
    # Links are the map's leaf-spine links plus one access link per node (one rail).
    shape = {"nodes": nodes, "ports": nodes * a.ports, "leaves": a.leaves, "spines": a.spines,
             "links": a.leaves * a.spines + nodes}
    golden = None
    if a.golden:
        with open(a.golden) as f:
            golden = json.load(f)
    work = tempfile.mkdtemp(prefix="fw-cardinality-")
    scenario = os.path.join(work, "shape.yaml")
    with open(scenario, "w") as f:
        f.write("name: cardinality\n"
                "description: a healthy fleet of a fixed shape, for the series count\n"
                "topology: {spines: %d, leaves: %d, hosts_per_leaf: %d, inter_leaf_flows: %d}\n"
                "duration: %gs\nseed: 5\nbandwidth_probes_per_s: 1\n"
                % (a.spines, a.leaves, a.hosts_per_leaf, a.inter_leaf_flows, a.duration))
    fmap = os.path.join(work, "fabric.yaml")
    subprocess.run([a.fw_sim, "--scenario", scenario, "--write-map", fmap], check=True,
                   stdout=subprocess.DEVNULL)

    grpc_port, http_port = free_port(), free_port()
    state = os.path.join(work, "state")
    os.makedirs(state)
    agg_log = open(os.path.join(work, "aggregator.log"), "w")
    agg = subprocess.Popen([a.aggregator_bin, "--insecure", "--grpc-listen", "127.0.0.1:%d" % grpc_port,
                            "--http-listen", "127.0.0.1:%d" % http_port, "--fabric-map", fmap,
                            "--state-dir", state, "--log-level", "warn"],
                           stdout=agg_log, stderr=subprocess.STDOUT)
    sim = None
    failures = []
    result = {"shape": shape}
    try:
        url = "http://127.0.0.1:%d/metrics" % http_port
        if not wait_http(url, time.monotonic() + 30):
            print("FAIL: aggregator did not serve /metrics")
            return 1
        sim_log = open(os.path.join(work, "fw_sim.log"), "w")
        sim = subprocess.Popen([a.fw_sim, "--scenario", scenario, "--grpc",
                                "127.0.0.1:%d" % grpc_port, "--http", "127.0.0.1:%d" % http_port,
                                "--aggregator-pid", str(agg.pid), "--ports-per-agent",
                                str(a.ports), "--log-level", "warn", "--work-dir", work] + a.sim_arg,
                               stdout=sim_log, stderr=subprocess.STDOUT)
        # Wait until every node is up, then until the scrape point.
        t_start = time.monotonic()
        deadline = t_start + max(120, nodes / 50)
        while time.monotonic() < deadline:
            body, _ = scrape(url)
            m = re.search(r"^fabricwatch_agents_connected (\S+)$", body, re.M)
            if m and float(m.group(1)) >= nodes:
                break
            if sim.poll() is not None:
                break
            time.sleep(1)
        up_at = time.monotonic() - t_start
        # Link ratio series appear once a probe has measured the link (a latency baseline, a
        # bandwidth burst): with a golden file, poll until the counts match or time runs out.
        want = expected_counts(golden, shape) if golden else None
        while True:
            body, _ = scrape(url)
            if want is not None and counts(parse_exposition(body)) == want:
                break
            if time.monotonic() - t_start >= a.scrape_at or sim.poll() is not None:
                break
            time.sleep(2)
        result["settled_after_s"] = time.monotonic() - t_start
        times = []
        for _ in range(a.scrapes):
            body, dt = scrape(url)
            times.append(dt)
        series = parse_exposition(body)
        result.update({"series": len(series), "bytes": len(body),
                       "scrape_s_median": statistics.median(times), "scrape_s_all": times,
                       "connected_after_s": up_at})
    finally:
        for p in (sim, agg):
            if p and p.poll() is None:
                p.send_signal(signal.SIGINT if p is sim else signal.SIGTERM)
                try:
                    p.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
        if not os.environ.get("FW_KEEP_WORK"):
            shutil.rmtree(work, ignore_errors=True)

    by_family = counts(series)
    result["families"] = by_family

    # No series carries a pair of nodes.
    names = set()
    for fam, _, labels in series:
        if fam == "fabricwatch_agent_up":
            names.add(labels.get("node"))
    if len(names) != nodes:
        failures.append("fabricwatch_agent_up has %d nodes, the fleet %d" % (len(names), nodes))
    node_re = re.compile("|".join(re.escape(n) for n in sorted(names, key=len, reverse=True)))
    for fam, name, labels in series:
        for key in ("src", "dst", "peer", "pair"):
            if key in labels:
                failures.append("%s carries a per-pair label %s" % (name, key))
        found = set()
        for v in labels.values():
            found.update(node_re.findall(v))
        if len(found) > 1:
            failures.append("%s%s names %d nodes" % (name, labels, len(found)))

    if golden:
        for fam in sorted(set(want) | set(by_family)):
            if fam not in want:
                failures.append("family %s (%d series) is not in the golden list"
                                % (fam, by_family[fam]))
            elif by_family.get(fam, 0) != want[fam]:
                failures.append("family %s: %d series, the shape predicts %d (%s)"
                                % (fam, by_family.get(fam, 0), want[fam],
                                   golden["families"][fam]))
        total = sum(want.values())
        if len(series) != total:
            failures.append("total %d series, golden %d" % (len(series), total))

    print(json.dumps({k: v for k, v in result.items() if k != "families"}, indent=1))
    if a.json_out:
        with open(a.json_out, "w") as f:
            json.dump(result, f, indent=1)
    for msg in failures[:40]:
        print("FAIL:", msg)
    if not failures:
        print("PASS: %d series for %d nodes, %d ports, %d links; none names two nodes"
              % (len(series), nodes, shape["ports"], shape["links"]))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
