#!/usr/bin/env python3
"""The alert rules against the findings the real daemons export.

Starts the real aggregator and one real agent on 127.0.0.1 (recorded hwloc topology and sysfs
tree from a real H100 node, checked against the dgx-h100 profile, which yields findings such as
topology_mismatch, gpu_nic_locality and port_errors), and a real Prometheus that scrapes both and
loads fabricwatch.rules.yml. For every fabricwatch_finding_active series the aggregator exports,
Prometheus' /api/v1/alerts must then hold exactly one alert (pending or firing: the `for:` of
warnings is up to 30 minutes) with the alert name of its kind, the finding's severity and
location, node/device/port labels equal to an independent split of the location id, a summary
that names the node, device and port, and runbook_url docs/runbooks/<alert>.md. The self-health
alerts must stay quiet for this healthy fleet (FabricwatchAggregatorDown in particular, which
needs the scrape job named fabricwatch-aggregator).

Every process is stopped by its PID on every path. Exit 0 pass, 1 fail, 77 skip.
"""

import argparse
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
RULES = os.path.join(HERE, "fabricwatch.rules.yml")

ALERT_OF_KIND = {
    "link_down": "FabricLinkDown", "link_degraded": "FabricLinkDegraded",
    "link_flapping": "FabricLinkFlapping", "congestion": "FabricLinkCongested",
    "switch_degraded": "FabricSwitchDegraded", "nic_down": "FabricNicDown",
    "nic_degraded": "FabricNicDegraded", "host_network": "FabricHostNetwork",
    "port_errors": "NicPortErrors", "port_congestion": "NicPortCongested",
    "pcie_downtrained": "FabricPcieDowntrained", "gpu_nic_locality": "FabricGpuNicLocality",
    "topology_mismatch": "FabricTopologyMismatch", "probe_unreachable": "FabricProbeUnreachable",
    "collective_slow": "FabricCollectiveSlow",
}
SELF_HEALTH_QUIET = ["FabricwatchAggregatorDown", "FabricwatchAgentDown", "FabricwatchIngestRefused",
                     "FabricwatchFindingsStoreErrors", "FabricwatchAgentBufferDropping",
                     "FabricFindingCritical"]


def split_location(kind, loc):
    """The labels a finding alert should carry for a location id (docs/analysis.md's forms)."""
    if "~" in loc:
        a, b = loc.split("~", 1)
        return {"link": loc, "end_a": a, "end_b": b}
    parts = loc.split("/")
    if len(parts) >= 2:
        out = {"node": parts[0], "device": parts[1]}
        if len(parts) == 3:
            out["port"] = parts[2]
        return out
    if kind in ("link_down", "link_degraded", "link_flapping", "congestion", "switch_degraded"):
        return {"switch": loc, "end_a": loc, "end_b": loc}
    return {"node": loc}


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(url, timeout=5):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.read().decode()


def wait(what, fn, timeout_s):
    end = time.monotonic() + timeout_s
    last = None
    while time.monotonic() < end:
        try:
            last = fn()
            if last:
                return last
        except (OSError, ValueError) as e:
            last = e
        time.sleep(0.5)
    raise TimeoutError(f"{what}: not within {timeout_s} s (last: {last!r})")


class Procs:
    def __init__(self, work):
        self.work = work
        self.procs = []

    def start(self, name, argv):
        log = open(os.path.join(self.work, name + ".log"), "w")
        p = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
        self.procs.append((name, p))
        return p

    def check_alive(self):
        for name, p in self.procs:
            if p.poll() is not None:
                with open(os.path.join(self.work, name + ".log")) as f:
                    tail = f.read()[-1500:]
                raise RuntimeError(f"{name} (pid {p.pid}) exited {p.returncode}:\n{tail}")

    def stop(self):
        for _, p in self.procs:
            if p.poll() is None:
                p.terminate()
        for _, p in self.procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(timeout=10)


def finding_series(metrics_text):
    out = []
    for m in re.finditer(r'^fabricwatch_finding_active\{([^}]*)\} 1$', metrics_text, re.M):
        labels = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(1)))
        out.append(labels)
    return out


def check(alerts, findings):
    errors = []
    for f in findings:
        kind, sev, loc = f["kind"], f["severity"], f["location"]
        mine = [a for a in alerts if a["labels"].get("location") == loc
                and a["labels"].get("kind") == kind and a["labels"].get("severity") == sev]
        if len(mine) != 1:
            errors.append(f"{kind}/{sev} at {loc}: {len(mine)} alerts, expected 1")
            continue
        a = mine[0]
        lab, ann = a["labels"], a["annotations"]
        name = ALERT_OF_KIND.get(kind, "FabricFindingCritical")
        if lab["alertname"] != name:
            errors.append(f"{kind} at {loc}: alert {lab['alertname']}, expected {name}")
        want = split_location(kind, loc)
        for key in ("node", "device", "port", "link", "end_a", "end_b", "switch"):
            if lab.get(key) != want.get(key):
                errors.append(f"{kind} at {loc}: label {key}={lab.get(key)!r}, expected {want.get(key)!r}")
        summary = ann.get("summary", "")
        for key in ("node", "device", "link", "switch"):
            if key in want and want[key] not in summary:
                errors.append(f"{kind} at {loc}: summary {summary!r} does not name {key} {want[key]}")
        if "port" in want and f"port {want['port']}" not in summary:
            errors.append(f"{kind} at {loc}: summary {summary!r} does not name port {want['port']}")
        if ann.get("runbook_url") != f"docs/runbooks/{name}.md":
            errors.append(f"{kind} at {loc}: runbook_url {ann.get('runbook_url')!r}")
        print(f"ok: {kind}/{sev} at {loc} -> {lab['alertname']} ({a['state']}): {summary}")
    for a in alerts:
        if a["labels"]["alertname"] in SELF_HEALTH_QUIET:
            errors.append(f"{a['labels']['alertname']} is {a['state']} for a healthy fleet: {a['labels']}")
    return errors


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--aggregator", required=True)
    ap.add_argument("--agent", required=True)
    ap.add_argument("--testdata", required=True)
    args = ap.parse_args()
    prometheus = shutil.which("prometheus")
    hwloc = os.path.join(args.testdata, "hwloc", "psmgmt-topo.jrc0386.xml")
    sysfs = os.path.join(args.testdata, "sysfs", "gpud-h100")
    for path, what in [(args.aggregator, "aggregator"), (args.agent, "agent")]:
        if not os.access(path, os.X_OK):
            print(f"SKIP: {what} binary {path} is not built")
            return 77
    if not prometheus:
        print("SKIP: prometheus is not installed")
        return 77
    if not (os.path.isfile(hwloc) and os.path.isdir(sysfs)):
        print(f"SKIP: test data not found under {args.testdata}")
        return 77

    work = tempfile.mkdtemp(prefix="fw-rules-live-")
    procs = Procs(work)
    try:
        agg_ports = os.path.join(work, "aggregator.ports")
        procs.start("aggregator", [args.aggregator, "--insecure", "--grpc-listen", "127.0.0.1:0",
                                   "--http-listen", "127.0.0.1:0", "--state-dir", work,
                                   "--port-file", agg_ports])
        ports = wait("aggregator ports", lambda: os.path.getsize(agg_ports) and
                     json.load(open(agg_ports)), 20)
        agg_http = f"127.0.0.1:{ports['http_port']}"
        agent_ports = os.path.join(work, "agent.ports")
        procs.start("agent", [args.agent, "--insecure", "--aggregator", f"127.0.0.1:{ports['grpc_port']}",
                              "--node-name", "node01", "--http-listen", "127.0.0.1:0",
                              "--probe-address", "127.0.0.1", "--probe-port", "0",
                              "--hwloc-xml", hwloc, "--sysfs-root", sysfs, "--profile", "dgx-h100",
                              "--port-file", agent_ports])
        aports = wait("agent ports", lambda: os.path.getsize(agent_ports) and
                      json.load(open(agent_ports)), 20)
        agent_http = f"127.0.0.1:{aports['http_port']}"
        findings = wait("findings from the agent's checks",
                        lambda: finding_series(get(f"http://{agg_http}/metrics")), 30)
        procs.check_alive()

        prom_port = free_port()
        cfg = os.path.join(work, "prometheus.yml")
        with open(cfg, "w") as f:
            f.write(f"""global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
rule_files: ['{RULES}']
scrape_configs:
  - job_name: fabricwatch-aggregator
    static_configs: [{{targets: ['{agg_http}'], labels: {{instance: aggregator}}}}]
  - job_name: fabricwatch-agent
    static_configs: [{{targets: ['{agent_http}'], labels: {{instance: node01}}}}]
""")
        procs.start("prometheus", [prometheus, "--config.file=" + cfg,
                                   "--storage.tsdb.path=" + os.path.join(work, "tsdb"),
                                   f"--web.listen-address=127.0.0.1:{prom_port}"])
        base = f"http://127.0.0.1:{prom_port}"
        wait("prometheus ready", lambda: get(base + "/-/ready"), 30)

        def all_alerts():
            procs.check_alive()
            alerts = json.loads(get(base + "/api/v1/alerts"))["data"]["alerts"]
            locs = {a["labels"].get("location") for a in alerts}
            return alerts if all(f["location"] in locs for f in findings) else None

        alerts = wait("an alert for every finding", all_alerts, 30)
        # A few more evaluations, so a self-health alert that would go pending has had its chance.
        time.sleep(3)
        alerts = json.loads(get(base + "/api/v1/alerts"))["data"]["alerts"]
        findings = finding_series(get(f"http://{agg_http}/metrics"))
        errors = check(alerts, findings)
        if errors:
            print("FAIL:\n  " + "\n  ".join(errors))
            return 1
        print(f"ok: {len(findings)} findings from the real daemons, each with its alert; "
              f"no self-health alert")
        return 0
    except (TimeoutError, RuntimeError) as e:
        print(f"FAIL: {e}")
        return 1
    finally:
        procs.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
