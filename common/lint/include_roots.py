#!/usr/bin/env python3
"""Checks that the build's include paths enforce the layering (docs/design.md, Layout).

There is no global include path: a target sees the headers of its own folder and of the targets it
links (the top-level CMakeLists.txt, fw_include_roots). For each rule below, this preprocesses a
one-line file `#include "<a header of FOLDER_TO>"` with the compile command of a library source in
FOLDER_FROM (from the build's compile_commands.json) and checks that it resolves exactly when the
rule allows it. So a forbidden include, header-only or not, fails to compile, and this test fails if
a CMake change opens a path again. Exit 0: every rule holds; 1: one does not (each is printed).

Usage: include_roots.py --build BUILD_DIR
"""
import argparse
import glob
import os
import subprocess
import sys
import tempfile

import compile_db

STAGES = ["model", "plan", "ingest", "analysis", "api"]
# stage -> stages its library may include (itself included), as aggregator_layering states them
ALLOWED = {
    "model": ["model"],
    "plan": ["model", "plan"],
    "ingest": ["model", "plan", "ingest"],
    "analysis": ["model", "plan", "ingest", "analysis"],
    "api": ["model", "plan", "ingest", "analysis", "api"],
}


def rules():
    out = []
    for s in STAGES:
        for t in STAGES:
            out.append((f"daemon/aggregator/{s}", f"daemon/aggregator/{t}", t in ALLOWED[s]))
    out += [
        # The vocabulary knows nothing of the wire; plan/ (plans as agents get them) and ingest/ do.
        ("daemon/aggregator/model", "proto", False),
        ("daemon/aggregator/plan", "proto", True),
        ("daemon/aggregator/model", "exporter", False),
        ("daemon/aggregator/plan", "common/http", False),
        # The CLI speaks HTTP through common/http only: no server, no aggregator internals, no gRPC.
        ("daemon/cli", "common/http", True),
        ("daemon/cli", "exporter", False),
        ("daemon/cli", "daemon/aggregator/api", False),
        ("daemon/cli", "proto", False),
        # probes/ builds without gRPC, HTTP or the daemons.
        ("probes/net", "proto", False),
        ("probes/net", "exporter", False),
        ("probes/net", "daemon/agent", False),
        ("probes/topology", "common", True),
        ("common", "exporter", False),
        ("common/http", "exporter", False),
    ]
    return out


def library_entry(db, folder):
    """A compile command of a non-test source of a library defined in `folder`."""
    for e in sorted(db, key=lambda e: e["file"]):
        d = os.path.dirname(os.path.relpath(e["file"], ROOT))
        base = os.path.basename(e["file"])
        if d != folder or not base.endswith(".cc"):
            continue
        if any(base.endswith(x) for x in ("_test.cc", "_bench.cc", "_fuzz.cc", "_main.cc")):
            continue
        if "/CMakeFiles/fw_" not in e.get("output", "/CMakeFiles/fw_"):
            continue
        return e
    return None


def a_header(folder):
    if folder == "proto":
        return "fabricwatch.pb.h"
    hs = sorted(glob.glob(os.path.join(ROOT, folder, "*.h")))
    return os.path.relpath(hs[0], ROOT) if hs else None


def resolves(entry, header):
    cmd = compile_db.compile_args(entry)
    with tempfile.NamedTemporaryFile("w", suffix=".cc", delete=False) as f:
        f.write(f'#include "{header}"\n')
        probe = f.name
    try:
        r = subprocess.run(cmd + ["-E", "-o", os.devnull, probe], cwd=entry["directory"],
                           capture_output=True, text=True, timeout=120)
    finally:
        os.unlink(probe)
    return r.returncode == 0, r.stderr.strip().splitlines()[:1]


def main():
    global ROOT
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True)
    opts = ap.parse_args()
    ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    try:
        db = compile_db.load(opts.build)
    except (OSError, ValueError) as e:
        print(f"include_roots: {e}")
        return 1
    failures = 0
    checked = 0
    for src_folder, hdr_folder, allowed in rules():
        entry = library_entry(db, src_folder)
        header = a_header(hdr_folder)
        if entry is None or header is None:
            # A build without the daemons (FW_BUILD_DAEMONS=OFF) has no proto or api sources.
            print(f"skip  {src_folder} -> {hdr_folder}: no library source or header in this build")
            continue
        ok, err = resolves(entry, header)
        checked += 1
        verdict = "ok  " if ok == allowed else "FAIL"
        want = "may" if allowed else "may not"
        print(f"{verdict}  {src_folder} {want} include {header}: "
              f"{'resolves' if ok else 'not found'}")
        if ok != allowed:
            failures += 1
            for line in err:
                print(f"      {line}")
    print(f"include_roots: {checked} rules checked, {failures} violated")
    return 1 if failures or checked == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
