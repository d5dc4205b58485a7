"""Helpers shared by the loopback tests that drive the real daemons from Python (no root).

Import with the folder on sys.path:
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "pylib"))
"""
import re
import subprocess
import time
import urllib.request


class Checks:
    """Prints each check as ok/FAIL and remembers the failures."""

    def __init__(self):
        self.failures = []

    def __call__(self, cond, what, detail=""):
        print(("ok:   " if cond else "FAIL: ") + what, flush=True)
        if not cond:
            self.failures.append(what)
            print(str(detail)[:3000], flush=True)


def wait_for(pred, timeout_s, what, poll_s=0.2):
    """pred()'s first truthy value within timeout_s (OSError, ValueError and KeyError count as not
    yet); exits the test with a FAIL line when it never comes."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            v = pred()
            if v:
                return v
        except (OSError, ValueError, KeyError):
            pass
        time.sleep(poll_s)
    raise SystemExit(f"FAIL: timed out after {timeout_s} s waiting for {what}")


def get(url, timeout_s=5):
    with urllib.request.urlopen(url, timeout=timeout_s) as r:
        return r.read().decode()


def series(text, name):
    """{labels: value} of one metric family in a Prometheus exposition ("" for no labels)."""
    out = {}
    for line in text.splitlines():
        m = re.match(re.escape(name) + r"(\{[^}]*\})? ([0-9.eE+-]+|NaN)$", line)
        if m:
            out[m.group(1) or ""] = float(m.group(2))
    return out


def two_leaf_fabric(hosts):
    """A fabric map of leaf1 and leaf2 under spine1; hosts are (node, nic, address, leaf)."""
    lines = ["routing: ecmp", "switches:"]
    lines += [f"  - {{name: {s}, tier: {t}}}"
              for s, t in (("leaf1", "leaf"), ("leaf2", "leaf"), ("spine1", "spine"))]
    lines += ["links:", "  - {a: leaf1, b: spine1}", "  - {a: leaf2, b: spine1}", "hosts:"]
    lines += [f"  - {{node: {n}, nic: {nic}, address: {a}, switch: {leaf}}}"
              for n, nic, a, leaf in hosts]
    return "\n".join(lines) + "\n"


def stop(procs, grace_s=20):
    """SIGTERM every process still running, then waits for each; kills one that outlives grace_s."""
    for p in procs:
        if p.poll() is None:
            p.terminate()
    for p in procs:
        try:
            p.wait(grace_s)
        except subprocess.TimeoutExpired:
            p.kill()
