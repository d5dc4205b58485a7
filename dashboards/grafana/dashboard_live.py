"""The dashboards against the real daemons on loopback (used by check_dashboards.py).

metrics-live: one aggregator and one agent; every metric name the dashboards use must be exported
(registered at start, even before its first event) with the labels the dashboards use.

query-live: an aggregator with a two-leaf fabric map, two agents (127.0.0.1 and 127.0.0.2) that
probe each other, and a real Prometheus scraping all three every second. Every variable query and
every target is evaluated by Prometheus: each must be accepted, and each must return data unless
its panel says "may be empty:" for a condition this fleet does not meet.
"""
import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request

import check_dashboards as cd

FABRIC_MAP = """routing: ecmp
switches:
  - {name: leaf1, tier: leaf}
  - {name: leaf2, tier: leaf}
  - {name: spine1, tier: spine}
links:
  - {a: leaf1, b: spine1}
  - {a: leaf2, b: spine1}
hosts:
  - {node: dash-a, nic: mlx5_0, address: 127.0.0.1, switch: leaf1}
  - {node: dash-b, nic: mlx5_0, address: 127.0.0.2, switch: leaf2}
"""
AGENTS = (("dash-a", "127.0.0.1"), ("dash-b", "127.0.0.2"))
# Conditions the query-live fleet does not meet: panels marked with only these must have data.
# (It has a fabric map, two probing agents and bandwidth probes every 5 s.) Panels marked with any
# other condition (event, hardware, no-baseline) may be empty.
MET_BY_FLEET = {"no-fabric-map", "no-probes", "no-bandwidth-probe"}
RATE_INTERVAL = "15s"  # Grafana's $__rate_interval with a 1 s scrape is at least 4 s


class Fleet:
    """Starts daemons in a temporary directory; stops every process it started, by PID."""

    def __init__(self):
        self.work = tempfile.mkdtemp(prefix="fw-dash-live-")
        self.procs = []

    def start(self, name, argv):
        log = open(os.path.join(self.work, name + ".log"), "w")
        p = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
        p.fw_name = name
        self.procs.append(p)
        return p

    def wait_ports(self, name, seconds=20):
        path = os.path.join(self.work, name + ".ports")
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if os.path.exists(path) and os.path.getsize(path) > 0:
                try:
                    return json.load(open(path))
                except ValueError:
                    pass
            if any(p.poll() is not None for p in self.procs):
                break
            time.sleep(0.1)
        raise RuntimeError(f"{name} did not start:\n{self.log(name)}")

    def log(self, name, tail=2000):
        try:
            return open(os.path.join(self.work, name + ".log")).read()[-tail:]
        except OSError:
            return ""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        for p in self.procs:
            if p.poll() is None:
                p.terminate()
        for p in self.procs:
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        if os.environ.get("FW_KEEP_TEMP"):
            print("kept", self.work)
        else:
            shutil.rmtree(self.work, ignore_errors=True)

    def aggregator(self, binary, extra=()):
        self.start("aggregator", [binary, "--insecure", "--grpc-listen", "127.0.0.1:0", "--http-listen",
                                  "127.0.0.1:0", "--port-file",
                                  os.path.join(self.work, "aggregator.ports"), *extra])
        return self.wait_ports("aggregator")

    def agent(self, binary, testdata, grpc_port, node, address):
        self.start(node, [binary, "--insecure", "--aggregator", f"127.0.0.1:{grpc_port}", "--node-name", node,
                          "--http-listen", "127.0.0.1:0", "--probe-address", address,
                          "--probe-port", "0", "--hwloc-xml", hwloc_xml(testdata),
                          "--sysfs-root", sysfs_root(testdata),
                          "--port-file", os.path.join(self.work, node + ".ports")])
        return self.wait_ports(node)


def hwloc_xml(testdata):
    return os.path.join(testdata, "hwloc", "psmgmt-topo.jrc0386.xml")


def sysfs_root(testdata):
    return os.path.join(testdata, "sysfs", "gpud-h100")


def preconditions(binaries, testdata):
    """A skip message, or None when the binaries and the test data are there."""
    for b in binaries:
        if not (b and os.access(b, os.X_OK)):
            return f"{b} is not built"
    if not (os.path.isfile(hwloc_xml(testdata)) and os.path.isdir(sysfs_root(testdata))):
        return f"the test data is not in {testdata}"
    return None


def http_get(url, timeout=10):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.read().decode("utf-8")


def scrape(port):
    return http_get(f"http://127.0.0.1:{port}/metrics")


def wait_for(what, pred, seconds, interval=0.25):
    deadline = time.monotonic() + seconds
    last = None
    while time.monotonic() < deadline:
        last = pred()
        if last:
            return last
        time.sleep(interval)
    raise RuntimeError(f"timed out after {seconds} s waiting for {what}")


# ---------------------------------------------------------------------------------- metrics-live
def check_metrics_live(d, agg_bin, agent_bin, testdata):
    skip = preconditions((agg_bin, agent_bin), testdata)
    if skip:
        print("SKIP:", skip)
        return 77
    try:
        with Fleet() as fleet:
            ports = fleet.aggregator(agg_bin)
            aports = fleet.agent(agent_bin, testdata, ports["grpc_port"], "dash-node", "127.0.0.1")

            def reported():
                text = scrape(ports["http_port"])
                if 'fabricwatch_agent_up{node="dash-node"} 1' in text and \
                        "fabricwatch_nic_port_up{" in text:
                    return text
                return None
            agg_text = wait_for("the agent and its ports in the aggregator's /metrics",
                                reported, 20)
            agent_text = scrape(aports["http_port"])
    except (RuntimeError, OSError) as e:
        print("FAIL:", e)
        return 1
    exported = cd.parse_exposition(agg_text)
    cd.parse_exposition(agent_text, exported)
    # A family with a # TYPE line and no series yet counts as exported (it is registered); its
    # labels then come from docs/metrics.md.
    doc = cd.parse_metrics_doc(cd.DEFAULT_METRICS_DOC)
    for name, info in exported.items():
        if not info["labels"] and name in doc and doc[name]["labels"]:
            info["labels"] = set(doc[name]["labels"])
    return cd.check_names(d, exported, "a live scrape of the aggregator and an agent")


# ------------------------------------------------------------------------------------ query-live
def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Prometheus:
    def __init__(self, port):
        self.base = f"http://127.0.0.1:{port}"

    def api(self, path, params):
        url = f"{self.base}/api/v1/{path}?" + urllib.parse.urlencode(params, doseq=True)
        try:
            body = http_get(url)
        except urllib.error.HTTPError as e:  # 400/422: Prometheus refused the query
            body = e.read().decode("utf-8", "replace")
        doc = json.loads(body)
        if doc.get("status") != "success":
            raise ValueError(f"{doc.get('errorType')}: {doc.get('error')}")
        return doc["data"]

    def query(self, expr):
        return self.api("query", {"query": expr})["result"]

    def label_values(self, label, match):
        params = {"match[]": [match]} if match else {}
        return self.api(f"label/{label}/values", params)


def check_query_live(d, agg_bin, agent_bin, testdata, prometheus):
    prometheus = prometheus or shutil.which("prometheus")
    if not prometheus:
        print("SKIP: prometheus is not installed (scripts/setup installs it)")
        return 77
    skip = preconditions((agg_bin, agent_bin), testdata)
    if skip:
        print("SKIP:", skip)
        return 77
    fails = cd.Failures()
    counted = {"targets": 0, "with_data": 0, "allowed_empty": 0, "variables": 0}
    try:
        with Fleet() as fleet:
            map_path = os.path.join(fleet.work, "fabric-map.yaml")
            with open(map_path, "w") as fh:
                fh.write(FABRIC_MAP)
            ports = fleet.aggregator(agg_bin, ["--fabric-map", map_path, "--tick", "1s",
                                               "--bandwidth-interval", "5s"])
            agent_ports = [fleet.agent(agent_bin, testdata, ports["grpc_port"], n, a)["http_port"]
                           for n, a in AGENTS]
            prom_port = free_port()
            targets = ", ".join(f"'127.0.0.1:{p}'" for p in agent_ports)
            config = os.path.join(fleet.work, "prometheus.yml")
            with open(config, "w") as fh:
                fh.write("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
                         "scrape_configs:\n"
                         "  - job_name: fabricwatch-aggregator\n    static_configs:\n"
                         f"      - targets: ['127.0.0.1:{ports['http_port']}']\n"
                         "  - job_name: fabricwatch-agent\n    static_configs:\n"
                         f"      - targets: [{targets}]\n")
            fleet.start("prometheus", [prometheus, "--config.file", config,
                                       "--storage.tsdb.path", os.path.join(fleet.work, "tsdb"),
                                       "--web.listen-address", f"127.0.0.1:{prom_port}"])
            prom = Prometheus(prom_port)
            ready = [
                # every target scraped, probes between the agents, links, a bandwidth burst, and
                # enough samples for rate() over RATE_INTERVAL on both kinds of target
                "count(up == 1) == 3",
                "count(fabricwatch_node_probe_loss_ratio) >= 2",
                "count(fabricwatch_link_loss_ratio) >= 4",
                "count(fabricwatch_link_bandwidth_ratio) >= 1",
                f"count(rate(fabricwatch_probe_sent_total[{RATE_INTERVAL}]) > 0) >= 2",
                f"count(rate(fabricwatch_ingest_heartbeats_total[{RATE_INTERVAL}]) > 0) >= 1",
            ]

            def all_ready():
                for q in ready:
                    try:
                        if not prom.query(q):
                            return None
                    except (OSError, ValueError):
                        return None
                return True
            try:
                wait_for("the fleet's data in Prometheus: " + "; ".join(ready), all_ready, 45, 0.5)
            except RuntimeError as e:
                for n in ("aggregator", "dash-a", "prometheus"):
                    print(f"----- {n}.log\n{fleet.log(n, 1500)}")
                print("FAIL:", e)
                return 1
            # The harness itself: Prometheus must refuse a query that fails at evaluation (which
            # promtool cannot see) and return nothing for a series that does not exist.
            try:
                prom.query("fabricwatch_nic_port_rate_gbps / ignoring (device) "
                           "fabricwatch_nic_port_rate_gbps")
                fails.add("harness", "a many-to-many division was not refused")
            except ValueError:
                pass
            if prom.query("fabricwatch_no_such_metric"):
                fails.add("harness", "a series that does not exist returned data")
            for name, dash in cd.load_dashboards(d):
                check_variables(name, dash, prom, fails, counted)
                check_targets(name, dash, prom, fails, counted)
    except (RuntimeError, OSError) as e:
        print("FAIL:", e)
        return 1
    print(f"query-live: {counted['variables']} variables have values; {counted['with_data']} of "
          f"{counted['targets']} targets have data, {counted['allowed_empty']} empty and marked "
          "'may be empty:' for a condition this fleet does not meet")
    return fails.report("every dashboard query is accepted by a live Prometheus and has data "
                        "where it should")


def check_variables(name, dash, prom, fails, counted):
    for vname, v in cd.variables(dash).items():
        if v.get("type") != "query":
            continue
        q = cd.var_query(v)
        lv = cd.label_values_query(q)
        if not lv:
            continue
        match = None
        if lv[0]:
            m = q[q.index("(") + 1:q.rindex(",")].strip()
            match = cd.substitute(m, rate_interval=RATE_INTERVAL)
        try:
            values = prom.label_values(lv[2], match)
        except ValueError as e:
            fails.add(f"{name} variable {vname}", f"Prometheus refuses {q!r}: {e}")
            continue
        counted["variables"] += 1
        if not values:
            fails.add(f"{name} variable {vname}", f"{q!r} has no values")


def check_targets(name, dash, prom, fails, counted):
    for p, t in cd.targets(dash):
        where = f"{name} panel {p.get('id')} {p.get('title')!r} {t.get('refId')}"
        expr = cd.substitute(t.get("expr", ""), rate_interval=RATE_INTERVAL)
        counted["targets"] += 1
        try:
            result = prom.query(expr)
        except ValueError as e:
            fails.add(where, f"Prometheus refuses {expr!r}: {e}")
            continue
        conds = set(cd.empty_conditions(p))
        if not result:
            if conds - MET_BY_FLEET:
                counted["allowed_empty"] += 1
                print(f"empty, allowed ({', '.join(sorted(conds - MET_BY_FLEET))}): {where}")
            else:
                fails.add(where, f"no data for {expr!r}" +
                          (f" (marked may be empty: {sorted(conds)}, all met by this fleet)"
                           if conds else ""))
            continue
        counted["with_data"] += 1
        # Every {{label}} in the legend must name a label the result carries, or the legend
        # shows nothing. A series added by 'or vector(0)' has no labels; it needs none.
        labelled = [r["metric"] for r in result if r["metric"]]
        for lab in cd.LEGEND_RE.findall(t.get("legendFormat", "") or ""):
            if labelled and not any(lab in m for m in labelled):
                fails.add(where, f"legend uses {{{{{lab}}}}} but the result has only labels "
                                 f"{sorted(set().union(*labelled))}")
