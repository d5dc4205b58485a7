#!/usr/bin/env python3
"""Checks the example alertmanager.yml with amtool and with a real Alertmanager on 127.0.0.1.

1. amtool check-config, and amtool config routes test: critical pages, warning tickets, info
   goes nowhere.
2. prometheus-alertmanager on a free loopback port (clustering off, temporary storage, the
   example's webhook URLs pointed at a closed loopback port so nothing is ever delivered). Alerts
   shaped like the ones fabricwatch.rules.yml emits are posted to /api/v2/alerts, and
   /api/v2/alerts must then report exactly the expected ones as inhibited (by which source) and
   the rest as active, each routed to the expected receiver; /api/v2/alerts/groups must group
   them by node, link and switch.

The process is stopped by its PID on every path. Exit 0 pass, 1 fail, 77 skip (tools missing).
"""

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
CONFIG = os.path.join(HERE, "alertmanager.yml")


def fail(msg):
    print("FAIL: " + msg)
    return 1


def finding(alertname, severity, **labels):
    """An alert as a fabricwatch finding rule emits it (labels only; annotations do not matter here)."""
    out = {"alertname": alertname, "severity": severity}
    out.update(labels)
    return out


def link(loc):
    a, b = loc.split("~")
    return {"location": loc, "link": loc, "end_a": a, "end_b": b}


def switch(name):
    return {"location": name, "switch": name, "end_a": name, "end_b": name}


# name in this test -> (labels, expected receiver, names of the alerts that must inhibit it)
CASES = {
    # A critical switch alert on spine1 inhibits links at either end of spine1.
    "switch spine1": (finding("FabricSwitchDegraded", "critical", kind="switch_degraded", **switch("spine1")),
                      "fabric-pager", []),
    "link leaf1~spine1 (spine1 is end_b)": (
        finding("FabricLinkDegraded", "warning", kind="link_degraded", **link("leaf1~spine1")),
        "fabric-tickets", ["switch spine1"]),
    "link spine1~super1 (spine1 is end_a)": (
        finding("FabricLinkDown", "critical", kind="link_down", **link("spine1~super1")),
        "fabric-pager", ["switch spine1"]),
    "link leaf3~spine9 (no switch alert on either end)": (
        finding("FabricLinkDegraded", "critical", kind="link_degraded", **link("leaf3~spine9")),
        "fabric-pager", []),
    # A warning switch alert (congested spine2) inhibits warnings on its links, not criticals.
    "switch spine2 congested": (finding("FabricLinkCongested", "warning", kind="congestion", **switch("spine2")),
                                "fabric-tickets", []),
    "link leaf4~spine2 congested": (
        finding("FabricLinkCongested", "warning", kind="congestion", **link("leaf4~spine2")),
        "fabric-tickets", ["switch spine2 congested"]),
    "link leaf5~spine2 down": (
        finding("FabricLinkDown", "critical", kind="link_down", **link("leaf5~spine2")),
        "fabric-pager", []),
    # A paused node's alerts are inhibited, whatever their severity; another node's are not.
    "node07 maintenance": (finding("FabricwatchNodeMaintenance", "info", node="node07"), "blackhole", []),
    "node07 port errors": (
        finding("NicPortErrors", "warning", kind="port_errors", location="node07/mlx5_0/1",
                node="node07", device="mlx5_0", port="1"),
        "fabric-tickets", ["node07 maintenance"]),
    "node07 NIC down": (
        finding("FabricNicDown", "critical", kind="nic_down", location="node07/mlx5_1",
                node="node07", device="mlx5_1"),
        "fabric-pager", ["node07 maintenance"]),
    "node07 agent down": (finding("FabricwatchAgentDown", "warning", node="node07"),
                          "fabric-tickets", ["node07 maintenance"]),
    "node08 port errors": (
        finding("NicPortErrors", "warning", kind="port_errors", location="node08/mlx5_0/1",
                node="node08", device="mlx5_0", port="1"),
        "fabric-tickets", []),
    "node08 NIC degraded": (
        finding("FabricNicDegraded", "critical", kind="nic_degraded", location="node08/mlx5_0",
                node="node08", device="mlx5_0"),
        "fabric-pager", []),
    "node08 PCIe downtrained": (
        finding("FabricPcieDowntrained", "warning", kind="pcie_downtrained",
                location="node08/0000:3b:00.0", node="node08", device="0000:3b:00.0"),
        "fabric-tickets", []),
    # With the aggregator down, buffer drops reported by the agents are its consequence.
    "aggregator down": (finding("FabricwatchAggregatorDown", "critical", job="fabricwatch-aggregator"),
                        "fabric-pager", []),
    "agent buffer dropping": (
        finding("FabricwatchAgentBufferDropping", "warning", job="fabricwatch-agent",
                instance="node09:9752"),
        "fabric-tickets", ["aggregator down"]),
}
# Groups live under a route: node08's two warnings must share one group {node="node08"} (its
# critical NIC alert goes to the pager route, in a group of its own).
GROUPED = ["node08 PCIe downtrained", "node08 port errors"]


def amtool_checks(amtool):
    r = subprocess.run([amtool, "check-config", CONFIG], capture_output=True, text=True, timeout=30)
    if r.returncode != 0:
        return fail("amtool check-config:\n" + r.stdout + r.stderr)
    for labels, receiver in [
        (["severity=critical", "alertname=FabricLinkDown", "link=leaf1~spine1"], "fabric-pager"),
        (["severity=warning", "alertname=NicPortErrors", "node=node01"], "fabric-tickets"),
        (["severity=info", "alertname=FabricwatchNodeMaintenance", "node=node01"], "blackhole"),
        (["alertname=SomethingWithoutSeverity"], "fabric-tickets"),
    ]:
        r = subprocess.run([amtool, "config", "routes", "test", "--config.file=" + CONFIG,
                            "--verify.receivers=" + receiver] + labels,
                           capture_output=True, text=True, timeout=30)
        if r.returncode != 0:
            return fail(f"routing {labels} should reach {receiver}: {r.stdout.strip()} {r.stderr.strip()}")
    print("ok: amtool check-config and routes (critical pages, warning tickets, info nowhere)")
    return 0


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http(method, url, body=None, timeout=5):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        raw = resp.read()
        return json.loads(raw) if raw.strip() else None


def wait_ready(base, proc, deadline_s):
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        if proc.poll() is not None:
            return False
        try:
            urllib.request.urlopen(base + "/-/ready", timeout=1).read()
            return True
        except (urllib.error.URLError, OSError):
            time.sleep(0.2)
    return False


def check_inhibition(base):
    starts = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - 60))
    ends = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 3600))
    posted = [{"labels": dict(labels, test_case=name), "startsAt": starts, "endsAt": ends,
               "annotations": {"summary": name}} for name, (labels, _, _) in CASES.items()]
    http("POST", base + "/api/v2/alerts", posted)

    # Inhibition is evaluated when alerts are listed; allow the dispatcher a moment to see them.
    got = {}
    end = time.monotonic() + 15
    while time.monotonic() < end:
        alerts = http("GET", base + "/api/v2/alerts") or []
        got = {a["labels"].get("test_case"): a for a in alerts}
        if all(n in got for n in CASES) and all(
                bool(got[n]["status"]["inhibitedBy"]) == bool(CASES[n][2]) for n in CASES):
            break
        time.sleep(0.3)

    fp = {name: got[name]["fingerprint"] for name in got if name}
    errors = []
    for name, (_, receiver, inhibitors) in CASES.items():
        a = got.get(name)
        if a is None:
            errors.append(f"{name}: not listed by /api/v2/alerts")
            continue
        st = a["status"]
        want_by = sorted(fp[i] for i in inhibitors)
        if sorted(st["inhibitedBy"]) != want_by:
            by = [n for n, f in fp.items() if f in st["inhibitedBy"]]
            errors.append(f"{name}: inhibited by {by}, expected {inhibitors}")
        want_state = "suppressed" if inhibitors else "active"
        if st["state"] != want_state:
            errors.append(f"{name}: state {st['state']}, expected {want_state}")
        receivers = sorted(r["name"] for r in a["receivers"])
        if receivers != [receiver]:
            errors.append(f"{name}: routed to {receivers}, expected [{receiver}]")
        ok = not any(e.startswith(name + ":") for e in errors)
        print(f"{'ok' if ok else 'BAD'}: {name}: {st['state']}"
              f"{' by ' + ', '.join(inhibitors) if inhibitors else ''} -> {', '.join(receivers)}")
    if errors:
        return fail("\n  ".join([""] + errors))

    groups = http("GET", base + "/api/v2/alerts/groups") or []
    for g in groups:
        names = sorted(a["labels"].get("test_case") for a in g["alerts"])
        if GROUPED[0] in names:
            if sorted(GROUPED) != names or g["labels"].get("node") != "node08":
                return fail(f"node08's alerts should form one group by node, got {g['labels']}: {names}")
            print(f"ok: {GROUPED} notify as one group {g['labels']}")
            break
    else:
        return fail(f"no alert group holds {GROUPED[0]}")
    return 0


def main():
    amtool = shutil.which("amtool")
    am = shutil.which("prometheus-alertmanager") or shutil.which("alertmanager")
    if not amtool or not am:
        print("SKIP: amtool or prometheus-alertmanager not installed")
        return 77
    rc = amtool_checks(amtool)
    if rc:
        return rc

    tmp = tempfile.mkdtemp(prefix="fw-alertmanager-")
    proc = None
    try:
        # The example's receivers point at 127.0.0.1:9095; point them at a closed port instead so
        # a notification can never reach whatever listens there.
        with open(CONFIG, encoding="utf-8") as f:
            cfg = f.read().replace("http://127.0.0.1:9095/", "http://127.0.0.1:1/")
        cfg_path = os.path.join(tmp, "alertmanager.yml")
        with open(cfg_path, "w", encoding="utf-8") as f:
            f.write(cfg)
        port = free_port()
        base = f"http://127.0.0.1:{port}"
        log = open(os.path.join(tmp, "alertmanager.log"), "w")
        proc = subprocess.Popen(
            [am, "--config.file=" + cfg_path, "--storage.path=" + os.path.join(tmp, "data"),
             f"--web.listen-address=127.0.0.1:{port}", "--cluster.listen-address=",
             "--log.level=warn"],
            stdout=log, stderr=subprocess.STDOUT)
        if not wait_ready(base, proc, 20):
            log.flush()
            with open(os.path.join(tmp, "alertmanager.log"), encoding="utf-8") as f:
                print(f.read()[-2000:])
            return fail("alertmanager did not become ready on " + base)
        print(f"ok: alertmanager pid {proc.pid} ready on {base}")
        return check_inhibition(base)
    finally:
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
