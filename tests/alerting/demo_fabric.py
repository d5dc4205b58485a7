#!/usr/bin/env python3
"""`scripts/demo --fabric`: the fleet on a namespace fabric, a link fault, and what the operator
sees (status page, CLI, Prometheus alert, Alertmanager notification). Needs root.

It builds 2 spines x 3 leaves x 2 hosts (tests/fabric), runs the real aggregator with the fabric
map and one real agent per host (tests/fabric_e2e/fwe2e.py, flows pinned so that a finding can
name one link), relays their HTTP ports to 127.0.0.1 and, when installed, starts Prometheus with
the real rules and `for:` durations and Alertmanager (tests/alerting/monitoring.py). After
--fault-after seconds it injects the fault. Enter (or SIGUSR1) clears it and injects it again.
Ctrl-C or SIGTERM stops every process it started by PID and deletes every namespace.
"""

import argparse
import os
import select
import signal
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import monitoring  # noqa: E402
import fwe2e  # noqa: E402
import fabric  # noqa: E402
import netns  # noqa: E402

FABRIC = dict(spines=2, leaves=3, hosts_per_leaf=2)
# What the namespace fabric can show. The node-hardware kinds (port_errors, ...) come from the
# agents' checks of the sysfs test data, whose counters are saturated on every node; the demo
# counts them once instead of printing each.
NET_KINDS = {"link_degraded", "link_down", "link_flapping", "congestion", "switch_degraded",
             "nic_degraded", "nic_down", "host_network", "probe_unreachable", "collective_slow"}
PORTS = {"aggregator": 9751, "prometheus": 9090, "alertmanager": 9093}


def say(msg=""):
    print(msg, flush=True)


def parse_args(argv):
    ap = argparse.ArgumentParser(prog="scripts/demo --fabric", description=__doc__.split("\n")[0])
    ap.add_argument("--fault-after", type=float, default=60.0, metavar="S",
                    help="seconds of healthy traffic before the fault (default 60)")
    ap.add_argument("--fault", choices=("link_down", "drop"), default="link_down",
                    help="link_down: both ends down; drop: random packet loss (default link_down)")
    ap.add_argument("--link", default="leaf1~spine1", help="the faulty link (default leaf1~spine1)")
    ap.add_argument("--drop-percent", type=float, default=5.0, help="loss for --fault drop")
    ap.add_argument("--no-monitoring", action="store_true",
                    help="skip Prometheus and Alertmanager even when installed")
    ap.add_argument("--duration", type=float, default=0.0, metavar="S",
                    help="stop by itself after S seconds (default: run until Ctrl-C)")
    return ap.parse_args(argv)


class Demo:
    def __init__(self, args):
        self.args = args
        self.fault = None
        self.toggle = threading.Event()
        self.seen_findings = {}
        self.seen_notes = 0
        self.cli_shown = False
        self.hw_reported = False

    # ------------------------------------------------------------------ fault

    def inject(self, run):
        a = self.args
        if a.fault == "link_down":
            self.fault = run.fab.link_down(a.link)
        else:
            self.fault = run.fab.drop(a.link, a.drop_percent)
        self.t_fault = time.monotonic()
        self.cli_shown = False
        say(f"\n[{self.clock()}] FAULT injected: {self.fault.description}")
        say(f"  To clear it: press Enter here, or run: kill -USR1 {os.getpid()}")

    def clear(self, run):
        self.fault.undo()
        run.pinning.refresh()  # link up restores the main routes; the pinned ones come back here
        say(f"\n[{self.clock()}] fault CLEARED: {self.fault.description}; the finding and the "
            "alert resolve within about a minute. Enter (or SIGUSR1) injects it again.")
        self.fault = None

    # ------------------------------------------------------------------ what the operator sees

    def clock(self):
        return time.strftime("%H:%M:%S")

    def report_findings(self, run):
        try:
            rows = run.get_json("/api/v1/findings")
        except (AssertionError, OSError, fabric.FabricError) as e:
            say(f"  (findings unavailable: {e})")
            return
        hw = sum(1 for f in rows if f.get("kind") not in NET_KINDS and f.get("active"))
        if hw and not self.hw_reported:
            self.hw_reported = True
            say(f"[{self.clock()}] {hw} node-hardware findings (saturated error counters in the "
                "sysfs test data every agent reads) are active; the status page lists them.")
        for f in rows:
            if f.get("kind") not in NET_KINDS:
                continue
            # A finding keeps its id when its kind escalates (link_degraded while the loss
            # builds up, then link_down): the new kind is printed, and the CLI shown again.
            key, active, kind = f.get("id"), f.get("active"), f.get("kind")
            if self.seen_findings.get(key) == (active, kind):
                continue
            first = key not in self.seen_findings
            self.seen_findings[key] = (active, kind)
            if first and not active:
                continue
            loc = f.get("location", {})
            say(f"[{self.clock()}] finding {'RESOLVED' if not active else 'ACTIVE'}: "
                f"{kind} ({f.get('severity')}) on {loc.get('type')} {loc.get('id')}: "
                f"{f.get('summary')}")
            if (active and self.fault and loc.get("id") == self.args.link
                    and self.cli_shown != kind):
                self.cli_shown = kind
                say(f"  {time.monotonic() - self.t_fault:.0f} s after the fault. The CLI says:")
                self.show_cli()

    def show_cli(self):
        cmd = [self.cli, "--api", self.mon.forwards["aggregator"].address, "findings"]
        try:
            cp = subprocess.run(cmd, capture_output=True, text=True, timeout=15)
            out = (cp.stdout + cp.stderr).rstrip()
        except (OSError, subprocess.TimeoutExpired) as e:
            out = f"(could not run the CLI: {e})"
        say("  $ " + " ".join(cmd))
        lines = out.splitlines()
        shown = lines[:1] + [ln for ln in lines[1:] if self.args.link in ln]
        for line in shown:
            say("    " + line)
        if len(lines) > len(shown):
            say(f"    ({len(lines) - len(shown)} more rows: node-hardware findings)")

    def report_notifications(self):
        if not self.mon.webhook:
            return
        events = self.mon.webhook.events[self.seen_notes:]
        self.seen_notes += len(events)
        for _, payload in events:
            for a in payload.get("alerts", []):
                lab = a.get("labels", {})
                where = ", ".join(f"{k}={v}" for k, v in sorted(lab.items())
                                  if k not in ("alertname", "severity", "job", "instance",
                                              "fabricwatch_runbook_base"))
                notes = a.get("annotations", {})
                say(f"[{self.clock()}] Alertmanager notification ({payload.get('receiver')}): "
                    f"{lab.get('alertname')} "
                    f"{a.get('status').upper()} ({lab.get('severity')}; {where}): "
                    f"{notes.get('summary', '')}"
                    + (f"\n  runbook: {notes['runbook_url']}" if notes.get("runbook_url") else ""))

    # ------------------------------------------------------------------ main loop

    def banner(self, run):
        mon = self.mon
        agg = mon.forwards["aggregator"].address
        agents = ", ".join(f"{n} {mon.forwards[n].address}" for n in run.fab.hosts)
        say(f"""
fabricwatch fabric demo: {run.fab.spines} spines x {run.fab.leaves} leaves x \
{run.fab.hosts_per_leaf} hosts as network namespaces ({run.fab.prefix}*), one agent per host,
the aggregator with the fabric map {os.path.join(run.fab.log_dir, 'fabric-map.yaml')}
  status page      http://{agg}/
  metrics          http://{agg}/metrics
  JSON API         http://{agg}/api/v1/findings   (also /api/v1/links, /nodes, /pairs)
  CLI              {self.cli} --api {agg} findings   (also links, status, nodes)
  agent metrics    {agents}  (/metrics)""")
        if mon.prometheus_url:
            rules = ", ".join(os.path.basename(p) for p in mon.rules_paths)
            say(f"  Prometheus       {mon.prometheus_url}/alerts   (rules: dashboards/prometheus/"
                f"{rules}, real for: durations, scrape 5 s)")
            say(f"  Alertmanager     {mon.alertmanager_url}/#/alerts   (config: "
                + (f"{os.path.relpath(self.am_example, fwe2e.SOURCE_DIR)} with its receivers "
                   "sent to this demo, group_interval 10 s" if self.am_example else
                   "one route to this demo") + ")")
        else:
            say(f"  (no Prometheus/Alertmanager: {self.no_monitoring_reason})")
        say(f"  logs             {run.fab.log_dir}")
        say(f"The fault ({self.args.fault} on {self.args.link}) comes in "
            f"{self.args.fault_after:.0f} s. Ctrl-C stops everything and deletes the namespaces.")

    def loop(self, run):
        t_end = time.monotonic() + self.args.duration if self.args.duration > 0 else None
        t_fault = time.monotonic() + self.args.fault_after
        interactive = sys.stdin.isatty()
        while t_end is None or time.monotonic() < t_end:
            if self.fault is None and t_fault is not None and time.monotonic() >= t_fault:
                t_fault = None
                self.inject(run)
            if interactive:
                ready, _, _ = select.select([sys.stdin], [], [], 1.0)
                if ready:
                    if sys.stdin.readline():
                        self.toggle.set()
                    else:
                        interactive = False  # end of input (Ctrl-D): SIGUSR1 still toggles
            else:
                self.toggle.wait(1.0)
            if self.toggle.is_set():
                self.toggle.clear()
                t_fault = None
                if self.fault:
                    self.clear(run)
                else:
                    self.inject(run)
            run.check_daemons_running()
            self.report_findings(run)
            self.report_notifications()

    def run(self):
        a = self.args
        self.cli = os.environ.get("FW_CLI_BIN") or os.path.join(
            os.environ.get("FW_BUILD_DIR", "build"), "daemon", "cli", "fabricwatch")
        servers = not a.no_monitoring
        self.no_monitoring_reason = "--no-monitoring"
        if servers:
            try:
                monitoring.FleetMonitoring.binaries()
            except monitoring.MonitoringError as e:
                servers, self.no_monitoring_reason = False, str(e)
        rules = monitoring.rule_files(fwe2e.SOURCE_DIR)
        self.am_example = monitoring.example_alertmanager_config(fwe2e.SOURCE_DIR)
        # The rules' runbook_url starts with this label: a path the user can open.
        labels = {"fabricwatch_runbook_base": os.path.join(fwe2e.SOURCE_DIR, "docs", "runbooks")}
        say("building the namespace fabric and starting the fleet...")
        with fwe2e.DaemonFabric(routing="deterministic", access_rate="1gbit", **FABRIC) as run, \
                monitoring.FleetMonitoring(run, rules, for_scale=1.0, interval="5s",
                                           ports=PORTS, group_wait=None, group_interval="10s",
                                           servers=servers, external_labels=labels,
                                           alertmanager_example=self.am_example) as mon:
            self.mon = mon
            self.prefix = run.fab.prefix
            try:
                run.fab.link(a.link)  # an unknown link fails here, before the wait
                run.wait_connected()
                self.banner(run)
                self.loop(run)
            except KeyboardInterrupt:
                pass  # a normal stop: leave the `with` without dumping the daemons' logs
            finally:
                self.pids = [p.pid for p in run.fab.processes()] + \
                    [p.pid for p in mon.procs.values()]
                say(f"\nstopping: {len(run.fab.processes())} fleet processes"
                    + (", Prometheus, Alertmanager" if mon.prometheus_url else "")
                    + f"; deleting the {run.fab.prefix}* namespaces...")


def main(argv=None):
    args = parse_args(argv)
    try:
        netns.check_privileges()
    except fabric.NeedRoot as e:
        say(f"scripts/demo --fabric: {e}. Run it as root (sudo scripts/demo --fabric), or run "
            "scripts/demo without --fabric for the loopback demo.")
        return 2

    def stop(signum, frame):
        # One stop only: a second Ctrl-C must not interrupt the teardown.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        raise KeyboardInterrupt

    demo = Demo(args)
    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGUSR1, lambda s, f: demo.toggle.set())
    code = 0
    try:
        demo.run()
    except KeyboardInterrupt:
        pass
    except (AssertionError, fabric.FabricError, monitoring.MonitoringError, RuntimeError) as e:
        say(f"demo failed: {e}")
        code = 1
    left = netns.list_namespaces(demo.prefix) if getattr(demo, "prefix", None) else []
    alive = [pid for pid in getattr(demo, "pids", []) if netns._pid_alive(pid)]
    if left or alive:
        say(f"left behind: namespaces {left}, processes {alive}; run: tests/fabric/fabric.py "
            f"cleanup --prefix {demo.prefix}")
        return 1
    say(f"stopped: the {len(getattr(demo, 'pids', []))} processes this demo started are gone "
        "and its namespaces are deleted.")
    return code


if __name__ == "__main__":
    sys.exit(main())
