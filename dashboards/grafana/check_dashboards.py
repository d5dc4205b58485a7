#!/usr/bin/env python3
"""Checks the Grafana dashboards in this folder without Grafana (it cannot run here).

  check_dashboards.py structure [--dir D]
      JSON model: unique panel ids, a gridPos on every panel (no overlaps, inside 24 columns), the
      templated Prometheus datasource on every panel and target, template variables that resolve,
      links to dashboards that exist, the "may be empty:" convention, the provisioning files.
  check_dashboards.py promql [--dir D] [--promtool P]
      Every expression and variable query parses: each is wrapped into a recording rule and checked
      with `promtool check rules` (promtool has no stand-alone parse command in every version).
  check_dashboards.py metrics-doc [--dir D] [--metrics-doc docs/metrics.md]
      Every metric name and label used is one docs/metrics.md lists (the contract).
  check_dashboards.py metrics-live --aggregator BIN --agent BIN --testdata DIR [--dir D]
      Starts the real aggregator and one agent on loopback, scrapes both /metrics, and checks that
      every metric name used is exported (registered, even if it has no series yet) and that every
      label used exists on it. (dashboard_live.py)
  check_dashboards.py query-live --aggregator BIN --agent BIN --testdata DIR [--prometheus P]
      Two agents that probe each other, an aggregator with a fabric map and a real Prometheus on
      loopback: every variable query and target must be accepted by Prometheus and return data,
      unless its panel is marked "may be empty:" for a condition that fleet does not meet.
  check_dashboards.py selftest [--dir D]
      Breaks copies of the dashboards one way at a time and expects each check to say so.
  check_dashboards.py list-exprs [--dir D] [--rate-interval 1m]
      Prints one JSON object per target (dashboard, panel, expr, a query ready for Prometheus's
      HTTP API, and the conditions under which it may be empty), for other tests to query.

Exit status: 0 pass, 1 fail, 77 skip (a precondition such as promtool is missing).
Python 3 standard library only (PyYAML is used for the provisioning files when it is installed).
"""
import argparse
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
GRID_COLUMNS = 24
# Panel types built into Grafana 9 and later (no plugin to install).
CORE_PANEL_TYPES = {"row", "timeseries", "stat", "table", "bargauge", "gauge", "state-timeline",
                    "status-history", "barchart", "piechart", "heatmap", "histogram", "text",
                    "logs", "nodeGraph"}
# Grafana unit ids the dashboards may use (a subset of Grafana's; extend when needed).
KNOWN_UNITS = {"short", "none", "percent", "percentunit", "s", "ms", "us", "ns", "ops", "reqps",
               "bps", "Bps", "bits", "bytes", "decbytes", "Kbits", "Mbits", "Gbits", "hertz",
               "dtdurations", "dateTimeAsIso"}
PROVISIONED_PATH = "/usr/share/fabricwatch/grafana"
DEFAULT_METRICS_DOC = os.path.normpath(os.path.join(HERE, "..", "..", "docs", "metrics.md"))

# "may be empty: <condition>" in a panel description says the panel may legitimately return no
# data; the condition is one of these phrases (docs/dashboards.md lists them).
EMPTY_CONDITIONS = {
    "without a fabric map": "no-fabric-map",
    "until the node has peers to probe": "no-probes",
    "until a bandwidth probe has run": "no-bandwidth-probe",
    "until a latency baseline exists": "no-baseline",
    "until it happens": "event",
    "on hardware without these counters or devices": "hardware",
}
EMPTY_RE = re.compile(r"may be empty: ([a-z ]+?)(?:[.;,(]|$)")

# Grafana's built-in variables that may appear in expressions, with a duration to parse them as.
BUILTIN_DURATIONS = {"__rate_interval": "5m", "__interval": "1m", "__range": "1h"}
VAR_RE = re.compile(r"\$\{([A-Za-z0-9_]+)(?::[A-Za-z0-9_]+)?\}|\$([A-Za-z_][A-Za-z0-9_]*)|"
                    r"\[\[([A-Za-z0-9_]+)(?::[A-Za-z0-9_]+)?\]\]")
LEGEND_RE = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")

PROMQL_KEYWORDS = {
    "by", "without", "on", "ignoring", "group_left", "group_right", "and", "or", "unless", "bool",
    "offset", "inf", "nan", "atan2", "start", "end",
}
AGGREGATIONS = {"sum", "avg", "min", "max", "count", "stddev", "stdvar", "group", "quantile"}
# Labels every scraped series has (target labels added by Prometheus).
TARGET_LABELS = {"job", "instance"}


class Failures:
    def __init__(self):
        self.items = []

    def add(self, where, msg):
        self.items.append(f"{where}: {msg}")

    def report(self, what):
        if self.items:
            for line in self.items:
                print("FAIL:", line)
            print(f"FAIL: {what}: {len(self.items)} problem(s)")
            return 1
        print(f"PASS: {what}")
        return 0


# --------------------------------------------------------------------------------------- loading
def load_dashboards(d):
    files = sorted(glob.glob(os.path.join(d, "*.json")))
    out = []
    for f in files:
        with open(f, encoding="utf-8") as fh:
            out.append((os.path.basename(f), json.load(fh)))
    return out


def all_panels(dash):
    """Every panel, with the panels nested in collapsed rows."""
    for p in dash.get("panels", []):
        yield p
        for q in p.get("panels", []) or []:
            yield q


def targets(dash):
    """(panel, target) for every query target."""
    for p in all_panels(dash):
        for t in p.get("targets", []) or []:
            yield p, t


def empty_conditions(panel):
    """The keys of the 'may be empty:' conditions in a panel's description."""
    return [EMPTY_CONDITIONS.get(m.group(1).strip(), "?" + m.group(1).strip())
            for m in EMPTY_RE.finditer(panel.get("description", "") or "")]


def variables(dash):
    return {v.get("name"): v for v in dash.get("templating", {}).get("list", [])}


def var_refs(text):
    return [a or b or c for a, b, c in VAR_RE.findall(text or "")]


# ------------------------------------------------------------------------------------ PromQL bits
def strip_strings(expr):
    """Replaces string literals by "" so that their contents are not read as names."""
    return re.sub(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`', '""', expr)


def selectors(expr):
    """(metric name, [label names in its matchers]) for every vector selector in expr."""
    e = strip_strings(expr)
    out = []
    # Label lists of grouping modifiers are not selectors.
    e = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", e)
    e = re.sub(r"\[[^\]]*\]", " ", e)  # range and subquery brackets
    tok = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*|\{[^}]*\}|\d+(?:\.\d+)?(?:e[+-]?\d+)?[a-z]*|.",
                     re.S)
    toks = [m.group(0) for m in tok.finditer(e)]
    i = 0
    while i < len(toks):
        t = toks[i]
        if re.match(r"[A-Za-z_:]", t):
            j = i + 1
            while j < len(toks) and toks[j].isspace():
                j += 1
            nxt = toks[j] if j < len(toks) else ""
            if nxt == "(" or t in PROMQL_KEYWORDS:
                i += 1
                continue
            labels = []
            if nxt.startswith("{"):
                labels = matcher_labels(nxt)
                i = j
            out.append((t, labels))
        elif t.startswith("{"):
            out.append((None, matcher_labels(t)))  # {__name__=...} style
        i += 1
    return out


def matcher_labels(block):
    return re.findall(r"([A-Za-z_][A-Za-z0-9_]*)\s*(?:=~|!~|!=|=)", block)


def grouping_labels(expr):
    """Labels named in by (...) / without (...) / on (...) / ignoring (...) clauses."""
    e = strip_strings(expr)
    out = []
    for m in re.finditer(r"\b(by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)", e):
        out += [x.strip() for x in m.group(2).split(",") if x.strip()]
    return out


def leading_by(expr):
    """For 'agg by (a, b) (...)' at the top, the labels it keeps; None otherwise."""
    m = re.match(r"\s*(?:sum|avg|min|max|count|quantile|stddev|stdvar|group)\s+by\s*\(([^)]*)\)",
                 expr)
    if not m:
        return None
    return {x.strip() for x in m.group(1).split(",") if x.strip()}


def substitute(expr, rate_interval="5m", var_value=".*"):
    """Grafana's interpolation, enough for promtool and for a live Prometheus."""
    def repl(m):
        name = m.group(1) or m.group(2) or m.group(3)
        if name in BUILTIN_DURATIONS:
            return rate_interval if name == "__rate_interval" else BUILTIN_DURATIONS[name]
        return var_value
    return VAR_RE.sub(repl, expr)


def label_values_query(q):
    """label_values(metric{...}, label) -> (metric, matcher labels, label); label_values(label)
    -> (None, [], label); anything else -> None."""
    m = re.fullmatch(r"\s*label_values\(\s*(?:([A-Za-z_:][A-Za-z0-9_:]*)\s*(\{[^}]*\})?\s*,\s*)?"
                     r"([A-Za-z_][A-Za-z0-9_]*)\s*\)\s*", q or "")
    if not m:
        return None
    return m.group(1), matcher_labels(m.group(2) or ""), m.group(3)


def var_query(v):
    q = v.get("query")
    if isinstance(q, dict):
        q = q.get("query", "")
    return q or ""


# ----------------------------------------------------------------------------------- structure
def check_structure(d):
    fails = Failures()
    dashes = load_dashboards(d)
    if len(dashes) < 3:
        fails.add(d, f"expected the fleet, link and node dashboards, found {len(dashes)} files")
    uids = {}
    for name, dash in dashes:
        for key in ("uid", "title", "schemaVersion", "panels", "templating"):
            if key not in dash:
                fails.add(name, f"no '{key}'")
        uid = dash.get("uid", "")
        if uid in uids:
            fails.add(name, f"uid {uid!r} also used by {uids[uid]}")
        uids[uid] = name
        if "__inputs" in dash or "${DS_" in json.dumps(dash):
            fails.add(name, "uses import-time __inputs/${DS_...}; use the ${datasource} variable")
    for name, dash in dashes:
        check_one(name, dash, set(uids), fails)
    check_provisioning(d, fails)
    return fails.report(f"structure of {len(dashes)} dashboards and the provisioning files")


def check_one(name, dash, known_uids, fails):
    vars_ = variables(dash)
    ds = vars_.get("datasource")
    if not ds or ds.get("type") != "datasource" or ds.get("query") != "prometheus":
        fails.add(name, "needs a template variable 'datasource' of type datasource, "
                        "query prometheus")
    for vname, v in vars_.items():
        if v.get("type") == "query":
            if v.get("datasource") != DATASOURCE:
                fails.add(name, f"variable {vname}: datasource must be {DATASOURCE}")
            q = var_query(v)
            if label_values_query(q) is None:
                fails.add(name, f"variable {vname}: query {q!r} is not label_values(metric, label)")
            for ref in var_refs(q):
                if ref not in vars_ or list(vars_).index(ref) >= list(vars_).index(vname):
                    fails.add(name, f"variable {vname} uses ${ref}, not defined before it")
    # A hard-coded datasource anywhere (panel, target, variable, annotation) is a bug.
    def walk(o, path):
        if isinstance(o, dict):
            if "datasource" in o and isinstance(o["datasource"], (dict, str)):
                dsv = o["datasource"]
                builtin = {"type": "grafana", "uid": "-- Grafana --"}  # the annotation query
                if dsv != DATASOURCE and not (path.endswith("annotations.list[]") and
                                              dsv == builtin):
                    fails.add(name, f"{path}: datasource {dsv!r}, want {DATASOURCE}")
            for k, v in o.items():
                if k != "datasource":
                    walk(v, f"{path}.{k}")
        elif isinstance(o, list):
            for v in o:
                walk(v, path + "[]")
    walk({k: v for k, v in dash.items() if k != "templating"}, name)

    ids = {}
    cells = {}
    for p in dash.get("panels", []):
        check_panel(name, p, vars_, known_uids, ids, cells, fails)
        for q in p.get("panels", []) or []:
            check_panel(name, q, vars_, known_uids, ids, None, fails)
    for link in dash.get("links", []):
        for ref in var_refs(link.get("url", "")):
            if ref not in vars_ and not ref.startswith("__"):
                fails.add(name, f"dashboard link uses undefined ${ref}")


def check_panel(name, p, vars_, known_uids, ids, cells, fails):
    pid = p.get("id")
    where = f"{name} panel {pid} {p.get('title', '')!r}"
    if not isinstance(pid, int):
        fails.add(where, "no integer id")
    elif pid in ids:
        fails.add(where, f"id {pid} also used by {ids[pid]!r}")
    else:
        ids[pid] = p.get("title", "")
    g = p.get("gridPos")
    if not isinstance(g, dict) or not all(isinstance(g.get(k), int) for k in "xywh"):
        fails.add(where, "no gridPos with integer x, y, w, h")
    else:
        if g["w"] < 1 or g["h"] < 1 or g["x"] < 0 or g["y"] < 0 or g["x"] + g["w"] > GRID_COLUMNS:
            fails.add(where, f"gridPos {g} outside the {GRID_COLUMNS}-column grid")
        elif cells is not None:
            for x in range(g["x"], g["x"] + g["w"]):
                for y in range(g["y"], g["y"] + g["h"]):
                    if (x, y) in cells:
                        fails.add(where, f"overlaps panel {cells[(x, y)]} at column {x}, row {y}")
                        break
                    cells[(x, y)] = pid
                else:
                    continue
                break
    if not p.get("title"):
        fails.add(where, "no title")
    for ref in var_refs(p.get("title", "")):
        if ref not in vars_:
            fails.add(where, f"title uses undefined ${ref}")
    if p.get("type") not in CORE_PANEL_TYPES:
        fails.add(where, f"panel type {p.get('type')!r} is not a core Grafana panel")
    if p.get("type") == "row":
        return
    fc = p.get("fieldConfig", {})
    units = [fc.get("defaults", {}).get("unit")] + [
        pr.get("value") for o in fc.get("overrides", []) for pr in o.get("properties", [])
        if pr.get("id") == "unit"]
    for u in units:
        if u is not None and u not in KNOWN_UNITS:
            fails.add(where, f"unit {u!r} is not a Grafana unit id this checker knows")
    if p.get("datasource") != DATASOURCE:
        fails.add(where, f"panel datasource must be {DATASOURCE}")
    ts = p.get("targets") or []
    if not ts:
        fails.add(where, "no targets")
    refids = set()
    for t in ts:
        tw = f"{where} target {t.get('refId')}"
        if t.get("datasource") != DATASOURCE:
            fails.add(tw, f"target datasource must be {DATASOURCE}")
        if not t.get("refId") or t.get("refId") in refids:
            fails.add(tw, "missing or duplicate refId")
        refids.add(t.get("refId"))
        expr = t.get("expr", "")
        if not expr.strip():
            fails.add(tw, "empty expr")
        for ref in var_refs(expr) + var_refs(t.get("legendFormat", "")):
            if ref not in vars_ and ref not in BUILTIN_DURATIONS:
                fails.add(tw, f"uses ${ref}, which is not a template variable")
        # A variable in PromQL must sit in a regex matcher, so that multi-value and All work.
        no_regex = re.sub(r'=~\s*"[^"]*"', '=~""', expr)
        for ref in var_refs(no_regex):
            if ref not in BUILTIN_DURATIONS:
                fails.add(tw, f"${ref} is used outside a =~\"...\" matcher")
        # Legend labels must survive a leading 'agg by (...)'.
        kept = leading_by(expr)
        for lab in LEGEND_RE.findall(t.get("legendFormat", "") or ""):
            if kept is not None and lab not in kept:
                fails.add(tw, f"legend uses {{{{{lab}}}}} but the expression keeps only "
                              f"{sorted(kept)}")
    for cond in empty_conditions(p):
        if cond.startswith("?"):
            fails.add(where, f"'may be empty: {cond[1:]}' is not one of {sorted(EMPTY_CONDITIONS)}")
    links = list(p.get("fieldConfig", {}).get("defaults", {}).get("links", []) or []) + \
        list(p.get("links", []) or [])
    for link in links:
        url = link.get("url", "")
        m = re.match(r"/d/([^/?]+)", url)
        if m and m.group(1) not in known_uids:
            fails.add(where, f"link to unknown dashboard uid {m.group(1)!r}")
        for ref in var_refs(url):
            if ref not in vars_ and not ref.startswith("__"):
                fails.add(where, f"link uses undefined ${ref}")


def check_provisioning(d, fails):
    prov = os.path.join(d, "provisioning")
    dash_yaml = os.path.join(prov, "dashboards", "fabricwatch.yaml")
    ds_yaml = os.path.join(prov, "datasources", "prometheus.yaml")
    for f in (dash_yaml, ds_yaml):
        if not os.path.isfile(f):
            fails.add(f, "missing")
            return
    text = open(dash_yaml, encoding="utf-8").read()
    try:
        if os.environ.get("FW_DASHBOARDS_NO_YAML"):
            raise ImportError("FW_DASHBOARDS_NO_YAML is set")
        import yaml  # optional
        doc = yaml.safe_load(text)
        prov_list = doc.get("providers", [])
        ok = any(p.get("type") == "file" and p.get("options", {}).get("path") == PROVISIONED_PATH
                 for p in prov_list)
        if doc.get("apiVersion") != 1 or not ok:
            fails.add(dash_yaml, "want apiVersion 1 and a file provider with path "
                      + PROVISIONED_PATH)
        ds_doc = yaml.safe_load(open(ds_yaml, encoding="utf-8"))
        if not any(x.get("type") == "prometheus" for x in ds_doc.get("datasources", [])):
            fails.add(ds_yaml, "no datasource of type prometheus")
    except ImportError:
        if not re.search(r"^\s*type:\s*file\s*$", text, re.M) or \
                not re.search(r"^\s*path:\s*" + re.escape(PROVISIONED_PATH) + r"\s*$", text, re.M):
            fails.add(dash_yaml, f"want a file provider with path {PROVISIONED_PATH}")
        ds_text = open(ds_yaml, encoding="utf-8").read()
        if not re.search(r"^\s*type:\s*prometheus\s*$", ds_text, re.M):
            fails.add(ds_yaml, "no datasource of type prometheus")


def check_link_vars(d):
    """Links that pass var-X to another dashboard must name variables that dashboard has."""
    fails = Failures()
    dashes = dict((dash.get("uid"), dash) for _, dash in load_dashboards(d))
    for name, dash in load_dashboards(d):
        for p in all_panels(dash):
            for link in p.get("fieldConfig", {}).get("defaults", {}).get("links", []) or []:
                m = re.match(r"/d/([^/?]+)", link.get("url", ""))
                if not m or m.group(1) not in dashes:
                    continue
                have = variables(dashes[m.group(1)])
                for v in re.findall(r"var-([A-Za-z0-9_]+)=", link["url"]):
                    if v not in have:
                        fails.add(f"{name} panel {p.get('id')}", f"link sets var-{v}, which "
                                  f"{m.group(1)} does not define")
    return fails


# -------------------------------------------------------------------------------------- promtool
def check_promql(d, promtool):
    promtool = promtool or shutil.which("promtool")
    if not promtool:
        print("SKIP: promtool is not installed (Debian package prometheus; scripts/setup "
              "installs it)")
        return 77
    fails = Failures()
    groups = []
    where = {}
    for name, dash in load_dashboards(d):
        for p, t in targets(dash):
            gname = f"{name}#panel{p.get('id')}#{t.get('refId')}"
            where[gname] = t.get("expr", "")
            groups.append({"name": gname, "rules": [
                {"record": "fabricwatch:dashboard_check", "expr": substitute(t.get("expr", ""))}]})
        for vname, v in variables(dash).items():
            lv = label_values_query(var_query(v))
            if lv and lv[0]:
                q = re.sub(r"^\s*label_values\(\s*|\s*,\s*[A-Za-z_][A-Za-z0-9_]*\s*\)\s*$", "",
                           var_query(v))
                gname = f"{name}#variable:{vname}"
                where[gname] = q
                groups.append({"name": gname, "rules": [
                    {"record": "fabricwatch:dashboard_check", "expr": substitute(q)}]})
    with tempfile.TemporaryDirectory(prefix="fw-dash-") as tmp:
        rules = os.path.join(tmp, "dashboard-exprs.rules.yml")
        with open(rules, "w") as fh:
            json.dump({"groups": groups}, fh, indent=1)  # JSON is YAML
        r = subprocess.run([promtool, "check", "rules", rules], capture_output=True, text=True)
        if r.returncode != 0:
            out = r.stdout + r.stderr
            named = False
            for gname, expr in where.items():
                if f'"{gname}"' in out or f"group {gname}" in out or gname in out:
                    fails.add(gname, f"promtool rejects {expr!r}")
                    named = True
            fails.add("promtool", out.strip()[-2000:])
            if not named:
                # promtool stops at the first bad rule; find every bad one, one file per rule.
                for g in groups:
                    one = os.path.join(tmp, "one.rules.yml")
                    with open(one, "w") as fh:
                        json.dump({"groups": [g]}, fh)
                    rr = subprocess.run([promtool, "check", "rules", one], capture_output=True,
                                        text=True)
                    if rr.returncode != 0:
                        fails.add(g["name"], f"promtool rejects {where[g['name']]!r}: "
                                  f"{(rr.stdout + rr.stderr).strip()[-300:]}")
    return fails.report(f"{len(groups)} PromQL expressions parse (promtool check rules)")


# ------------------------------------------------------------------------------- metric checking
def used_metrics(d):
    """[(where, metric, matcher labels, grouping labels, legend labels)]"""
    out = []
    for name, dash in load_dashboards(d):
        for p, t in targets(dash):
            expr = t.get("expr", "")
            where = f"{name} panel {p.get('id')} {p.get('title', '')!r} {t.get('refId')}"
            legend = LEGEND_RE.findall(t.get("legendFormat", "") or "")
            sels = selectors(expr)
            if not [s for s in sels if s[0]]:
                out.append((where, None, [], grouping_labels(expr), legend))
            for metric, labels in sels:
                out.append((where, metric, labels, grouping_labels(expr), legend))
        for vname, v in variables(dash).items():
            lv = label_values_query(var_query(v))
            if lv and lv[0]:
                out.append((f"{name} variable {vname}", lv[0], lv[1] + [lv[2]], [], []))
    return out


def check_names(d, exported, source):
    """exported: {metric: {"type": t, "labels": set() or None (unknown/open)}}."""
    fails = Failures()
    uses = used_metrics(d)
    per_where = {}
    for where, metric, labels, grouping, legend in uses:
        if metric is None:
            continue
        info = resolve(metric, exported)
        if info is None:
            fails.add(where, f"{metric} is not a metric fabricwatch exports ({source})")
            continue
        base_labels, extra = info
        per_where.setdefault(where, set())
        if base_labels is None:
            per_where[where] = None
        elif per_where[where] is not None:
            per_where[where] |= base_labels | extra
        if base_labels is None:
            continue
        for lab in labels:
            if lab not in base_labels | extra | TARGET_LABELS:
                fails.add(where, f"{metric} has no label {lab!r} (it has {sorted(base_labels)})")
    # Grouping and legend labels must exist on some metric the target reads.
    for where, metric, labels, grouping, legend in uses:
        if metric is None or where not in per_where or per_where[where] is None:
            continue
        known = per_where[where] | TARGET_LABELS
        for lab in set(grouping) | set(legend):
            if lab not in known:
                fails.add(where, f"label {lab!r} is on none of the metrics it reads")
    n = len({u[1] for u in uses if u[1]})
    return fails.report(f"{n} metric names used by the dashboards exist in {source}")


def resolve(metric, exported):
    """(labels, extra labels) for a metric name, or None. Histogram and summary sample names
    (_bucket, _sum, _count) resolve only when the base name has that type."""
    if metric in exported:
        return exported[metric]["labels"], set()
    for suffix, extra in (("_bucket", {"le"}), ("_sum", set()), ("_count", set())):
        if metric.endswith(suffix):
            base = metric[: -len(suffix)]
            info = exported.get(base)
            if info and info["type"] in ("histogram", "summary"):
                if suffix == "_bucket" and info["type"] == "summary":
                    return None
                return info["labels"], extra
    return None


def parse_metrics_doc(path):
    """{name: {"type": "histogram" or "untyped", "labels": set() or None (an open set)}} from
    docs/metrics.md's tables and its "Both daemons" paragraph. A name written `…_suffix` expands
    to every prefix of the row's first name plus the suffix (lenient; the live check is exact)."""
    exported = {}
    text = open(path, encoding="utf-8").read()
    # The alerts table further down names alerts, not metrics.
    for line in text.split("\n## Alerts", 1)[0].splitlines():
        if not line.startswith("| `"):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        names = re.findall(r"`([^`]+)`", cells[0])
        labels_cell = cells[1] if len(cells) > 1 else ""
        open_set = "…" in labels_cell or "..." in labels_cell
        labels = set(re.findall(r"(?:^|,)\s*([a-z_]+)", re.sub(r"\([^)]*\)", "", labels_cell)))
        first = names[0] if names else ""
        typ = "histogram" if "histogram" in line else "untyped"
        for n in names:
            cands = [n]
            if n.startswith("…") or n.startswith("..."):
                suffix = n.lstrip("….")
                parts = first.split("_")
                cands = ["_".join(parts[:k]) + suffix for k in range(1, len(parts))]
            for c in cands:
                exported[c] = {"type": typ, "labels": None if open_set else set(labels)}
    # Prose: `name{a,b}` or `name` in the "Both daemons" paragraph.
    both = ""
    if "## Both daemons" in text:
        both = text.split("## Both daemons", 1)[1].split("##", 1)[0]
    for m in re.finditer(r"`([a-z_:][a-z0-9_:]*)(?:\{([a-z_,]*)\})?`( \(histogram\))?", both):
        exported.setdefault(m.group(1), {
            "type": "histogram" if m.group(3) else "untyped",
            "labels": set(x for x in (m.group(2) or "").split(",") if x)})
    return exported


def parse_exposition(text, exported=None):
    """Adds the metric families of a Prometheus text exposition to exported."""
    exported = {} if exported is None else exported
    types = {}
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, typ = line.split(None, 3)
            types[name] = typ.strip()
            exported.setdefault(name, {"type": typ.strip(), "labels": set()})
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = re.match(r"([A-Za-z_:][A-Za-z0-9_:]*)(\{(.*)\})?\s", line)
        if not m:
            continue
        name = m.group(1)
        labels = set(re.findall(r'([A-Za-z_][A-Za-z0-9_]*)="', m.group(3) or ""))
        fam = name
        for suffix in ("_bucket", "_sum", "_count"):
            base = name[: -len(suffix)]
            if name.endswith(suffix) and types.get(base) in ("histogram", "summary"):
                fam = name[: -len(suffix)]
                labels.discard("le")
        exported.setdefault(fam, {"type": types.get(fam), "labels": set()})
        exported[fam]["labels"] |= labels
        if types.get(fam) == "summary":
            exported[fam]["labels"].add("quantile")
    return exported


def check_metrics_doc(d, doc):
    exported = parse_metrics_doc(doc)
    if len(exported) < 40:
        print(f"FAIL: read only {len(exported)} metric names from {doc}; has its format changed?")
        return 1
    fails = Failures()
    for msg in check_link_vars(d).items:
        fails.items.append(msg)
    rc = fails.report("links between dashboards set variables the target defines")
    return check_names(d, exported, os.path.relpath(doc)) or rc


# ----------------------------------------------------------------------------------- list-exprs
def list_exprs(d, rate_interval):
    for name, dash in load_dashboards(d):
        for p, t in targets(dash):
            print(json.dumps({
                "dashboard": name, "uid": dash.get("uid"), "panel_id": p.get("id"),
                "panel": p.get("title"), "ref_id": t.get("refId"), "expr": t.get("expr"),
                "query": substitute(t.get("expr", ""), rate_interval=rate_interval),
                "instant": bool(t.get("instant")),
                "may_be_empty": empty_conditions(p),
            }, ensure_ascii=False))
    return 0



def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("mode", choices=["structure", "promql", "metrics-doc", "metrics-live",
                                     "query-live", "list-exprs", "selftest"])
    ap.add_argument("--dir", default=HERE)
    ap.add_argument("--promtool")
    ap.add_argument("--metrics-doc", default=DEFAULT_METRICS_DOC)
    ap.add_argument("--prometheus")
    ap.add_argument("--aggregator")
    ap.add_argument("--agent")
    ap.add_argument("--testdata")
    ap.add_argument("--rate-interval", default="1m")
    a = ap.parse_args()
    if a.mode == "structure":
        return check_structure(a.dir)
    if a.mode == "promql":
        return check_promql(a.dir, a.promtool)
    if a.mode == "metrics-doc":
        return check_metrics_doc(a.dir, a.metrics_doc)
    if a.mode in ("metrics-live", "query-live"):
        if not (a.aggregator and a.agent and a.testdata):
            ap.error(f"{a.mode} needs --aggregator, --agent and --testdata")
        import dashboard_live
        if a.mode == "metrics-live":
            return dashboard_live.check_metrics_live(a.dir, a.aggregator, a.agent, a.testdata)
        return dashboard_live.check_query_live(a.dir, a.aggregator, a.agent, a.testdata,
                                               a.prometheus)
    if a.mode == "selftest":
        import dashboard_selftest
        return dashboard_selftest.selftest(a.dir, a.promtool)
    return list_exprs(a.dir, a.rate_interval)


if __name__ == "__main__":
    sys.exit(main())
