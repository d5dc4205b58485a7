#!/usr/bin/env python3
"""Fabric mode of probe_accuracy.sh: builds a tests/fabric leaf-spine path (node01 -> leaf1 ->
spine1 -> leaf2 -> node02), then runs probe_accuracy.sh on it for the healthy RTT, for goodput
through a 200 Mbit/s tbf on leaf1~spine1, and for loss under 1%, 5% and 20% random drop on the
last hop toward the server (one direction, so the probe loss should equal the injected drop).
The fabric is torn down on every path (the harness guarantees it). Needs root."""

import argparse
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "fabric"))
import fabric  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--script", default=os.path.join(HERE, "probe_accuracy.sh"))
    ap.add_argument("--build", required=True)
    ap.add_argument("--rtt-seconds", type=float, default=9)
    ap.add_argument("--loss-seconds", type=float, default=10,
                    help="per drop level; 10 flows x 100 Hz: 1000 probes/s")
    ap.add_argument("--shape", default="200mbit")
    ap.add_argument("--bw-bytes", type=int, default=25 << 20,
                    help="burst size on the shaped link (about 1 s at 200 Mbit/s)")
    ap.add_argument("--drops", default="1,5,20")
    ap.add_argument("--parts", default="rtt,bw,loss", help="which measurements to run")
    ap.add_argument("--rounds", type=int, default=3, help="bandwidth rounds (tools alternating)")
    ap.add_argument("--rtt-rounds", type=int, default=30,
                    help="RTT rounds (tools alternating; 10 rounds scatter 0.9-1.3 on a VM)")
    a = ap.parse_args()
    if os.geteuid() != 0:
        print("probe_accuracy: fabric mode needs root (network namespaces)", file=sys.stderr)
        return 77

    rc = 0
    with fabric.Fabric(spines=1, leaves=2, hosts_per_leaf=1) as fab:
        client, server = "node01", "node02"
        base = [a.script, "--build", a.build, "--client-ns", fab.hosts[client].ns,
                "--server-ns", fab.hosts[server].ns, "--server-addr", fab.hosts[server].address]

        def run(*extra):
            cp = subprocess.run(base + list(extra), check=False)
            if cp.returncode not in (0, 1):
                raise fabric.FabricError(f"probe_accuracy.sh failed ({cp.returncode})")
            return cp.returncode

        parts = a.parts.split(",")
        header = []  # the first table printed has the column header, the others not

        def table(*extra):
            flags = ["--no-header"] if header else []
            header.append(True)
            return run(*extra, *flags)

        if "rtt" in parts:
            rc |= table("--what", "rtt", "--label", "fabric 1 spine", "--seconds",
                        str(a.rtt_seconds), "--rtt-rounds", str(a.rtt_rounds))
        if "bw" in parts:
            with fab.limit_bandwidth("leaf1~spine1", a.shape):
                rc |= table("--what", "bw", "--label", f"fabric tbf {a.shape}",
                            "--bw-bytes", str(a.bw_bytes), "--bw-repeat", "3",
                            "--rounds", str(a.rounds))
        for pct in [float(x) for x in a.drops.split(",")] if "loss" in parts else []:
            with fab.drop(f"leaf2~{server}", pct, toward=server) as fault:
                rc |= table("--what", "loss", "--expect-loss", f"{pct:g}",
                            "--label", f"fabric drop {pct:g}%", "--seconds", str(a.loss_seconds),
                            "--flows", "10", "--rate", "100")
                print(f"  (nftables dropped {fault.stats()['dropped_packets']} packets)",
                      file=sys.stderr)
    return rc


if __name__ == "__main__":
    sys.exit(main())
