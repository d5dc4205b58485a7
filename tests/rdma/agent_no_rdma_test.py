#!/usr/bin/env python3
"""The agent on a host without RDMA runs cleanly and says rdma: unavailable (issue 13).

Starts fabricwatch-agent against the real H100 sysfs tree and a topology export, with no
aggregator to reach, and checks that: /metrics has fabricwatch_rdma_available 0, the log says
"rdma: unavailable" with the verbs reason, the agent keeps serving (its UDP/TCP side is up), and
SIGTERM stops it with exit 0. On a host that does have RDMA the expectations flip (available 1).
Usage: agent_no_rdma_test.py AGENT TESTDATA
"""
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request


def main():
    agent, testdata = sys.argv[1], sys.argv[2]
    with tempfile.TemporaryDirectory(prefix="fw-rdma-agent-") as tmp:
        port_file = os.path.join(tmp, "port.json")
        log_path = os.path.join(tmp, "agent.log")
        with open(log_path, "w") as log:
            proc = subprocess.Popen(
                [agent, "--insecure", "--aggregator", "127.0.0.1:1",
                 "--http-listen", "127.0.0.1:0", "--probe-port", "0",
                 "--port-file", port_file,
                 "--sysfs-root", os.path.join(testdata, "sysfs/gpud-h100"),
                 "--hwloc-xml", os.path.join(testdata, "hwloc/psmgmt-topo.jrc0386.xml")],
                stdout=log, stderr=subprocess.STDOUT)
        try:
            deadline = time.time() + 20
            while not os.path.exists(port_file) or os.path.getsize(port_file) == 0:
                if proc.poll() is not None or time.time() > deadline:
                    print(open(log_path).read())
                    sys.exit("agent did not start (rc=%s)" % proc.poll())
                time.sleep(0.1)
            port = json.load(open(port_file))["http_port"]
            metrics = urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port,
                                             timeout=5).read().decode()
            lines = [l for l in metrics.splitlines() if l.startswith("fabricwatch_rdma_available")]
            if len(lines) != 1:
                sys.exit("no fabricwatch_rdma_available in /metrics")
            available = lines[0].split()[-1]
            # Let it run a little: no crash, no busy loop.
            time.sleep(2)
            if proc.poll() is not None:
                sys.exit("agent exited early: rc=%d\n%s" % (proc.returncode, open(log_path).read()))
            cpu = sum(int(x) for x in open("/proc/%d/stat" % proc.pid).read().split()[13:15])
            hz = os.sysconf("SC_CLK_TCK")
        finally:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
            rc = proc.wait(timeout=20)
        log = open(log_path).read()
        print(log)
        print("fabricwatch_rdma_available", available, "cpu_s", cpu / hz, "rc", rc)
        if rc != 0:
            sys.exit("agent exit code %d" % rc)
        if available == "0":
            if 'msg="rdma: unavailable' not in log:
                sys.exit("log does not say rdma: unavailable")
        elif available != "1":
            sys.exit("unexpected fabricwatch_rdma_available " + available)
        if "level=critical" in log:
            sys.exit("critical log line")


if __name__ == "__main__":
    main()
