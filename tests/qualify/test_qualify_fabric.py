#!/usr/bin/env python3
"""Issue 14 on the namespace fabric (root): one host's uplink shaped with tbf fails qualification,
named with its measured figure, while the other hosts pass.

6 hosts (1 spine, 2 leaves x 3). The shaped host's link runs at 256 kbit/s both ways, below what
the quick suite's mesh sends through it (5 peers x 50 probes/s each way), so its probes queue and
drop in tbf. Agents run on an empty sysfs tree, so no port findings add warnings.
Run as root: FW_BUILD_DIR=build python3 tests/qualify/test_qualify_fabric.py
"""
import json
import os
import subprocess
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE_DIR = os.environ.get("FW_SOURCE_DIR") or os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(SOURCE_DIR, "tests", "fabric_e2e"))
import fwe2e  # noqa: E402

SHAPED = "h1-2"  # set in setUp from the fabric's host names


def cli_bin():
    return fwe2e.binary("FW_CLI_BIN", "daemon/cli/fabricwatch")


class TbfTest(unittest.TestCase):
    def test_shaped_uplink_fails_and_is_named(self):
        empty = tempfile.mkdtemp(prefix="fw-q-sys.")
        fwe2e.SYSFS_ROOT = empty
        run = fwe2e.DaemonFabric(spines=1, leaves=2, hosts_per_leaf=3)
        with run:
            run.wait_connected()
            hosts = sorted(run.fab.hosts)
            shaped = hosts[1]
            link = next(lk for lk in run.fab.links.values()
                        if lk.kind == "host" and shaped in lk.ends)
            run.fab.limit_bandwidth(link.id, "256kbit", latency="50ms")
            api = f"{fwe2e.fabric.MGMT_GATEWAY}:{fwe2e.HTTP_PORT}"
            t0 = time.monotonic()
            p = run.fab.exec("mgmt", [cli_bin(), "--api", api, "--format", "json", "qualify",
                                      "--nodes", ",".join(hosts), "--timeout", "30"], timeout=60)
            took = time.monotonic() - t0
            print(f"\n  qualify of {len(hosts)} hosts: exit {p.returncode} in {took:.1f} s",
                  file=sys.stderr)
            rep = json.loads(p.stdout)
            v = {n["node"]: n for n in rep["nodes"]}
            print(json.dumps(rep["nodes"], indent=1)[:2500], file=sys.stderr)
            self.assertEqual(p.returncode, 2, p.stdout + p.stderr)
            self.assertEqual(v[shaped]["verdict"], "fail")
            reasons = " ".join(v[shaped]["reasons"])
            self.assertRegex(reasons, r"(RTT p99|loss) to \d+ peers [0-9.]+ ?(ms|%)")
            for h in hosts:
                if h != shaped:
                    self.assertEqual(v[h]["verdict"], "pass", f"{h}: {v[h]['reasons']}")


if __name__ == "__main__":
    fwe2e.main()
