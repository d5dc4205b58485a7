#!/usr/bin/env python3
"""Issue 17 part 6: `scripts/demo --fabric`, run the way a user runs it and stopped with Ctrl-C.

The demo (with FW_DEMO_SKIP_BUILD=1 and --fault-after 20) must print the status page URL, inject
the fault, show the link_down finding on the link, the CLI row for it and (headless Chromium) the
status page with it, and, when Prometheus and Alertmanager are installed, the Alertmanager
notification for the link with a runbook path that exists. SIGUSR1 must clear the fault; SIGINT
must stop it with exit 0, leaving no namespace of its prefix and no process it started. Needs root
(exit 77 without it). Run: FW_BUILD_DIR=$PWD/build python3 <this file> -v
"""

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import monitoring  # noqa: E402
import fwe2e  # noqa: E402
import netns  # noqa: E402

LINK = "leaf1~spine1"


class DemoOutput:
    """The demo's stdout, read on a thread; wait() for a line matching a pattern."""

    def __init__(self, proc):
        self.proc, self.lines, self.cond = proc, [], threading.Condition()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            with self.cond:
                self.lines.append(line.rstrip("\n"))
                self.cond.notify_all()
        with self.cond:
            self.lines.append(None)  # EOF
            self.cond.notify_all()

    def wait(self, pattern, timeout):
        rx = re.compile(pattern)
        deadline = time.monotonic() + timeout
        with self.cond:
            while True:
                for line in self.lines:
                    if line is not None and rx.search(line):
                        return rx.search(line)
                left = deadline - time.monotonic()
                if left <= 0 or (self.lines and self.lines[-1] is None):
                    raise AssertionError(f"the demo printed no line matching {pattern!r} within "
                                         f"{timeout} s; output:\n" + self.text()[-4000:])
                self.cond.wait(left)

    def text(self):
        with self.cond:
            return "\n".join(ln for ln in self.lines if ln is not None)


class DemoTest(unittest.TestCase):
    SHOWN = r"FAULT|finding|notification|runbook|CLEARED|stopp"

    def test_fabric_demo_shows_the_fault_and_cleans_up(self):
        env = dict(os.environ, FW_DEMO_SKIP_BUILD="1",
                   FW_BUILD_DIR=os.path.dirname(os.path.dirname(os.path.dirname(
                       fwe2e.aggregator_bin()))))
        demo = os.path.join(fwe2e.SOURCE_DIR, "scripts", "demo")
        try:
            monitoring.FleetMonitoring.binaries()
            with_alerts = True
        except monitoring.MonitoringError:
            with_alerts = False
        proc = subprocess.Popen([demo, "--fabric", "--fault-after", "20"], env=env,
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, cwd=fwe2e.SOURCE_DIR)
        out = DemoOutput(proc)
        prefix = None
        try:
            prefix = out.wait(r"as network namespaces \((fw[0-9x]+-)\*\)", 60).group(1)
            url = out.wait(r"status page\s+(http://\S+)", 5).group(1)
            with urllib.request.urlopen(url, timeout=5) as r:
                self.assertEqual(r.status, 200)
            out.wait(rf"FAULT injected: link {LINK} down", 40)
            out.wait(rf"finding ACTIVE: link_down \(critical\) on link {LINK}", 45)
            out.wait(r"The CLI says:", 15)
            # The CLI's row for the finding (any column order): indented under its command. The
            # demo prints it once the CLI has answered, which it allows 15 s (Demo.show_cli); the
            # line above can also be an earlier kind's (link_degraded escalating to link_down).
            out.wait(rf"^ {{4}}(?=.*\blink_down\b)(?=.*{LINK}).*critical", 20)
            self.check_status_page(url)
            if with_alerts:
                # The real for: 30s of FabricLinkDown, scrape and evaluation every 5 s.
                out.wait(rf"Alertmanager notification \(\S+\): \S+ FIRING .*link={LINK}", 75)
                runbook = out.wait(r"^\s+runbook: (\S+)", 5).group(1)
                self.assertTrue(os.path.isfile(runbook), f"the runbook {runbook} does not exist")
            proc.send_signal(signal.SIGUSR1)
            out.wait(rf"fault CLEARED: link {LINK} down", 10)
            proc.send_signal(signal.SIGINT)
            self.assertEqual(proc.wait(timeout=60), 0, out.text()[-3000:])
            out.wait(r"^stopped: the \d+ processes this demo started are gone", 5)
        finally:
            if proc.poll() is None:
                netns.terminate_pid(proc.pid, grace=30, popen=proc)
            proc.stdout.close()
            if prefix:
                left = netns.list_namespaces(prefix)
                if left:
                    netns.cleanup_prefix(prefix)
                self.assertEqual(left, [], "the demo left namespaces behind")
        print("\n  " + "\n  ".join(ln for ln in out.text().splitlines()
                                   if re.search(self.SHOWN, ln)),
              file=sys.stderr)

    def check_status_page(self, url):
        """The status page, rendered by headless Chromium (its script reads the JSON API),
        shows the link_down finding on the link."""
        chromium = shutil.which("chromium")
        if not chromium:
            print("\n  note: chromium is not installed; the status page was only fetched",
                  file=sys.stderr)
            return
        with tempfile.TemporaryDirectory() as profile:
            cp = subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu",
                                 f"--user-data-dir={profile}", "--virtual-time-budget=8000",
                                 "--dump-dom", url], capture_output=True, text=True, timeout=90)
        self.assertIn(LINK, cp.stdout, f"status page DOM:\n{cp.stdout[-2000:]}")
        self.assertIn("link_down", cp.stdout, f"status page DOM:\n{cp.stdout[-2000:]}")


if __name__ == "__main__":
    fwe2e.main()
