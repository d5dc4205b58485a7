#!/usr/bin/env python3
"""The status page renders hostile node names as text (issue 17 part 4), in headless Chromium.

A real aggregator on loopback (no fabric map) with two real agents whose --node-name is markup:
  <script>alert(1)</script>"'&      and      <img src=x onerror="document.title='xss'">
The page is loaded with the first one chosen for the pair drill-down (#node=...). The test
asserts on the DOM after the page's scripts ran:
  - the page's own script rendered from the API (the data-fw-refreshes marker, which only
    status_page.js sets, and no API error);
  - each name is a text node inside the node table, the drill-down's select and header, and the
    findings' locations; the DOM holds no element the names spell (no second <script>, no <img>);
  - document.title is unchanged (an injected handler would have set it);
  - without a fabric map the matrix shows a note instead;
  - the responses carry the Content-Security-Policy;
  - behind a reverse proxy that serves the aggregator under /fabricwatch/, the page still loads
    its script and the API (every path it uses is relative).
A screenshot is saved as FW_ARTIFACT_DIR/status_page_xss.png.

Usage: test_status_page_xss.py AGGREGATOR_BIN AGENT_BIN TESTDATA_DIR (exits 77 without chromium)
"""

import http.server
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import browser  # noqa: E402

SCRIPT_NAME = "<script>alert(1)</script>\"'&"
IMG_NAME = "<img src=x onerror=\"document.title='xss'\">"
TITLE = "fabricwatch status"


def wait_for(what, fn, timeout, interval=0.3):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = fn()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout} s waiting for {what} (last: {last!r})")


def get(url):
    with urllib.request.urlopen(url, timeout=5) as r:
        return r.status, dict(r.headers), r.read().decode()


class Daemons:
    """The aggregator and two agents on loopback; stopped by PID on exit."""

    def __init__(self, agg_bin, agent_bin, testdata):
        self.agg_bin, self.agent_bin, self.testdata = agg_bin, agent_bin, testdata
        self.work = tempfile.mkdtemp(prefix="fw-browser-xss-")
        self.procs = []

    def spawn(self, argv, log):
        p = subprocess.Popen(argv, stdout=open(os.path.join(self.work, log), "w"),
                             stderr=subprocess.STDOUT)
        self.procs.append(p)
        return p

    def read_ports(self, name):
        path = os.path.join(self.work, name)
        wait_for(path, lambda: os.path.exists(path) and os.path.getsize(path) > 0, 20)
        with open(path) as f:
            return json.load(f)

    def __enter__(self):
        self.spawn([self.agg_bin, "--insecure", "--grpc-listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0",
                    "--port-file", os.path.join(self.work, "agg.ports"), "--tick", "1s"],
                   "aggregator.log")
        ports = self.read_ports("agg.ports")
        self.base = f"http://127.0.0.1:{ports['http_port']}"
        for i, name in enumerate((SCRIPT_NAME, IMG_NAME)):
            self.spawn([self.agent_bin, "--insecure", "--aggregator", f"127.0.0.1:{ports['grpc_port']}",
                        "--node-name", name, "--http-listen", "127.0.0.1:0",
                        "--probe-address", "127.0.0.1", "--probe-port", "0",
                        "--hwloc-xml", os.path.join(self.testdata, "hwloc",
                                                    "psmgmt-topo.jrc0386.xml"),
                        "--sysfs-root", os.path.join(self.testdata, "sysfs", "gpud-h100")],
                       f"agent{i}.log")
        return self

    def __exit__(self, *exc):
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in self.procs:
            try:
                p.wait(5)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        if exc[0] is not None:
            for name in sorted(os.listdir(self.work)):
                if name.endswith(".log"):
                    with open(os.path.join(self.work, name)) as f:
                        print(f"----- {name}\n{f.read()[-2000:]}", file=sys.stderr)
        subprocess.run(["rm", "-rf", self.work], check=False)

    def api(self, path):
        return json.loads(get(self.base + path)[2])


class PrefixProxy:
    """A reverse proxy on loopback that serves `base` under PREFIX, as an ingress might."""

    PREFIX = "/fabricwatch/"

    def __init__(self, base):
        prefix = self.PREFIX

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                if not self.path.startswith(prefix):
                    self.send_error(404)
                    return
                try:
                    status, headers, body = get(base + "/" + self.path[len(prefix):])
                except urllib.error.HTTPError as e:
                    status, headers, body = e.code, dict(e.headers), e.read().decode()
                data = body.encode()
                self.send_response(status)
                for k in ("Content-Type", "Content-Security-Policy"):
                    if k in headers:
                        self.send_header(k, headers[k])
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}{prefix}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def check(cond, msg):
    if not cond:
        raise AssertionError(msg)


def main():
    if len(sys.argv) != 4:
        print(__doc__, file=sys.stderr)
        return 2
    try:
        browser.chromium_path()
    except browser.NoBrowser as e:
        print(f"SKIP: {e}", file=sys.stderr)
        return browser.SKIP
    artifacts = os.environ.get("FW_ARTIFACT_DIR") or tempfile.gettempdir()
    os.makedirs(artifacts, exist_ok=True)
    with Daemons(*sys.argv[1:4]) as d:
        wait_for("both agents to connect", lambda: {n["name"] for n in d.api("/api/v1/nodes")
                                                    if n.get("connected")}
                 >= {SCRIPT_NAME, IMG_NAME}, 20)
        pairs_path = "/api/v1/pairs?src=" + urllib.parse.quote(SCRIPT_NAME, safe="")
        wait_for("a probed pair from the <script> node", lambda: any(
            p["dst"] == IMG_NAME for p in d.api(pairs_path)), 30)

        status, headers, _ = get(d.base + "/")
        csp = headers.get("Content-Security-Policy", "")
        check(status == 200 and "script-src 'self'" in csp and "default-src 'none'" in csp,
              f"GET / answered {status} with CSP {csp!r}")

        url = d.base + "/#node=" + urllib.parse.quote(SCRIPT_NAME, safe="")
        dom_text = browser.dump_dom(url)
        tree = browser.parse(dom_text)
        root = tree.find("html")
        check(root is not None and int(root.attrs.get("data-fw-refreshes", "0")) >= 1,
              "status_page.js did not render (no data-fw-refreshes marker):\n" + dom_text[:3000])
        check(root.attrs.get("data-fw-errors") == "0",
              "the page reported API errors: " + tree.find(id="error").text())
        title = tree.find("title").text()
        check(title == TITLE, f"document.title changed to {title!r}")

        # The names are text in the node table, in the same rows as their data attribute.
        names = [r.attrs.get("data-node") for r in tree.find(id="nodes").find("tbody")
                 .find_all("tr")]
        cells = [c.text() for c in tree.find(id="nodes").find_all("td", class_="name")]
        check(sorted(names) == sorted([SCRIPT_NAME, IMG_NAME]) and
              sorted(cells) == sorted([SCRIPT_NAME, IMG_NAME]),
              f"node table names {cells!r} (data-node {names!r})")
        check("&lt;script&gt;alert(1)&lt;/script&gt;\"'&amp;" in dom_text,
              "the <script> name is not escaped text in the serialized DOM")
        check("&lt;img src=x onerror=\"document.title='xss'\"&gt;" in dom_text,
              "the <img> name is not escaped text in the serialized DOM")
        # Nothing the names spell became an element.
        scripts = tree.find_all("script")
        check([s.attrs.get("src") for s in scripts] == ["static/status.js"],
              f"script elements in the DOM: {scripts}")
        check(tree.find_all("img") == [], f"img elements in the DOM: {tree.find_all('img')}")
        check(all(not k.startswith("on") for e in tree.iter() for k in e.attrs),
              "an element carries an inline event handler")

        # The pair drill-down opened for the <script> node, its peer named as text.
        select = tree.find(id="pair-node")
        chosen = [o for o in select.find_all("option") if "selected" in o.attrs or
                  o.attrs.get("value") == SCRIPT_NAME]
        check(any(o.text() == SCRIPT_NAME and o.attrs.get("value") == SCRIPT_NAME
                  for o in chosen), f"drill-down options {[o.attrs for o in chosen]}")
        link = tree.find(id="pairs-json")
        check(urllib.parse.unquote(link.attrs.get("href", "")) == "api/v1/pairs?src=" + SCRIPT_NAME
              and "hidden" not in link.attrs,
              f"drill-down JSON link {link.attrs}")
        rows, _ = browser.table_rows(tree.find(id="pairs"))
        check(any(r and r[0] == IMG_NAME for r in rows), f"pair rows {rows[:5]}")

        # Findings located on these nodes (the test data's saturated port counters) keep the name
        # as text too.
        locs = [c.text() for c in tree.find(id="findings").find_all("td", class_="location")]
        check(all("<" not in c or SCRIPT_NAME in c or IMG_NAME in c for c in locs),
              f"finding locations {locs[:4]}")
        note = tree.find(id="matrix-note")
        check(note is not None and "hidden" not in note.attrs and
              "No fabric map" in note.text(), "no 'No fabric map' note under the matrix")

        # Behind a reverse proxy that adds a path prefix, the page still finds its assets and API.
        proxy = PrefixProxy(d.base)
        try:
            proxied = browser.parse(browser.dump_dom(proxy.url))
        finally:
            proxy.close()
        proot = proxied.find("html")
        proxied_names = sorted(c.text() for c in proxied.find(id="nodes").find_all("td",
                                                                                 class_="name"))
        check(int(proot.attrs.get("data-fw-refreshes", "0")) >= 1 and
              proot.attrs.get("data-fw-errors") == "0" and
              proxied_names == sorted([SCRIPT_NAME, IMG_NAME]),
              f"under {PrefixProxy.PREFIX}: markers {proot.attrs}, names {proxied_names}")

        shot = browser.screenshot(url, os.path.join(artifacts, "status_page_xss.png"))
        print(f"PASS: both markup node names render as text, title {title!r}, "
              f"{len(rows)} pair rows, {len(locs)} findings; screenshot {shot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
