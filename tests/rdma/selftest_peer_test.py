#!/usr/bin/env python3
"""`fabricwatch-agent rdma-selftest --server` and `--peer` between two processes (issue 13).

Each process gets a fake InfiniBand device (hidden --test-rdma-fake-lid, on the fake fabric's
loopback link), so the run crosses the real CLI, TCP exchange, UD mesh and RC QPs of the agent
binary as two hosts would. Checks: both exit 0 and print the same client figures in JSON (network
RTT 2 x the fakes' 2 us, RC Gb/s), and a client whose peer does not answer exits 3 with the reason.
Usage: selftest_peer_test.py AGENT
"""
import json
import os
import re
import subprocess
import sys
import time


def main():
    agent = sys.argv[1]
    base = 41000 + (os.getpid() % 1000) * 10
    fake = lambda lid: ["--test-rdma-fake-lid", str(lid), "--test-rdma-fake-udp-base", str(base)]
    common = ["--seconds", "0.3", "--rc-bursts", "2", "--rc-bytes", "4194304", "--timeout", "10",
              "--json"]
    server = subprocess.Popen(
        [agent] + fake(2) + ["rdma-selftest", "--server", "--tcp-port", "0"] + common,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    port = None
    deadline = time.time() + 10
    while port is None and time.time() < deadline:
        line = server.stderr.readline()
        if not line:
            break
        m = re.search(r"waiting for a peer on tcp port (\d+)", line)
        if m:
            port = int(m.group(1))
    if port is None:
        server.kill()
        sys.exit("server did not listen: %s" % server.communicate())
    client = subprocess.run(
        [agent] + fake(1) + ["rdma-selftest", "--peer", "127.0.0.1", "--tcp-port", str(port)] +
        common, capture_output=True, text=True, timeout=30)
    s_out, s_err = server.communicate(timeout=30)
    print("client rc=%d\n%s%s" % (client.returncode, client.stdout, client.stderr))
    print("server rc=%d\n%s%s" % (server.returncode, s_out, s_err))
    failures = []
    if client.returncode != 0 or server.returncode != 0:
        failures.append("exit codes %d / %d, want 0 / 0" % (client.returncode, server.returncode))
    try:
        c, s = json.loads(client.stdout), json.loads(s_out)
    except ValueError as e:
        sys.exit("FAIL: not JSON: %s" % e)
    if c["mode"] != "client" or s["mode"] != "server":
        failures.append("modes %s / %s" % (c["mode"], s["mode"]))
    if c["peer"]["endpoint"]["lid"] != 2 or s["peer"]["endpoint"]["lid"] != 1:
        failures.append("peer LIDs %s / %s" % (c["peer"]["endpoint"]["lid"],
                                               s["peer"]["endpoint"]["lid"]))
    if c["ud"]["answered"] < 10 or c["ud"]["lost"] != 0:
        failures.append("ud %s" % c["ud"])
    if c["ud"]["network_rtt_us_p50"] != 4.0:
        failures.append("network RTT p50 %s us, want 4.00 (2 x 2 us)" %
                        c["ud"]["network_rtt_us_p50"])
    if not c["rc"]["gbps_median"] or c["rc"]["bursts_ok"] != 2:
        failures.append("rc %s" % c["rc"])
    if s["ud"] != c["ud"] or s["answered_for_peer"] < c["ud"]["answered"]:
        failures.append("server's figures %s differ from the client's" % s["ud"])

    # No server on the port: a clear exit 3.
    dead = subprocess.run(
        [agent] + fake(1) + ["rdma-selftest", "--peer", "127.0.0.1", "--tcp-port", str(port),
                             "--timeout", "0.5"], capture_output=True, text=True, timeout=30)
    print("no server: rc=%d %s" % (dead.returncode, dead.stdout.strip()))
    if dead.returncode != 3 or "Connection refused" not in dead.stdout:
        failures.append("no server: rc %d, %r" % (dead.returncode, dead.stdout))
    for f in failures:
        print("FAIL:", f)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
