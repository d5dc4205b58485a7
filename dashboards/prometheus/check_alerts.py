#!/usr/bin/env python3
"""Checks that every alert in a Prometheus rules file is complete.

For each alerting rule: a severity label (critical, warning or info), a summary annotation, and a
runbook_url annotation that ends in /<alertname>.md. For each alert name: docs/runbooks/<name>.md
with the four sections every runbook has, a promtool test case that expects it firing for each
severity it is defined with, and one that expects it silent. Runbooks without an alert fail too.

PyYAML is not a build dependency, so the files are read line by line. That holds for the layout
fabricwatch.rules.yml and its tests use (block mappings, labels as a flow map or a block, no
anchors); anything the reader does not understand is an error, never a silent pass.

Exit status: 0 complete, 1 something is missing (each gap printed), 2 usage or parse error.
"""

import argparse
import os
import re
import sys

SEVERITIES = {"critical", "warning", "info"}
RUNBOOK_SECTIONS = ["## What it means", "## Confirm", "## What to do", "## Why this `for:`"]


class ParseError(Exception):
    pass


def flow_map(text):
    """Parses a one-line YAML flow map of plain or double-quoted scalars: {a: b, c: "d"}."""
    text = text.strip()
    if not (text.startswith("{") and text.endswith("}")):
        raise ParseError("not a flow map: " + text)
    out = {}
    for m in re.finditer(r'\s*([A-Za-z_][A-Za-z0-9_]*)\s*:\s*("(?:[^"\\]|\\.)*"|[^,}]*)\s*(?:,|$)',
                         text[1:-1]):
        value = m.group(2).strip()
        if value.startswith('"'):
            value = value[1:-1]
        out[m.group(1)] = value
    return out


def read_rules(path):
    """Returns [{alert, line, severity, summary, runbook_url, has_for}] in file order."""
    rules = []
    current = None
    block = None  # 'labels' or 'annotations' while inside a block mapping
    block_indent = 0
    with open(path, encoding="utf-8") as f:
        for n, raw in enumerate(f, 1):
            line = raw.rstrip("\n")
            stripped = line.strip()
            if not stripped or stripped.startswith("#"):
                continue
            indent = len(line) - len(line.lstrip())
            if "&" in stripped.split("#")[0] and re.search(r":\s*&\w", stripped):
                raise ParseError(f"{path}:{n}: YAML anchors are not supported here")
            if re.search(r":\s*\*\w", stripped):
                raise ParseError(f"{path}:{n}: YAML aliases are not supported here")
            m = re.match(r"-\s+(alert|record):\s*(\S+)\s*$", stripped)
            if m:
                current = None
                block = None
                if m.group(1) == "alert":
                    current = {"alert": m.group(2), "line": n, "severity": None, "summary": None,
                               "runbook_url": None, "has_for": False}
                    rules.append(current)
                continue
            if current is None:
                continue
            if block and indent <= block_indent:
                block = None
            m = re.match(r"(labels|annotations):\s*(.*)$", stripped)
            if m:
                rest = m.group(2).strip()
                if rest.startswith("{"):
                    fields = flow_map(rest)
                    if m.group(1) == "labels":
                        current["severity"] = fields.get("severity")
                    else:
                        current["summary"] = fields.get("summary")
                        current["runbook_url"] = fields.get("runbook_url")
                elif rest:
                    raise ParseError(f"{path}:{n}: cannot read {m.group(1)}: {rest}")
                else:
                    block, block_indent = m.group(1), indent
                continue
            if stripped.startswith("for:"):
                current["has_for"] = True
                continue
            if block:
                m = re.match(r"([A-Za-z_]+):\s*(.*)$", stripped)
                if not m:
                    continue  # continuation of a multi-line value
                key, value = m.group(1), m.group(2).strip()
                if value[:1] in "'\"" and value[-1:] == value[:1]:
                    value = value[1:-1]
                if block == "labels" and key == "severity":
                    current["severity"] = value
                elif block == "annotations" and key in ("summary", "runbook_url"):
                    current[key] = value
    return rules


def read_tests(path):
    """Returns {alertname: {'firing': set(severities), 'silent': count}}."""
    cases = {}
    alert = None
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    for n, raw in enumerate(lines, 1):
        stripped = raw.split(" #")[0].strip()
        if stripped.startswith("- {") and "alertname" in stripped:
            fields = flow_map(stripped[2:])
            entry = cases.setdefault(fields["alertname"], {"firing": set(), "silent": 0})
            if fields.get("exp_alerts", "").strip() == "[]":
                entry["silent"] += 1
            else:
                raise ParseError(f"{path}:{n}: inline test cases must expect no alerts")
            alert = None
            continue
        m = re.match(r"alertname:\s*(\S+)$", stripped)
        if m:
            alert = m.group(1)
            cases.setdefault(alert, {"firing": set(), "silent": 0})
            continue
        if alert is None:
            continue
        if stripped.startswith("- eval_time") or stripped.startswith("- name:"):
            alert = None
            continue
        if re.match(r"exp_alerts:\s*\[\]$", stripped):
            cases[alert]["silent"] += 1
            continue
        m = re.match(r"- exp_labels:\s*(\{.*\})$", stripped)
        if m:
            severity = flow_map(m.group(1)).get("severity")
            if not severity:
                raise ParseError(f"{path}:{n}: expected alert without a severity label")
            cases[alert]["firing"].add(severity)
    return cases


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rules", required=True)
    ap.add_argument("--tests", required=True, nargs="+")
    ap.add_argument("--runbooks", required=True, help="directory of <Alert>.md files")
    args = ap.parse_args()
    try:
        rules = read_rules(args.rules)
        tests = {}
        for path in args.tests:
            for name, entry in read_tests(path).items():
                t = tests.setdefault(name, {"firing": set(), "silent": 0})
                t["firing"] |= entry["firing"]
                t["silent"] += entry["silent"]
    except (OSError, ParseError) as e:
        print(f"check_alerts: {e}", file=sys.stderr)
        return 2
    if not rules:
        print(f"check_alerts: no alerting rules in {args.rules}", file=sys.stderr)
        return 2

    gaps = []
    names = []
    for r in rules:
        where = f"{args.rules}:{r['line']} {r['alert']}"
        if r["alert"] not in names:
            names.append(r["alert"])
        if r["severity"] not in SEVERITIES:
            gaps.append(f"{where}: severity label is {r['severity']!r}, not one of {sorted(SEVERITIES)}")
        if not r["summary"]:
            gaps.append(f"{where}: no summary annotation")
        if not r["runbook_url"] or not r["runbook_url"].endswith("/" + r["alert"] + ".md"):
            gaps.append(f"{where}: runbook_url {r['runbook_url']!r} does not end in /{r['alert']}.md")
        t = tests.get(r["alert"])
        if not t or r["severity"] not in t["firing"]:
            gaps.append(f"{where}: no promtool test expects it firing with severity {r['severity']}")
    for name in names:
        t = tests.get(name)
        if not t or t["silent"] == 0:
            gaps.append(f"{name}: no promtool test expects it silent (exp_alerts: [])")
        path = os.path.join(args.runbooks, name + ".md")
        if not os.path.isfile(path):
            gaps.append(f"{name}: no runbook {path}")
            continue
        with open(path, encoding="utf-8") as f:
            text = f.read()
        for section in RUNBOOK_SECTIONS:
            if section not in text:
                gaps.append(f"{path}: no section {section!r}")
        confirm = text.split("## Confirm", 1)[-1].split("\n## ", 1)[0]
        if "fabricwatch" not in confirm:
            gaps.append(f"{path}: the Confirm section names no fabricwatch command")
    for entry in sorted(os.listdir(args.runbooks)) if os.path.isdir(args.runbooks) else []:
        if entry.endswith(".md") and entry != "README.md" and entry[:-3] not in names:
            gaps.append(f"{os.path.join(args.runbooks, entry)}: runbook for an alert that does not exist")
    for name in sorted(set(tests) - set(names)):
        gaps.append(f"tests name alert {name}, which the rules file does not define")

    for g in gaps:
        print(g)
    print(f"check_alerts: {len(rules)} alerting rules, {len(names)} alerts, {len(gaps)} gaps")
    return 1 if gaps else 0


if __name__ == "__main__":
    sys.exit(main())
