#!/usr/bin/env python3
"""Command line of the test fabric: fabric.py up|down|cleanup|list|exec."""

import argparse
import json
import os
import re
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import netns  # noqa: E402
from fabric import Fabric  # noqa: E402
from netns import FabricError, NeedRoot  # noqa: E402

STATE_DIR = "/run/fw-fabric"


def _state_path(prefix):
    return os.path.join(STATE_DIR, f"{prefix}json")


def _cmd_up(a):
    fab = Fabric(a.spines, a.leaves, a.hosts, prefix=a.prefix, log_dir=a.log_dir)
    try:
        with fab:
            if a.map:
                fab.write_map(a.map)
            desc = fab.describe()
            desc["pid"] = os.getpid()
            os.makedirs(STATE_DIR, exist_ok=True)
            state = a.state or _state_path(fab.prefix)
            with open(state, "w") as f:
                json.dump(desc, f, indent=1)
            if a.responders:
                for h in fab.hosts:
                    fab.start_responder(h)
            print(json.dumps(desc, indent=1), flush=True)
            print(f"ready prefix={fab.prefix} state={state}; Ctrl-C or "
                  f"'fabric.py down --prefix {fab.prefix}' tears it down", file=sys.stderr,
                  flush=True)
            deadline = time.monotonic() + a.seconds if a.seconds else None
            try:
                while deadline is None or time.monotonic() < deadline:
                    time.sleep(0.5)
            except (KeyboardInterrupt, SystemExit):
                pass  # Ctrl-C, or SIGTERM/SIGHUP through the fabric's handler: a normal stop
            finally:
                try:
                    os.unlink(state)
                except OSError:
                    pass
    finally:
        print(f"torn down prefix={fab.prefix}", file=sys.stderr, flush=True)
    return 0


def _cmd_down(a):
    state = _state_path(a.prefix)
    try:
        with open(state) as f:
            pid = int(json.load(f)["pid"])
    except (OSError, ValueError, KeyError, TypeError):
        pid = None
    if pid:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmdline = f.read().decode(errors="replace")
        except OSError:
            cmdline = ""
        if "fabric.py" in cmdline:  # the 'up' process of this prefix; it tears itself down
            netns.terminate_pid(pid, grace=15.0)
    deleted, left = netns.cleanup_prefix(a.prefix)
    try:
        os.unlink(state)
    except OSError:
        pass
    print(f"deleted {len(deleted)} leftover namespaces" + (f"; could not delete {left}" if left else ""))
    return 1 if left else 0


def _cmd_cleanup(a):
    deleted, left = [], []
    for prefix in netns.stale_prefixes() if a.stale else [a.prefix]:
        d, lft = netns.cleanup_prefix(prefix)
        deleted += d
        left += lft
    for n in deleted:
        print(f"deleted {n}")
    for n in left:
        print(f"could not delete {n}", file=sys.stderr)
    return 1 if left else 0


def _cmd_list(a):
    groups = {}
    for n in netns.list_namespaces():
        m = re.match(r"^(.+-)(?:leaf\d+|spine\d+|node\d+|mgmt)$", n)
        if m:
            groups.setdefault(m.group(1), []).append(n)
    for p, names in sorted(groups.items()):
        print(f"{p}\t{len(names)} namespaces")
    return 0


def _cmd_exec(a):
    if not netns.PREFIX_RE.match(a.prefix):
        raise FabricError(f"bad prefix {a.prefix!r}")
    argv = a.argv[1:] if a.argv[:1] == ["--"] else a.argv
    if not argv:
        raise FabricError("exec needs a command after the node name")
    os.execvp("ip", ["ip", "netns", "exec", a.prefix + a.node] + argv)


def main(argv=None):
    p = argparse.ArgumentParser(description="Leaf-spine test fabric of network namespaces")
    sub = p.add_subparsers(dest="cmd", required=True)
    up = sub.add_parser("up", help="build a fabric and keep it until Ctrl-C/SIGTERM")
    up.add_argument("--spines", type=int, default=2)
    up.add_argument("--leaves", type=int, default=2)
    up.add_argument("--hosts", type=int, default=3, help="hosts per leaf")
    up.add_argument("--map", help="write the fabric map YAML here")
    up.add_argument("--prefix", help="namespace prefix (default fw<pid>-)")
    up.add_argument("--state", help=f"state JSON (default {STATE_DIR}/<prefix>json)")
    up.add_argument("--log-dir", help="keep process logs here")
    up.add_argument("--seconds", type=float, help="tear down after this many seconds")
    up.add_argument("--responders", action="store_true",
                    help="start a UDP echo / TCP counter responder (7007/7008) on every host")
    dn = sub.add_parser("down", help="stop the 'up' process of a prefix and delete leftovers")
    dn.add_argument("--prefix", required=True)
    cl = sub.add_parser("cleanup", help="delete every namespace with a prefix")
    which = cl.add_mutually_exclusive_group(required=True)
    which.add_argument("--prefix")
    which.add_argument("--stale", action="store_true",
                       help="every fw<pid>- prefix whose process is gone")
    sub.add_parser("list", help="list fabric namespaces by prefix")
    ex = sub.add_parser("exec", help="run a command in a node's namespace")
    ex.add_argument("--prefix", required=True)
    ex.add_argument("node")
    ex.add_argument("argv", nargs=argparse.REMAINDER)
    a = p.parse_args(argv)
    try:
        if a.cmd != "list":
            netns.check_privileges()
        return {"up": _cmd_up, "down": _cmd_down, "cleanup": _cmd_cleanup, "list": _cmd_list,
                "exec": _cmd_exec}[a.cmd](a)
    except NeedRoot as e:
        print(f"fabric: {e}", file=sys.stderr)
        return 77
    except FabricError as e:
        print(f"fabric: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
