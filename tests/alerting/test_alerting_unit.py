#!/usr/bin/env python3
"""The pieces of the alerting end-to-end test that need no root: the `for:` rewrite of the real
rule file (promtool accepts the result), the Alertmanager test configuration (amtool accepts it),
template variables of the real dashboards, and the relay on loopback."""

import http.server
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import unittest
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dashboard_queries as dq  # noqa: E402
import monitoring  # noqa: E402
import fwe2e  # noqa: E402

RULES = monitoring.rule_files(fwe2e.SOURCE_DIR)


class DurationTest(unittest.TestCase):
    def test_parse(self):
        self.assertEqual(monitoring.parse_duration("30s"), 30)
        self.assertEqual(monitoring.parse_duration("1m30s"), 90)
        self.assertEqual(monitoring.parse_duration("'5m'"), 300)
        self.assertEqual(monitoring.parse_duration("1h"), 3600)
        for bad in ("", "5", "m5", "1x", "1m 30s"):
            with self.assertRaises(ValueError, msg=bad):
                monitoring.parse_duration(bad)

    def test_scale_keeps_everything_but_for(self):
        text = ("groups:\n  - name: g\n    rules:\n      - alert: A\n        expr: up == 0\n"
                "        for: 1m  # why\n        labels: {severity: warning}\n"
                "      - alert: B\n        expr: x > 0\n        for: 0s\n"
                "      - alert: C\n        expr: y > 0\n        for: 5s\n")
        out, changes = monitoring.scale_for_durations(text, 0.1)
        self.assertEqual(changes, [("1m", "6s"), ("0s", "0s"), ("5s", "1s")])
        self.assertIn("        for: 6s  # why\n", out)
        self.assertIn("        for: 1s\n", out)  # never below 1 s when it was non-zero
        self.assertEqual([ln for ln in out.splitlines() if "for:" not in ln],
                         [ln for ln in text.splitlines() if "for:" not in ln])

    def test_real_rules_scaled_pass_promtool(self):
        promtool = shutil.which("promtool")
        if not promtool:
            self.skipTest("promtool is not installed")
        self.assertIn("fabricwatch.rules.yml", [os.path.basename(p) for p in RULES])
        for rules in RULES:
            with open(rules) as f:
                text = f.read()
            out, changes = monitoring.scale_for_durations(text, 0.1)
            self.assertEqual(len(changes), len(re.findall(r"(?m)^\s*for:", text)),
                             f"{rules}: a for: line was not rewritten")
            for old, new in changes:
                self.assertLessEqual(monitoring.parse_duration(new),
                                     max(1, monitoring.parse_duration(old)))
            with tempfile.TemporaryDirectory() as d:
                path = os.path.join(d, "rules.yml")
                with open(path, "w") as f:
                    f.write(out)
                cp = subprocess.run([promtool, "check", "rules", path], capture_output=True,
                                    text=True, timeout=60)
                self.assertEqual(cp.returncode, 0, cp.stdout + cp.stderr)


class ConfigTest(unittest.TestCase):
    def test_alertmanager_config_passes_amtool(self):
        amtool = shutil.which("amtool")
        if not amtool:
            self.skipTest("amtool is not installed")
        mon = monitoring.FleetMonitoring(run=None, rules_path=RULES)
        mon.webhook = monitoring.WebhookReceiver()
        try:
            with tempfile.TemporaryDirectory() as d:
                path = os.path.join(d, "am.yml")
                with open(path, "w") as f:
                    f.write(mon.alertmanager_config())
                cp = subprocess.run([amtool, "check-config", path], capture_output=True,
                                    text=True, timeout=60)
                self.assertEqual(cp.returncode, 0, cp.stdout + cp.stderr)
        finally:
            mon.webhook.close()


    def test_prometheus_config_passes_promtool(self):
        """The generated prometheus.yml (rules, external labels, one job per daemon) is valid."""
        promtool = shutil.which("promtool")
        if not promtool:
            self.skipTest("promtool is not installed")

        class Fwd:
            def __init__(self, port):
                self.address = f"127.0.0.1:{port}"

        class Run:
            class fab:
                hosts = {"node01": None, "node02": None}

        mon = monitoring.FleetMonitoring(Run, RULES, external_labels={"a_b": "/x/y z"})
        mon.forwards = {"aggregator": Fwd(1), "node01": Fwd(2), "node02": Fwd(3)}
        with tempfile.TemporaryDirectory() as d:
            copies = []
            for rules in RULES:
                copies.append(os.path.join(d, os.path.basename(rules)))
                shutil.copy(rules, copies[-1])
            path = os.path.join(d, "prometheus.yml")
            with open(path, "w") as f:
                f.write(mon.prometheus_config(copies, 9))
            cp = subprocess.run([promtool, "check", "config", path], capture_output=True,
                                text=True, timeout=60)
            self.assertEqual(cp.returncode, 0, cp.stdout + cp.stderr)
            with open(path) as f:
                text = f.read()
        self.assertIn("labels: {instance: node02}", text)
        self.assertIn('external_labels: {"a_b": "/x/y z"}', text)


    def test_example_alertmanager_config_adapted_passes_amtool(self):
        amtool = shutil.which("amtool")
        example = monitoring.example_alertmanager_config(fwe2e.SOURCE_DIR)
        if not amtool or not example:
            self.skipTest("amtool or dashboards/alertmanager/alertmanager.yml is missing")
        with open(example) as f:
            original = f.read()
        text, urls = monitoring.adapt_alertmanager_config(original, "http://127.0.0.1:7/",
                                                          "1s", "2s")
        self.assertGreater(urls, 0)
        self.assertNotIn(":9095/", text)
        self.assertRegex(text, r"url: http://127\.0\.0\.1:7/\S")  # the path is kept
        self.assertNotRegex(text, r"group_wait: (?!1s)")
        self.assertNotRegex(text, r"group_interval: (?!2s)")
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "am.yml")
            with open(path, "w") as f:
                f.write(text)
            cp = subprocess.run([amtool, "check-config", path], capture_output=True, text=True,
                                timeout=60)
            self.assertEqual(cp.returncode, 0, cp.stdout + cp.stderr)

    def test_adapt_keeps_everything_else(self):
        text = ("route:\n  receiver: a\n  group_wait: 30s\n  routes:\n    - receiver: b\n"
                "      group_wait: 2m\nreceivers:\n  - name: a\n    webhook_configs:\n"
                "      - url: 'https://pager.example.com:443/hook?x=1'  # note\n")
        out, urls = monitoring.adapt_alertmanager_config(text, "http://127.0.0.1:9/", "1s")
        self.assertEqual(urls, 1)
        self.assertIn("      - url: http://127.0.0.1:9/hook?x=1  # note\n", out)
        self.assertIn("  group_wait: 1s\n", out)
        self.assertIn("      group_wait: 1s\n", out)
        self.assertIn("    - receiver: b\n", out)


class DashboardTest(unittest.TestCase):
    def test_substitute(self):
        values = {"node": "node01", "link": "leaf1~spine1"}
        self.assertEqual(dq.substitute('x{node="$node",link=~"${link:regex}"}[$__rate_interval]',
                                       values), 'x{node="node01",link=~"leaf1~spine1"}[1m]')
        self.assertEqual(dq.substitute("y{n='[[node]]'}", values), "y{n='node01'}")
        self.assertEqual(dq.substitute('z{a=~"^b$"}', values), 'z{a=~"^b$"}')
        with self.assertRaises(dq.DashboardError):
            dq.substitute('x{rail="$rail"}', values)

    def test_variables(self):
        dash = {"templating": {"list": [
            {"name": "datasource", "type": "datasource"},
            {"name": "node", "type": "query", "query": "label_values(fabricwatch_agent_up, node)"},
            {"name": "dev", "type": "query",
             "query": {"query": 'label_values(fabricwatch_nic_port_up{node="$node"}, device)'}},
            {"name": "q", "type": "custom", "query": "0.5,0.99"},
        ]}}
        asked = []

        def label_values(label, match):
            asked.append((label, match))
            return {"node": ["node02", "node01"], "device": ["mlx5_1", "mlx5_0"]}[label]

        self.assertEqual(dq.resolve_variables(dash, {}, label_values),
                         {"datasource": "prometheus", "node": "node01", "dev": "mlx5_0",
                          "q": "0.5"})
        self.assertEqual(asked[1], ("device", 'fabricwatch_nic_port_up{node="node01"}'))
        self.assertEqual(dq.resolve_variables(dash, {"node": "node09", "dev": "x"},
                                              label_values)["node"], "node09")

    def test_every_real_expression_resolves(self):
        """The real dashboards' expressions have only variables the e2e test can fill in."""
        total = 0
        for path in dq.dashboard_files(fwe2e.SOURCE_DIR):
            dash = dq.load(path)
            values = dq.resolve_variables(dash, {"link": "leaf1~spine1", "node": "node01"},
                                          lambda label, match: ["v"])
            for q in dq.queries(path, dash):
                total += 1
                expr = dq.substitute(q.expr, values)
                self.assertNotIn("$", expr.replace("$\"", "").replace("$'", ""), q.where())
        self.assertGreater(total, 0)


class RelayTest(unittest.TestCase):
    def test_port_forward_relays_http(self):
        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                body = (self.path * 20000).encode()  # larger than one recv
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *a):
                pass

        srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        fw = monitoring.PortForward(None, "127.0.0.1", srv.server_address[1])
        try:
            for i in range(5):
                with urllib.request.urlopen(f"http://{fw.address}/p{i}", timeout=5) as r:
                    self.assertEqual(r.read(), f"/p{i}".encode() * 20000)
        finally:
            fw.close()
            srv.shutdown()
            srv.server_close()
        with self.assertRaises(OSError):
            urllib.request.urlopen(f"http://{fw.address}/", timeout=2)


if __name__ == "__main__":
    unittest.main()
