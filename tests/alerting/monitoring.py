"""Real Prometheus and Alertmanager watching a namespace fabric fleet (Python 3 stdlib).

    with fwe2e.DaemonFabric(...) as run, monitoring.FleetMonitoring(run) as mon:
        mon.aggregator_url           # http://127.0.0.1:P, relayed into the mgmt namespace
        mon.query("fabricwatch_agents_connected")      # Prometheus /api/v1/query -> result list
        mon.alertmanager_alerts()    # Alertmanager /api/v2/alerts
        mon.webhook.events           # the notifications Alertmanager delivered

Prometheus and Alertmanager run in the root namespace on 127.0.0.1 (free ports, temporary state),
as they would on an operator's host. The fleet lives inside network namespaces that the root
namespace has no route to (docs/test-fabric.md), so each daemon's HTTP port is reached through a
PortForward: a listener on 127.0.0.1 whose outgoing connections are opened from inside the mgmt
namespace. No route, address or veth is added to the root namespace.
"""

import datetime
import glob
import http.server
import json
import os
import re
import selectors
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

_SOURCE = os.environ.get("FW_SOURCE_DIR") or os.path.dirname(os.path.dirname(
    os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(_SOURCE, "tests", "fabric_e2e"))
import fwe2e  # noqa: E402  (puts tests/fabric on sys.path)
import netns  # noqa: E402

AGGREGATOR_JOB = "fabricwatch-aggregator"
AGENT_JOB = "fabricwatch-agent"
_DURATION_RE = re.compile(r"(\d+)(ms|s|m|h|d|w|y)")
_UNIT_S = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800, "y": 31536000}


class MonitoringError(Exception):
    """Prometheus or Alertmanager could not be started or answered wrongly."""


def rule_files(source_dir):
    """The product's rule files: dashboards/prometheus/*.rules.yml (not the promtool tests)."""
    return sorted(glob.glob(os.path.join(source_dir, "dashboards", "prometheus", "*.rules.yml")))


def example_alertmanager_config(source_dir):
    """dashboards/alertmanager/alertmanager.yml, the product's example, or None."""
    path = os.path.join(source_dir, "dashboards", "alertmanager", "alertmanager.yml")
    return path if os.path.isfile(path) else None


def adapt_alertmanager_config(text, webhook_base, group_wait=None, group_interval=None):
    """An Alertmanager config with every receiver URL sent to webhook_base (the URL's path kept,
    so that notifications still say which integration they were for) and, when given, every
    group_wait and group_interval replaced. Routes, grouping and inhibitions stay as written.
    Returns (text, number of URLs rewritten)."""
    base = webhook_base.rstrip("/")
    text, urls = re.subn(r"(?m)^(\s*-?\s*url:\s*)['\"]?https?://[^/\s'\"]+(/[^\s'\"]*)?['\"]?",
                         lambda m: f"{m.group(1)}{base}{m.group(2) or '/'}", text)
    for key, value in (("group_wait", group_wait), ("group_interval", group_interval)):
        if value:
            text = re.sub(rf"(?m)^(\s*{key}:\s*)\S+", rf"\g<1>{value}", text)
    return text, urls


def free_port(preferred=None):
    """preferred when it can be bound on 127.0.0.1, else a free port the kernel picks."""
    for port in ([preferred] if preferred else []) + [0]:
        s = socket.socket()
        try:
            s.bind(("127.0.0.1", port))
            return s.getsockname()[1]
        except OSError:
            continue
        finally:
            s.close()
    raise MonitoringError("no free port on 127.0.0.1")


def parse_duration(text):
    """A Prometheus duration ('1m30s', '30s', '5m') in seconds."""
    text = text.strip().strip("'\"")
    parts = _DURATION_RE.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise ValueError(f"not a Prometheus duration: {text!r}")
    return sum(int(n) * _UNIT_S[u] for n, u in parts)


def format_duration(seconds):
    ms = int(round(seconds * 1000))
    return f"{ms // 1000}s" if ms % 1000 == 0 else f"{ms}ms"


def scale_for_durations(rules_text, scale):
    """The rule file with every `for:` duration multiplied by scale (at least 1 s when it was
    non-zero), everything else verbatim. Returns (text, [(old, new)])."""
    changes = []

    def repl(m):
        old = m.group(2)
        seconds = parse_duration(old)
        new = format_duration(max(1.0, seconds * scale)) if seconds > 0 else old
        changes.append((old, new))
        return f"{m.group(1)}{new}{m.group(3)}"

    text = re.sub(r"(?m)^(\s*for:\s*)(['\"]?[0-9a-z]+['\"]?)(\s*(?:#.*)?)$", repl, rules_text)
    return text, changes


class PortForward:
    """Relays connections to 127.0.0.1:port (root namespace) to addr:target_port as dialled from
    inside network namespace ns (from this namespace when ns is None). port is a preferred local
    port (a free one when it is busy). At most max_conns connections at once; close() ends them
    all."""

    def __init__(self, ns, addr, target_port, port=None, max_conns=32):
        self.ns, self.addr, self.target_port = ns, addr, target_port
        self.max_conns = max_conns
        self._stop = threading.Event()
        self._conns = set()
        self._lock = threading.Lock()
        self._listener = socket.socket()
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            self._listener.bind(("127.0.0.1", free_port(port)))
        except OSError:
            self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(16)
        self._listener.settimeout(0.2)
        self.port = self._listener.getsockname()[1]
        self._thread = threading.Thread(target=self._accept_loop, daemon=True,
                                        name=f"forward :{self.port} -> {ns} {addr}:{target_port}")
        self._thread.start()

    @property
    def address(self):
        return f"127.0.0.1:{self.port}"

    def _accept_loop(self):
        while not self._stop.is_set():
            try:
                client, _ = self._listener.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            with self._lock:
                full = len(self._conns) // 2 >= self.max_conns  # two sockets per connection
            if full:
                client.close()
                continue
            try:
                if self.ns is None:
                    upstream = socket.create_connection((self.addr, self.target_port), 5)
                else:
                    upstream = netns.call_in_namespace(self.ns, socket.create_connection,
                                                       (self.addr, self.target_port), 5,
                                                       timeout=10)
            except (OSError, netns.FabricError):
                client.close()  # the caller sees a reset, as with a daemon that is down
                continue
            threading.Thread(target=self._relay, args=(client, upstream), daemon=True).start()

    def _relay(self, a, b):
        with self._lock:
            self._conns.update((a, b))
        sel = selectors.DefaultSelector()
        try:
            sel.register(a, selectors.EVENT_READ, b)
            sel.register(b, selectors.EVENT_READ, a)
            while not self._stop.is_set():
                for key, _ in sel.select(timeout=0.5):
                    data = key.fileobj.recv(65536)
                    if not data:
                        return
                    key.data.sendall(data)
        except OSError:
            return
        finally:
            sel.close()
            with self._lock:
                self._conns.difference_update((a, b))
            a.close()
            b.close()

    def close(self):
        self._stop.set()
        self._listener.close()
        with self._lock:
            conns = list(self._conns)
        for c in conns:
            try:
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        self._thread.join(5)


class WebhookReceiver:
    """An Alertmanager webhook receiver on 127.0.0.1: records (monotonic time, payload) per POST."""

    def __init__(self):
        self.events = []
        self._lock = threading.Lock()
        owner = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", 0) or 0))
                try:
                    payload = json.loads(body)
                except ValueError:
                    payload = {"unparsed": body.decode(errors="replace")}
                with owner._lock:
                    owner.events.append((time.monotonic(), payload))
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args):
                pass

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}/"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True,
                                        name="alertmanager webhook")
        self._thread.start()

    def notifications(self, status=None, **labels):
        """[(monotonic time, alert)] of delivered alerts with these labels (and status); each
        alert gets the payload's "receiver" added."""
        with self._lock:
            events = list(self.events)
        out = []
        for t, payload in events:
            for a in payload.get("alerts", []):
                lab = a.get("labels", {})
                if all(lab.get(k) == v for k, v in labels.items()) and \
                        (status is None or a.get("status") == status):
                    out.append((t, dict(a, receiver=payload.get("receiver"))))
        return out

    def close(self):
        self._server.shutdown()
        self._server.server_close()


def http_json(url, timeout=5.0):
    """GET url and decode its JSON body; raises urllib/OS errors and ValueError."""
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return json.loads(r.read())


def _wait(what, fn, timeout, interval=0.2):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            last = fn()
            if last:
                return last
        except (OSError, ValueError, urllib.error.URLError) as e:
            last = e
        time.sleep(interval)
    raise MonitoringError(f"timed out after {timeout:.0f} s waiting for {what}: {last!r}"[:800])


class FleetMonitoring:
    """Prometheus (with our rules) and Alertmanager (with a webhook receiver) on 127.0.0.1,
    scraping the aggregator and every agent of a fwe2e.DaemonFabric through PortForwards.
    With servers=False only the relays run (the daemons' HTTP reachable from 127.0.0.1).

    rules_path: the rule file(s) to load (copies are written with `for:` durations times
    for_scale). alertmanager_example: an Alertmanager config to adapt (adapt_alertmanager_config)
    instead of the one-route test config.
    interval: Prometheus's scrape and evaluation interval. ports: preferred local ports
    {"aggregator", "prometheus", "alertmanager"}; busy ones fall back to free ports.
    """

    def __init__(self, run, rules_path, for_scale=1.0, interval="1s", ports=None,
                 group_wait="1s", group_interval="1s", keep_dir=False, servers=True,
                 external_labels=None, alertmanager_example=None):
        self.run = run
        self.rules_paths = [rules_path] if isinstance(rules_path, str) else list(rules_path)
        self.for_scale = for_scale
        self.interval = interval
        self.ports = dict(ports or {})
        self.group_wait, self.group_interval = group_wait, group_interval
        self.keep_dir = keep_dir or bool(os.environ.get("FW_KEEP_TEMP"))
        self.servers = servers
        self.external_labels = dict(external_labels or {})
        self.alertmanager_example = alertmanager_example
        self.prometheus_url = self.alertmanager_url = None
        self.dir = None
        self.forwards = {}
        self.procs = {}
        self.webhook = None
        self.for_changes = []

    # ------------------------------------------------------------------ lifecycle

    def __enter__(self):
        try:
            self.start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc):
        self.close()

    @staticmethod
    def binaries():
        """(prometheus, alertmanager) paths; raises MonitoringError naming what is missing."""
        prom = shutil.which("prometheus")
        am = shutil.which("prometheus-alertmanager") or shutil.which("alertmanager")
        missing = [n for n, p in (("prometheus", prom), ("prometheus-alertmanager", am)) if not p]
        if missing:
            raise MonitoringError(f"{' and '.join(missing)} not installed (scripts/setup installs "
                                  "them: apt-get install prometheus prometheus-alertmanager)")
        return prom, am

    def start(self):
        fab = self.run.fab
        mgmt = fab.mgmt_ns
        self.forwards["aggregator"] = PortForward(mgmt, fab.mgmt_address, fwe2e.HTTP_PORT,
                                                  port=self.ports.get("aggregator"))
        for name, h in fab.hosts.items():
            self.forwards[name] = PortForward(mgmt, h.mgmt_address, fwe2e.AGENT_HTTP_PORT)
        if not self.servers:
            return self
        prom_bin, am_bin = self.binaries()
        self.dir = tempfile.mkdtemp(prefix="fw-alerting.")
        self.webhook = WebhookReceiver()

        rules_copies = []
        for path in self.rules_paths:
            with open(path) as f:
                rules, changes = scale_for_durations(f.read(), self.for_scale)
            self.for_changes += changes
            rules_copies.append(os.path.join(self.dir, os.path.basename(path)))
            with open(rules_copies[-1], "w") as f:
                f.write(rules)

        am_port = free_port(self.ports.get("alertmanager"))
        with open(os.path.join(self.dir, "alertmanager.yml"), "w") as f:
            f.write(self.alertmanager_config())
        self._spawn("alertmanager", [
            am_bin, "--config.file", os.path.join(self.dir, "alertmanager.yml"),
            "--storage.path", os.path.join(self.dir, "am-data"),
            "--web.listen-address", f"127.0.0.1:{am_port}",
            "--cluster.listen-address=",  # no gossip port on 0.0.0.0:9094
            "--log.level", "warn"])
        self.alertmanager_url = f"http://127.0.0.1:{am_port}"

        prom_port = free_port(self.ports.get("prometheus"))
        with open(os.path.join(self.dir, "prometheus.yml"), "w") as f:
            f.write(self.prometheus_config(rules_copies, am_port))
        self._spawn("prometheus", [
            prom_bin, "--config.file", os.path.join(self.dir, "prometheus.yml"),
            "--storage.tsdb.path", os.path.join(self.dir, "tsdb"),
            "--web.listen-address", f"127.0.0.1:{prom_port}", "--log.level", "warn"])
        self.prometheus_url = f"http://127.0.0.1:{prom_port}"

        for name, url in (("alertmanager", self.alertmanager_url),
                          ("prometheus", self.prometheus_url)):
            _wait(f"{name} /-/ready", lambda u=url, n=name: self._ready(n, u), timeout=30)
        groups = self.rule_groups()
        if not groups:
            raise MonitoringError(f"Prometheus loaded no rule group from {rules_copies}:\n"
                                  + self.log("prometheus")[-2000:])
        return self

    def _spawn(self, name, argv):
        log = open(os.path.join(self.dir, f"{name}.log"), "wb")
        try:
            self.procs[name] = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log,
                                                stderr=subprocess.STDOUT, start_new_session=True)
        finally:
            log.close()

    def _ready(self, name, url):
        p = self.procs[name]
        if p.poll() is not None:
            raise MonitoringError(f"{name} exited with {p.returncode}:\n{self.log(name)[-2000:]}")
        with urllib.request.urlopen(url + "/-/ready", timeout=2) as r:
            return r.status == 200

    def log(self, name):
        try:
            with open(os.path.join(self.dir, f"{name}.log"), errors="replace") as f:
                return f.read()
        except (OSError, TypeError):
            return ""

    def close(self):
        """Stops Prometheus and Alertmanager by PID, closes the relays, removes the temp dir."""
        for name in ("prometheus", "alertmanager"):
            p = self.procs.pop(name, None)
            if p is not None and p.poll() is None:
                netns.terminate_pid(p.pid, grace=5.0, popen=p)
        for fw in self.forwards.values():
            fw.close()
        self.forwards = {}
        if self.webhook:
            self.webhook.close()
            self.webhook = None
        if self.dir and not self.keep_dir:
            shutil.rmtree(self.dir, ignore_errors=True)

    # ------------------------------------------------------------------ configuration

    def alertmanager_config(self):
        """With alertmanager_example: that file, receivers sent to the webhook and the test's
        group_wait/group_interval. Without: one route to the webhook."""
        if self.alertmanager_example:
            with open(self.alertmanager_example) as f:
                text, urls = adapt_alertmanager_config(f.read(), self.webhook.url,
                                                       self.group_wait, self.group_interval)
            if not urls:
                raise MonitoringError(f"{self.alertmanager_example} has no receiver URL to "
                                      "send to the test's webhook")
            return text
        return "\n".join([
            "# Test configuration: short waits so that delivery time is mostly Prometheus's.",
            "route:",
            "  receiver: webhook",
            "  group_by: [alertname, link]",
            f"  group_wait: {self.group_wait or '10s'}",
            f"  group_interval: {self.group_interval or '10s'}",
            "  repeat_interval: 1h",
            "receivers:",
            "  - name: webhook",
            "    webhook_configs:",
            f"      - url: {self.webhook.url}",
            "        send_resolved: true",
            ""])

    def prometheus_config(self, rules_files, am_port):
        agent_targets = "\n".join(
            f"      - targets: ['{self.forwards[n].address}']\n"
            f"        labels: {{instance: {n}}}" for n in self.run.fab.hosts)
        return f"""# Test configuration: the real rules (for: x{self.for_scale}), fast intervals.
global:
  scrape_interval: {self.interval}
  scrape_timeout: {self.interval}
  evaluation_interval: {self.interval}
  external_labels: {json.dumps(self.external_labels)}
rule_files: {json.dumps(rules_files)}
alerting:
  alertmanagers:
    - static_configs:
        - targets: ['127.0.0.1:{am_port}']
scrape_configs:
  - job_name: {AGGREGATOR_JOB}
    static_configs:
      - targets: ['{self.forwards["aggregator"].address}']
        labels: {{instance: aggregator}}
  - job_name: {AGENT_JOB}
    static_configs:
{agent_targets}
"""

    # ------------------------------------------------------------------ queries

    @property
    def aggregator_url(self):
        return f"http://{self.forwards['aggregator'].address}"

    def query(self, expr, timeout=10.0):
        """Prometheus instant query: the result list; raises MonitoringError on an error status."""
        url = self.prometheus_url + "/api/v1/query?" + urllib.parse.urlencode({"query": expr})
        try:
            body = http_json(url, timeout=timeout)
        except urllib.error.HTTPError as e:
            raise MonitoringError(f"query {expr!r}: HTTP {e.code}: {e.read()[:300]!r}") from None
        if body.get("status") != "success":
            raise MonitoringError(f"query {expr!r}: {body}")
        return body["data"]["result"]

    def label_values(self, label, match=None):
        q = f"?match[]={urllib.parse.quote(match)}" if match else ""
        return http_json(f"{self.prometheus_url}/api/v1/label/{label}/values{q}")["data"]

    def rule_groups(self):
        return http_json(self.prometheus_url + "/api/v1/rules")["data"]["groups"]

    def rule_errors(self):
        """[(rule name, last error)] of the rules whose last evaluation failed."""
        return [(r["name"], r.get("lastError")) for g in self.rule_groups() for r in g["rules"]
                if r.get("health") == "err"]

    def alert_rule_names(self):
        return sorted(r["name"] for g in self.rule_groups() for r in g["rules"]
                      if r.get("type") == "alerting")

    def prometheus_alerts(self):
        """Prometheus's own view: pending and firing alerts."""
        return http_json(self.prometheus_url + "/api/v1/alerts")["data"]["alerts"]

    def alertmanager_alerts(self):
        """Alertmanager /api/v2/alerts (active, silenced and inhibited; not resolved ones)."""
        return http_json(self.alertmanager_url + "/api/v2/alerts")

    def targets_health(self):
        """{scrape url: health} of every active target."""
        data = http_json(self.prometheus_url + "/api/v1/targets")["data"]["activeTargets"]
        return {t["labels"].get("instance", t["scrapeUrl"]): t["health"] for t in data}

    def wait_targets_up(self, timeout=40):
        """Every target scraped successfully once (the first scrape comes ~5 s after start)."""
        def all_up():
            h = self.targets_health()
            return h and all(v == "up" for v in h.values()) and h
        try:
            return _wait("every scrape target up", all_up, timeout, interval=0.5)
        except MonitoringError:
            raise MonitoringError(f"targets not all up: {self.targets_health()}") from None


def active_in_alertmanager(alert):
    """True when an /api/v2/alerts entry is active: state active (or suppressed) and its endsAt
    not in the past."""
    if alert.get("status", {}).get("state") not in ("active", "suppressed"):
        return False
    ends = alert.get("endsAt")
    if ends:
        t = datetime.datetime.fromisoformat(ends.replace("Z", "+00:00"))
        if t <= datetime.datetime.now(datetime.timezone.utc):
            return False
    return True
