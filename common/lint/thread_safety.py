#!/usr/bin/env python3
"""Checks Clang's thread-safety analysis on every translation unit that uses common/mutex.h.

Reads the build's compile_commands.json (made by the GCC build CI already runs), and runs each
selected source through clang++ -fsyntax-only -Wthread-safety -Werror=thread-safety with the same
defines and include paths. A source is selected when it, or the header of the same name beside it,
includes common/mutex.h; test sources (*_test.cc) are left out to keep the check short. Exit 0: all
clean; 1: a violation (the diagnostics are printed); 77: no clang++ (ctest reports it skipped).

Usage: thread_safety.py --build BUILD_DIR [--jobs N] [--clang clang++] [--list]
"""
import argparse
import concurrent.futures
import os
import shutil
import subprocess
import sys
import time

import compile_db

MARKER = '#include "common/mutex.h"'


def uses_mutex(path):
    candidates = [path]
    stem, ext = os.path.splitext(path)
    if ext == ".cc":
        candidates.append(stem + ".h")
    for c in candidates:
        try:
            with open(c, encoding="utf-8", errors="replace") as f:
                if MARKER in f.read():
                    return True
        except OSError:
            pass
    return False


def clang_args(entry, clang):
    flags = [a for a in compile_db.compile_args(entry)[1:]
             if not a.startswith("-fsanitize") and not a.startswith("-fno-sanitize")]
    return [clang] + flags + ["-fsyntax-only", "-Wno-everything", "-Wthread-safety",
                              "-Werror=thread-safety", entry["file"]]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--clang", default="clang++")
    ap.add_argument("--list", action="store_true", help="print the selected sources and exit")
    opts = ap.parse_args()

    clang = shutil.which(opts.clang)
    if clang is None:
        print(f"thread_safety: {opts.clang} not found; skipped")
        return 77
    try:
        db = compile_db.load(opts.build)
    except (OSError, ValueError) as e:
        print(f"thread_safety: {e}")
        return 1
    build_dir = os.path.abspath(opts.build) + os.sep
    seen = set()
    entries = []
    for e in db:
        path = e["file"]
        if path in seen or path.endswith("_test.cc") or path.startswith(build_dir):
            continue
        seen.add(path)
        if uses_mutex(path):
            entries.append(e)
    entries.sort(key=lambda e: e["file"])
    if opts.list:
        for e in entries:
            print(e["file"])
        return 0

    def run(entry):
        start = time.monotonic()
        r = subprocess.run(clang_args(entry, clang), cwd=entry["directory"],
                           capture_output=True, text=True)
        return entry["file"], r.returncode, r.stdout + r.stderr, time.monotonic() - start

    start = time.monotonic()
    failed = 0
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, opts.jobs)) as pool:
        for path, rc, text, secs in pool.map(run, entries):
            rel = os.path.relpath(path)
            print(f"{'ok  ' if rc == 0 else 'FAIL'} {secs:5.1f}s {rel}")
            if rc != 0:
                failed += 1
                print(text)
    print(f"thread_safety: {len(entries)} sources, {failed} failed, "
          f"{time.monotonic() - start:.1f}s with {opts.jobs} jobs")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
