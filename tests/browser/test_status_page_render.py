#!/usr/bin/env python3
"""status_page.js's rendering rules in headless Chromium, against a fixture API (no daemons).

A loopback server in this process serves the page's source files (daemon/aggregator/api/status_page.*)
and fixed JSON for the four endpoints, shaped like a large fleet with every link state, so the
test can assert what the live tests cannot reach:
  - a 96 x 8 leaf-spine matrix turns compact, sorts leaves naturally (leaf2 before leaf10), has an
    empty cell where the map has no link, and each state's class (flapping and down are red);
  - a host access link that is down is listed under the matrix, the ok ones only counted;
  - 1,200 nodes show the first 1,000, problems first (disconnected, then critical), with a note;
  - findings are counted by kind, critical kind first;
  - an endpoint answering 500 puts its path and error in the banner (data-fw-errors 1) while the
    rest of the page still renders.
Usage: test_status_page_render.py (exits 77 without chromium).
"""

import http.server
import json
import os
import sys
import tempfile
import threading
import urllib.parse

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE_DIR = os.environ.get("FW_SOURCE_DIR") or os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import browser  # noqa: E402

PAGE_DIR = os.path.join(SOURCE_DIR, "daemon", "aggregator", "api")
LEAVES, SPINES = 96, 8
MISSING = "leaf7~spine3"
STATES = {"leaf2~spine1": "flapping", "leaf3~spine2": "degraded", "leaf4~spine4": "congested",
          "leaf5~spine5": "down", "leaf6~spine6": "unknown"}
NODES = 1200
BROKEN_NODE = "node0001"  # its pairs endpoint answers 500


def links():
    out = []
    for i in range(1, LEAVES + 1):
        for j in range(1, SPINES + 1):
            lid = f"leaf{i}~spine{j}"
            if lid == MISSING:
                continue
            # Both orders of the ends occur in real maps (ids sort by name).
            a, b, at, bt = (f"leaf{i}", f"spine{j}", "leaf", "spine") if i % 2 else \
                (f"spine{j}", f"leaf{i}", "spine", "leaf")
            out.append({"id": lid, "a": a, "b": b, "a_tier": at, "b_tier": bt,
                        "state": STATES.get(lid, "ok"), "loss_ratio": 0.0,
                        "latency_inflation": 1.0, "bandwidth_ratio": None, "probes": 100.0,
                        "confidence": 0.9})
    for h, state in (("n1:mlx5_0", "down"), ("n2:mlx5_0", "ok"), ("n3:mlx5_0", "ok")):
        out.append({"id": f"{h}~leaf1", "a": h, "b": "leaf1", "a_tier": "host", "b_tier": "leaf",
                    "state": state, "loss_ratio": 1.0 if state == "down" else 0.0,
                    "latency_inflation": None, "bandwidth_ratio": None, "probes": 10.0,
                    "confidence": 0.8})
    return out


def nodes():
    out = []
    for i in range(1, NODES + 1):
        name = f"node{i:04d}"
        out.append({"name": name, "connected": i != 5, "health": "critical" if i == 7 else "ok",
                    "last_seen": "2026-12-03T12:00:00Z", "last_report_age_s": 1.0,
                    "version": "0.1.0", "inventory": {"gpus": [{}] * 8, "nics": [{}] * 4},
                    "ingest": {"batches": 10, "results": 100, "gaps": 0}})
    return out


FINDINGS = [
    {"id": "link:leaf2~spine1@1", "kind": "link_flapping", "severity": "critical", "active": True,
     "location": {"type": "link", "id": "leaf2~spine1"}, "summary": "leaf2~spine1 flaps.",
     "evidence": {"toggles": 4}, "confidence": 0.9, "first_seen": "2026-12-03T12:00:00Z",
     "last_seen": "2026-12-03T12:00:05Z"},
] + [
    {"id": f"nic:node00{i}@1", "kind": "port_errors", "severity": "warning", "active": True,
     "location": {"type": "nic", "id": f"node00{i}/mlx5_0/1", "node": f"node00{i}",
                  "device": "mlx5_0", "port": 1}, "summary": "errors.", "evidence": {},
     "confidence": 1.0, "first_seen": "2026-12-03T12:00:00Z", "last_seen": "2026-12-03T12:00:05Z"}
    for i in (10, 11)
]


class Handler(http.server.BaseHTTPRequestHandler):
    STATIC = {"/": ("status_page.html", "text/html; charset=utf-8"),
              "/static/status.js": ("status_page.js", "text/javascript; charset=utf-8"),
              "/static/status.css": ("status_page.css", "text/css; charset=utf-8")}

    def do_GET(self):
        url = urllib.parse.urlsplit(self.path)
        query = urllib.parse.parse_qs(url.query)
        if url.path in self.STATIC:
            name, ctype = self.STATIC[url.path]
            with open(os.path.join(PAGE_DIR, name), "rb") as f:
                body = f.read().replace(b"{{VERSION}}", b"fixture")
            return self.send(200, ctype, body)
        if url.path == "/api/v1/pairs" and query.get("src") == [BROKEN_NODE]:
            return self.send(500, "application/json", b'{"error": "boom"}')
        data = {"/api/v1/nodes": nodes, "/api/v1/links": links,
                "/api/v1/findings": lambda: FINDINGS, "/api/v1/pairs": lambda: []}.get(url.path)
        if data is None:
            return self.send(404, "text/plain", b"not found\n")
        return self.send(200, "application/json", json.dumps(data()).encode())

    def send(self, status, ctype, body):
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def check(cond, msg):
    if not cond:
        raise AssertionError(msg)


def main():
    try:
        browser.chromium_path()
    except browser.NoBrowser as e:
        print(f"SKIP: {e}", file=sys.stderr)
        return browser.SKIP
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/#node={BROKEN_NODE}"
        tree = browser.parse(browser.dump_dom(url))
        artifacts = os.environ.get("FW_ARTIFACT_DIR") or tempfile.gettempdir()
        os.makedirs(artifacts, exist_ok=True)
        shot = browser.screenshot(url, os.path.join(artifacts, "status_page_render.png"),
                                  height=1400)
    finally:
        server.shutdown()
        server.server_close()

    root = tree.find("html")
    check(int(root.attrs.get("data-fw-refreshes", "0")) >= 1, "the page did not render")

    # The matrix: compact, natural order, the gap, the states.
    matrix = tree.find(id="matrix")
    check("compact" in matrix.classes, f"a {LEAVES}x{SPINES} matrix is not compact")
    leaves = [th.text() for th in matrix.find("tbody").find_all("th")]
    check(leaves == [f"leaf{i}" for i in range(1, LEAVES + 1)], f"leaf order {leaves[:12]}")
    spines = [th.text() for th in matrix.find("thead").find_all("th")][1:]
    check(spines == [f"spine{j}" for j in range(1, SPINES + 1)], f"spine order {spines}")
    cells = {c.attrs["data-link"]: c for c in matrix.find_all("td") if "data-link" in c.attrs}
    check(len(cells) == LEAVES * SPINES - 1, f"{len(cells)} link cells")
    row7 = [c for c in matrix.find("tbody").find_all("tr")[6].children
            if isinstance(c, browser.Element) and c.tag == "td"]
    check("state-none" in row7[2].classes, f"leaf7 x spine3 cell {row7[2].attrs}")
    for lid, state in STATES.items():
        check(f"state-{state}" in cells[lid].classes, f"{lid}: {cells[lid].attrs}")
    check(cells["leaf1~spine1"].text() == "" and cells["leaf5~spine5"].text() == "down",
          "compact cells: words only where not ok")
    check(cells["leaf2~spine1"].attrs.get("title", "").startswith("leaf2~spine1: flapping"),
          f"title {cells['leaf2~spine1'].attrs.get('title')}")

    # Links outside the matrix: the down access link listed, the others counted.
    rows, _ = browser.table_rows(tree.find(id="other-links"))
    check([r[:2] for r in rows] == [["n1:mlx5_0~leaf1", "down"]], f"other links {rows}")
    check("3 links outside the matrix" in tree.find(id="other-links-note").text() and
          "2 ok, 0 unknown, 1 not ok" in tree.find(id="other-links-note").text(),
          tree.find(id="other-links-note").text())

    # Nodes: capped, problems first.
    node_rows = tree.find(id="nodes").find("tbody").find_all("tr")
    check(len(node_rows) == 1000, f"{len(node_rows)} node rows")
    first = [r.attrs.get("data-node") for r in node_rows[:3]]
    check(first == ["node0005", "node0007", "node0001"], f"first node rows {first}")
    check("Showing the first 1000 of 1200" in tree.find(id="nodes-note").text(),
          tree.find(id="nodes-note").text())
    check(tree.find(id="nodes-count").text() == "(1199 of 1200 connected)",
          tree.find(id="nodes-count").text())

    # Findings: by kind, critical first; summary line.
    kinds = [c.text() for c in tree.find(id="findings-kinds").find_all("span")]
    check(kinds == ["link_flapping × 1", "port_errors × 2"], f"kinds {kinds}")
    summary = tree.find(id="summary").text()
    check(summary.startswith("3 active findings (1 critical) · 5 of 770 links not ok · "
                             "1199 of 1200 agents connected, 2 unhealthy"), summary)

    # The failing endpoint: named in the banner, counted in the marker.
    error = tree.find(id="error")
    check("hidden" not in error.attrs and
          f"api/v1/pairs?src={BROKEN_NODE} answered HTTP 500: boom" in error.text(),
          f"error banner {error.attrs} {error.text()!r}")
    check(root.attrs.get("data-fw-errors") == "1", f"data-fw-errors {root.attrs}")
    print(f"PASS: compact {LEAVES}x{SPINES} matrix, {len(node_rows)} of {NODES} nodes, banner "
          f"{error.text()!r}; screenshot {shot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
