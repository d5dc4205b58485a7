"""The PromQL expressions of the Grafana dashboards, with their template variables filled in.

Reads dashboards/grafana/*.json at run time (never a copy). A panel whose description contains
"may be empty:" may legitimately return nothing (the dashboards' own convention); every other
visible target must return data while the fleet runs with a fault.
"""

import glob
import json
import os
import re

MAY_BE_EMPTY = "may be empty:"

# Grafana's built-in variables, as a dashboard over the last 5 minutes would fill them in with a
# 1 s scrape interval. $__rate_interval is at least four scrape intervals in Grafana; one minute
# gives rate() enough samples while still following the fault.
BUILTINS = {
    "__rate_interval": "1m", "__interval": "15s", "__interval_ms": "15000", "__range": "5m",
    "__range_s": "300", "__range_ms": "300000",
}

# ${name}, ${name:format}, [[name]], [[name:format]], $name
_VAR_RE = re.compile(r"\$\{(\w+)(?::[^}]*)?\}|\[\[(\w+)(?::[^\]]*)?\]\]|\$(\w+)")
_LABEL_VALUES_RE = re.compile(r"^\s*label_values\(\s*(?:(.*),\s*)?(\w+)\s*\)\s*$", re.S)


class DashboardError(Exception):
    """A dashboard or one of its variables cannot be turned into queries."""


class Query:
    def __init__(self, path, panel, ref, expr, may_be_empty):
        self.path, self.panel, self.ref = path, panel, ref
        self.expr, self.may_be_empty = expr, may_be_empty
        self.resolved = None

    def where(self):
        return f"{os.path.basename(self.path)}: panel {self.panel!r} target {self.ref}"


def dashboard_files(source_dir):
    files = sorted(glob.glob(os.path.join(source_dir, "dashboards", "grafana", "*.json")))
    if not files:
        raise DashboardError(f"no dashboards/grafana/*.json under {source_dir}")
    return files


def _panels(panels):
    for p in panels or []:
        yield p
        yield from _panels(p.get("panels"))  # rows hold their panels when collapsed


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        raise DashboardError(f"{path}: {e}") from None


def queries(path, dash=None):
    """Every visible Prometheus target of every panel of one dashboard."""
    dash = dash or load(path)
    out = []
    for p in _panels(dash.get("panels")):
        may_be_empty = MAY_BE_EMPTY in (p.get("description") or "")
        for i, t in enumerate(p.get("targets") or []):
            expr = t.get("expr")
            if not expr or t.get("hide"):
                continue
            out.append(Query(path, p.get("title", f"id {p.get('id')}"), t.get("refId", str(i)),
                             expr, may_be_empty))
    return out


def variables_in(text):
    return {next(g for g in m.groups() if g) for m in _VAR_RE.finditer(text)}


def substitute(text, values):
    """text with every template variable replaced; DashboardError naming any unknown one."""
    missing = sorted(v for v in variables_in(text) if v not in values and v not in BUILTINS)
    if missing:
        raise DashboardError(f"unknown template variable(s) {missing} in {text!r}")
    every = dict(BUILTINS, **values)
    return _VAR_RE.sub(lambda m: str(every[next(g for g in m.groups() if g)]), text)


def resolve_variables(dash, overrides, label_values):
    """{name: one concrete value} for each templating variable of dash, in order (a variable's
    query may use the ones before it).

    overrides: values the caller knows (the faulted link, a node next to it).
    label_values(label, match_or_None): the values Prometheus has for a label.
    """
    values = {}
    for v in (dash.get("templating") or {}).get("list", []):
        name, kind = v.get("name"), v.get("type")
        if not name:
            continue
        if name in overrides:
            values[name] = overrides[name]
        elif kind == "datasource":
            values[name] = "prometheus"
        elif kind == "query":
            q = v.get("query")
            q = q.get("query") if isinstance(q, dict) else q
            m = _LABEL_VALUES_RE.match(substitute(q or "", values))
            if not m:
                raise DashboardError(f"variable {name}: cannot evaluate query {q!r} (only "
                                     "label_values(...) is understood; add an override)")
            found = sorted(label_values(m.group(2), m.group(1)))
            if not found:
                raise DashboardError(f"variable {name}: {q!r} has no values in Prometheus")
            values[name] = found[0]
        elif kind in ("custom", "interval"):
            opts = [o.strip() for o in (v.get("query") or "").split(",") if o.strip()]
            cur = (v.get("current") or {}).get("value")
            values[name] = cur if isinstance(cur, str) and cur and cur != "$__all" else opts[0]
        elif kind in ("constant", "textbox"):
            values[name] = v.get("query", "")
        else:
            raise DashboardError(f"variable {name}: type {kind!r} is not understood")
    return values
