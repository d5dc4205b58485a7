#!/usr/bin/env python3
"""The `fabricwatch` CLI against a live aggregator with two agents on loopback.

Node cli-a runs on the JURECA-DC topology export with the H100 InfiniBand sysfs tree (its
saturated counters give port_errors warnings) and PCIe link files in which GPU1 trained at x8 of
x16 (a critical pcie_downtrained). Node cli-b has the same topology and healthy PCIe links only.
A fabric map puts them under two leaves of one spine (probing 127.0.0.1 and 127.0.0.2), so links
have rows.
Every verb runs in text and json; the exit codes must match across formats and the content must be
what a user reads. Then the error paths: an unreachable API, a server answering 404, HTML, the
wrong JSON and non-HTTP bytes (all exit 3), the deprecated --aggregator flag and FABRICWATCH_API.

Usage: cli_e2e_test.py CLI AGGREGATOR AGENT TESTDATA
"""
import http.server
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "pylib"))
from loopback import Checks, wait_for  # noqa: E402

CLI, AGG, AGENT, TESTDATA = sys.argv[1:5]
HWLOC = os.path.join(TESTDATA, "hwloc", "psmgmt-topo.jrc0386.xml")
IB_SYSFS = os.path.join(TESTDATA, "sysfs", "gpud-h100")
DOWNTRAINED_GPU = "0000:44:00.0"  # GPU1 in psmgmt-topo.jrc0386.xml

check = Checks()
failures = check.failures


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def cli(*args, env=None, timeout=20):
    e = dict(os.environ)
    e.pop("FABRICWATCH_API", None)
    if env:
        e.update(env)
    p = subprocess.run([CLI, *args], capture_output=True, text=True, timeout=timeout, env=e)
    return p.returncode, p.stdout, p.stderr


def write_pcie(root, bdfs, downtrained=()):
    for bdf in bdfs:
        d = os.path.join(root, "bus", "pci", "devices", bdf)
        os.makedirs(d, exist_ok=True)
        width = "8" if bdf in downtrained else "16"
        for name, value in (("current_link_speed", "16.0 GT/s PCIe"),
                            ("max_link_speed", "16.0 GT/s PCIe"),
                            ("current_link_width", width), ("max_link_width", "16")):
            with open(os.path.join(d, name), "w") as f:
                f.write(value + "\n")


def http_get(port, path):
    import urllib.request
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
        return json.load(r)


class GarbageHandler(http.server.BaseHTTPRequestHandler):
    mode = "404"

    def do_GET(self):
        mode = GarbageHandler.mode
        if mode == "raw":
            self.wfile.write(b"\x00\x01 this is not HTTP\r\n\r\n")
            return
        body, status, ctype = {
            "404": (b"404 page not found\n", 404, "text/plain"),
            "500": (b"oops\n", 500, "text/plain"),
            "html": (b"<!doctype html><html>fabricwatch</html>", 200, "text/html"),
            "object": (b'{"error": "not an array"}', 200, "application/json"),
            "scalars": (b'[1, "x", null]', 200, "application/json"),
        }[mode]
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


FABRIC_MAP = """routing: ecmp
switches:
  - {name: leaf1, tier: leaf}
  - {name: leaf2, tier: leaf}
  - {name: spine1, tier: spine}
links:
  - {a: leaf1, b: spine1}
  - {a: leaf2, b: spine1}
hosts:
  - {node: cli-a, nic: mlx5_0, address: 127.0.0.1, switch: leaf1}
  - {node: cli-b, nic: mlx5_0, address: 127.0.0.2, switch: leaf2}
"""
LINK_IDS = {"leaf1~spine1", "leaf2~spine1", "cli-a:mlx5_0~leaf1", "cli-b:mlx5_0~leaf2"}

VERBS = [["status"], ["nodes"], ["findings"], ["findings", "--all"], ["links"], ["pairs"],
         ["pairs", "--src", "cli-a", "--dst", "cli-b"], ["topo", "cli-a"], ["topo", "cli-b"]]


def main():
    work = tempfile.mkdtemp(prefix="fw-cli-e2e.")
    procs = []
    try:
        # The PCIe targets are what the agent's own discovery asks sysfs for.
        probe = subprocess.run([AGENT, "check", "--format", "json", "--hwloc-xml", HWLOC,
                                "--sysfs-root", os.path.join(work, "empty")],
                               capture_output=True, text=True, timeout=60)
        bdfs = [l["bdf"] for l in json.loads(probe.stdout)["pcie"]]
        check(DOWNTRAINED_GPU in bdfs, "the topology has GPU1 at 0000:44:00.0", str(bdfs))
        sys_a, sys_b = os.path.join(work, "sys-a"), os.path.join(work, "sys-b")
        shutil.copytree(IB_SYSFS, sys_a, symlinks=True)
        write_pcie(sys_a, bdfs, downtrained={DOWNTRAINED_GPU})
        write_pcie(sys_b, bdfs)

        fabric_map = os.path.join(work, "fabric.yaml")
        with open(fabric_map, "w") as f:
            f.write(FABRIC_MAP)
        ports_file = os.path.join(work, "agg.ports")
        agg_log = open(os.path.join(work, "aggregator.log"), "w")
        procs.append(subprocess.Popen(
            [AGG, "--insecure", "--grpc-listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0",
             "--fabric-map", fabric_map, "--port-file", ports_file], stdout=agg_log, stderr=subprocess.STDOUT))
        ports = wait_for(lambda: json.load(open(ports_file)), 30, "the aggregator's port file")
        api = f"127.0.0.1:{ports['http_port']}"
        for name, root, address in (("cli-a", sys_a, "127.0.0.1"), ("cli-b", sys_b, "127.0.0.2")):
            log = open(os.path.join(work, f"{name}.log"), "w")
            procs.append(subprocess.Popen(
                [AGENT, "--insecure", "--aggregator", f"127.0.0.1:{ports['grpc_port']}", "--node-name", name,
                 "--http-listen", "127.0.0.1:0", "--probe-address", address,
                 "--probe-port", "0", "--hwloc-xml", HWLOC, "--sysfs-root", root],
                stdout=log, stderr=subprocess.STDOUT))

        def ready():
            nodes = http_get(ports["http_port"], "/api/v1/nodes?topology=true")
            findings = http_get(ports["http_port"], "/api/v1/findings?active=true")
            pairs = http_get(ports["http_port"], "/api/v1/pairs")
            links = http_get(ports["http_port"], "/api/v1/links")
            return (len(nodes) == 2 and all(n["connected"] and "pcie" in n["inventory"]
                                            for n in nodes)
                    and any(f["kind"] == "pcie_downtrained" for f in findings)
                    and any(p["windows"]["60s"]["probes"] > 0 for p in pairs)
                    and {l["id"] for l in links} == LINK_IDS and all(l["probes"] > 0 for l in links))
        wait_for(ready, 60, "both agents, their check reports, the PCIe finding, probes on links")

        # The API fields topo reads: only on request, so the fleet-wide list stays small.
        plain = http_get(ports["http_port"], "/api/v1/nodes")
        check(all("affinity" not in n["inventory"] and "pcie" not in n["inventory"]
                  for n in plain), "the plain node list has no topology fields")
        one = http_get(ports["http_port"], "/api/v1/nodes?name=cli-a")
        check(len(one) == 1 and one[0]["name"] == "cli-a"
              and len(one[0]["inventory"]["affinity"]) == 16
              and len(one[0]["inventory"]["pcie"]) == len(bdfs),
              "?name=cli-a: that node with 4x4 affinity rows and every PCIe link",
              json.dumps(one)[:1000])
        check(http_get(ports["http_port"], "/api/v1/nodes?name=nobody") == [], "?name=nobody: []")
        plain_a = [n for n in plain if n["name"] == "cli-a"]
        if os.environ.get("FW_CLI_SIZES") and one and plain_a:
            print(f"size: cli-a entry {len(json.dumps(plain_a[0], separators=(',', ':')))} bytes "
                  f"plain, {len(json.dumps(one[0], separators=(',', ':')))} with topology")
        try:
            http_get(ports["http_port"], "/api/v1/nodes?topology=maybe")
            check(False, "?topology=maybe: HTTP 400")
        except OSError as e:
            check(getattr(e, "code", None) == 400, "?topology=maybe: HTTP 400", str(e))

        results = {}
        for verb in VERBS:
            rc_t, out_t, err_t = cli("--api", api, *verb)
            rc_j, out_j, err_j = cli("--api", api, "--format", "json", *verb)
            name = " ".join(verb)
            check(rc_t == rc_j, f"{name}: exit code text {rc_t} == json {rc_j}", err_t + err_j)
            check(rc_t in (0, 1, 2), f"{name}: a verdict, not an error (rc {rc_t})", err_t)
            try:
                doc = json.loads(out_j)
            except ValueError:
                doc = None
                check(False, f"{name}: --format json prints JSON", out_j)
            results[name] = (rc_t, out_t, doc)
            print(f"ok: {name}: exit {rc_t} in both formats", flush=True)

        rc, text, doc = results["status"]
        check(rc == 2, "status: critical (a critical finding is active)", text)
        check(text.startswith("CRITICAL: 2/2 agents connected"), "status text", text)
        check(doc["nodes"] == 2 and doc["connected"] == 2 and doc["exit_code"] == 2
              and doc["findings_critical"] >= 1, "status json", json.dumps(doc))

        rc, text, doc = results["nodes"]
        check(rc == 2, "nodes: cli-a's health is critical", text)
        lines = {l.split()[0]: l.split() for l in text.splitlines()[1:] if l.strip()}
        check(lines.get("cli-a", [])[1:5] == ["yes", "critical", "4", "6"], "nodes text cli-a",
              text)
        check(lines.get("cli-b", [])[1:3] == ["yes", "ok"], "nodes text cli-b", text)
        check(sorted(n["name"] for n in doc) == ["cli-a", "cli-b"], "nodes json names")

        rc, text, doc = results["findings"]
        check(rc == 2, "findings: critical", text)
        check("pcie_downtrained" in text and "cli-a/0000:44:00.0" in text, "findings text", text)
        check(any(f["kind"] == "pcie_downtrained" and f["location"]["node"] == "cli-a"
                  and f["location"]["device"] == DOWNTRAINED_GPU for f in doc),
              "findings json names the downtrained GPU")
        check(results["findings --all"][0] == 2, "findings --all: critical")

        rc, text, doc = results["links"]
        check(rc == 0, "links: ok on a clean loopback", text)
        check({l["id"] for l in doc} == LINK_IDS
              and all(l["state"] in ("ok", "unknown") for l in doc), "links json", json.dumps(doc))
        rows = {l.split()[0]: l.split() for l in text.splitlines()[1:] if l.strip()}
        check(text.split()[:2] == ["LINK", "STATE"] and set(rows) == LINK_IDS
              and all(r[1] in ("ok", "unknown") for r in rows.values()), "links text", text)

        for name in ("pairs", "pairs --src cli-a --dst cli-b"):
            rc, text, doc = results[name]
            check(rc == 0, f"{name}: ok (no pair findings on a clean loopback)", text)
            check(text.splitlines()[0].split()[:3] == ["SRC", "DST", "TRANSPORT"],
                  f"{name}: table header", text)
        rc, text, doc = results["pairs --src cli-a --dst cli-b"]
        check(len(doc) > 0 and all(p["src"] == "cli-a" and p["dst"] == "cli-b" for p in doc),
              "pairs --src/--dst filters", json.dumps(doc)[:500])
        check(all(l.split()[:2] == ["cli-a", "cli-b"] and l.split()[3] == "inter_leaf"
                  for l in text.splitlines()[1:] if l),
              "pairs text rows are cli-a -> cli-b across leaves", text)

        rc, text, doc = results["topo cli-a"]
        check(rc == 2, "topo cli-a: critical (GPU1 at x8 of x16)", text)
        check("      NIC0  NIC1  NIC2  NIC3  NUMA Affinity\n" in text, "topo matrix header", text)
        # Each A100 shares a PCIe switch with one HDR NIC (tests/testdata/README.md).
        check("GPU0  SYS   PXB   SYS   SYS   3\n" in text, "topo matrix row GPU0", text)
        check("GPU1  PXB   SYS   SYS   SYS   1\n" in text, "topo matrix row GPU1", text)
        check("NIC0: mlx5_0 (ib0)" in text, "topo NIC legend", text)
        row = [l for l in text.splitlines() if l.strip().startswith(DOWNTRAINED_GPU)]
        check(len(row) == 1 and "x8 / x16" in row[0] and "DOWNTRAINED (critical)" in row[0],
              "topo marks the downtrained GPU link", text)
        check(text.count("DOWNTRAINED") == 1, "topo marks only that link", text)
        check("verdict: CRITICAL (exit 2)" in text, "topo text verdict", text)
        check(doc["affinity"]["nics"] == ["mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"],
              "topo json columns", json.dumps(doc.get("affinity")))
        states = {l["bdf"]: l["state"] for l in doc["pcie"]}
        check(states.get(DOWNTRAINED_GPU) == "downtrained" and len(states) == len(bdfs)
              and sum(s == "ok" for s in states.values()) == len(bdfs) - 1,
              "topo json PCIe states", json.dumps(states))
        check(doc["verdict"] == "critical" and doc["exit_code"] == 2, "topo json verdict")

        rc, text, doc = results["topo cli-b"]
        check(rc == 0 and "verdict: OK (exit 0)" in text and "DOWNTRAINED" not in text,
              "topo cli-b: healthy", text)
        check(doc["findings"] == [] and doc["exit_code"] == 0, "topo cli-b json")

        for fmt in ("text", "json"):
            rc, out, err = cli("--api", api, "--format", fmt, "topo", "no-such-node")
            check(rc == 3 and "node 'no-such-node' is not known" in err and "cli-a" in err,
                  f"topo of an unknown node ({fmt}): exit 3 with the known names", err)

        # The deprecated flag, the environment variable and flags after the verb.
        rc, out, err = cli("--aggregator", api, "status")
        check(rc == 2 and out.startswith("CRITICAL") and
              err.count("\n") == 1 and "--aggregator is deprecated" in err,
              "--aggregator still works with a one-line deprecation note", err)
        rc, out, err = cli("status", env={"FABRICWATCH_API": "http://" + api + "/"})
        check(rc == 2 and err == "", "FABRICWATCH_API", err)
        rc, out, err = cli("status", "--api", api, "--format", "json")
        check(rc == 2 and json.loads(out)["exit_code"] == 2, "flags after the verb", err)
        rc, out, err = cli("--api", api, "--aggregator", "127.0.0.1:1", "status")
        check(rc == 3 and "disagree" in err, "--api and --aggregator that disagree: exit 3", err)

        # An aggregator that is not there.
        dead = f"127.0.0.1:{free_port()}"
        for verb in VERBS:
            for fmt in ("text", "json"):
                rc, out, err = cli("--api", dead, "--format", fmt, *verb)
                check(rc == 3 and f"cannot reach the aggregator's HTTP API at {dead}" in err
                      and out == "", f"unreachable, {' '.join(verb)} ({fmt}): exit 3", err)

        # A server that is not the aggregator's API.
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), GarbageHandler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        bad = f"127.0.0.1:{server.server_address[1]}"
        expect = {"404": "answered HTTP 404", "500": "answered HTTP 500",
                  "html": "did not return JSON", "object": "expected an array",
                  "scalars": "expected objects", "raw": "malformed HTTP response"}
        for mode, message in expect.items():
            GarbageHandler.mode = mode
            for verb in VERBS:
                for fmt in ("text", "json"):
                    rc, out, err = cli("--api", bad, "--format", fmt, *verb)
                    check(rc == 3 and message in err and out == "",
                          f"{mode} server, {' '.join(verb)} ({fmt}): exit 3 '{message}'",
                          f"rc={rc} out={out[:200]} err={err}")
        server.shutdown()
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        if failures and os.environ.get("FW_KEEP_TEMP"):
            print(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    if failures:
        print(f"{len(failures)} checks failed")
        return 1
    print("PASS: every verb agrees across text and json, and every error path exits 3")
    return 0


if __name__ == "__main__":
    sys.exit(main())
