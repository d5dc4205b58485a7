"""check_dashboards.py selftest: each check must catch the mistake it exists for."""
import contextlib
import copy
import io
import json
import os
import shutil
import tempfile

from check_dashboards import (Failures, all_panels, check_metrics_doc, check_promql,
                              check_structure, load_dashboards, parse_exposition, resolve,
                              selectors, DEFAULT_METRICS_DOC)


def selftest(d, promtool):
    """Each check must catch the mistake it exists for: break a copy of the fleet dashboard in one
    way at a time and expect the named failure."""
    base = {name: dash for name, dash in load_dashboards(d)}
    fleet_name = "fabricwatch-fleet.json"
    if fleet_name not in base:
        print(f"FAIL: {fleet_name} is missing")
        return 1
    promtool = promtool or shutil.which("promtool")

    def first(dash, pred):
        return next(p for p in all_panels(dash) if pred(p))

    def ts_panel(dash):
        return first(dash, lambda p: p.get("type") == "timeseries")

    def set_expr(expr, legend=None):
        def m(dash):
            t = ts_panel(dash)["targets"][0]
            t["expr"] = expr
            if legend is not None:
                t["legendFormat"] = legend
        return m

    def dup_id(dash):
        ps = [p for p in dash["panels"] if p.get("type") != "row"]
        ps[1]["id"] = ps[0]["id"]

    def no_grid(dash):
        del ts_panel(dash)["gridPos"]

    def overlap(dash):
        ps = [p for p in dash["panels"] if p.get("type") != "row"]
        ps[1]["gridPos"] = dict(ps[0]["gridPos"])

    def hard_uid(dash):
        ts_panel(dash)["targets"][0]["datasource"] = {"type": "prometheus",
                                                      "uid": "P1809F7CD0C75ACF3"}

    def var_ds(dash):
        v = [v for v in dash["templating"]["list"] if v.get("type") == "query"][0]
        v["datasource"] = {"type": "prometheus", "uid": "abc"}

    def bad_empty(dash):
        ts_panel(dash)["description"] = "may be empty: when the moon is full."

    def bad_link(dash):
        ts_panel(dash)["fieldConfig"]["defaults"]["links"] = [
            {"title": "x", "url": "/d/no-such-dashboard/x?var-node=${__field.labels.node}"}]

    def no_ds_var(dash):
        dash["templating"]["list"] = [v for v in dash["templating"]["list"]
                                      if v["name"] != "datasource"]

    def bad_type(dash):
        ts_panel(dash)["type"] = "grafana-worldmap-panel"

    def bad_unit(dash):
        ts_panel(dash)["fieldConfig"]["defaults"]["unit"] = "percentage"

    def bad_provider(tmp):
        path = os.path.join(tmp, "provisioning", "dashboards", "fabricwatch.yaml")
        text = open(path).read().replace("/usr/share/fabricwatch/grafana", "/var/lib/grafana")
        with open(path, "w") as fh:
            fh.write(text)
    bad_provider.on_dir = True

    def bad_provider_no_yaml(tmp):
        os.environ["FW_DASHBOARDS_NO_YAML"] = "1"
        bad_provider(tmp)
    bad_provider_no_yaml.on_dir = True

    cases = [
        ("structure", bad_type, "not a core Grafana panel"),
        ("structure", bad_unit, "not a Grafana unit id"),
        ("structure", bad_provider, "want apiVersion 1 and a file provider"),
        ("structure", bad_provider_no_yaml, "want a file provider with path"),
        ("structure", dup_id, "also used by"),
        ("structure", no_grid, "no gridPos"),
        ("structure", overlap, "overlaps panel"),
        ("structure", hard_uid, "target datasource must be"),
        ("structure", var_ds, "variable transport: datasource must be"),
        ("structure", no_ds_var, "needs a template variable 'datasource'"),
        ("structure", set_expr('fabricwatch_agent_up{node=~"$nosuch"}'), "not a template variable"),
        ("structure", set_expr('fabricwatch_node_probe_loss_ratio{transport="$transport"}'),
         "outside a =~"),
        ("structure",
         set_expr("sum by (transport) (fabricwatch_node_probe_loss_ratio)", "{{node}}"),
         "legend uses {{node}}"),
        ("structure", bad_empty, "is not one of"),
        ("structure", bad_link, "unknown dashboard uid"),
        ("metrics-doc", set_expr("rate(fabricwatch_no_such_thing_total[5m])"), "is not a metric"),
        ("metrics-doc", set_expr('fabricwatch_agent_up{nosuch="x"}'), "has no label 'nosuch'"),
        ("metrics-doc", set_expr("fabricwatch_agent_up_bucket"), "is not a metric"),
        ("metrics-doc", set_expr("sum by (nosuch) (fabricwatch_agent_up)"),
         "label 'nosuch' is on none"),
        ("promql", set_expr("sum(rate(fabricwatch_agent_up[5m])"), "promtool rejects"),
        ("promql", set_expr("fabricwatch_agent_up{node=~$transport}"), "promtool rejects"),
    ]
    fails = Failures()
    ran = 0
    for mode, mutate, want in cases:
        if mode == "promql" and not promtool:
            continue
        with tempfile.TemporaryDirectory(prefix="fw-dash-self-") as tmp:
            shutil.copytree(os.path.join(d, "provisioning"), os.path.join(tmp, "provisioning"))
            for name, dash in base.items():
                dash = copy.deepcopy(dash)
                if name == fleet_name and not getattr(mutate, "on_dir", False):
                    mutate(dash)
                with open(os.path.join(tmp, name), "w") as fh:
                    json.dump(dash, fh)
            if getattr(mutate, "on_dir", False):
                mutate(tmp)
            out = io.StringIO()
            with contextlib.redirect_stdout(out):
                if mode == "structure":
                    rc = check_structure(tmp)
                elif mode == "metrics-doc":
                    rc = check_metrics_doc(tmp, DEFAULT_METRICS_DOC)
                else:
                    rc = check_promql(tmp, promtool)
            os.environ.pop("FW_DASHBOARDS_NO_YAML", None)
            ran += 1
            if rc != 1 or want not in out.getvalue():
                fails.add(f"{mode} / {mutate.__name__ if hasattr(mutate, '__name__') else mutate}",
                          f"want exit 1 and {want!r}, got {rc}:\n{out.getvalue()[-600:]}")
    # The exposition parser: histogram samples fold into their family, a family registered with
    # no series still counts, and _bucket only resolves for histograms.
    exp = parse_exposition(
        "# TYPE a_seconds histogram\n"
        'a_seconds_bucket{transport="udp",le="0.1"} 1\n'
        'a_seconds_sum{transport="udp"} 0.05\n'
        'a_seconds_count{transport="udp"} 1\n'
        "# TYPE b_total counter\n"
        "# TYPE c gauge\n"
        'c{node="x"} 1\n')
    checks = [
        (resolve("a_seconds_bucket", exp), ({"transport"}, {"le"})),
        (resolve("a_seconds_count", exp), ({"transport"}, set())),
        (resolve("b_total", exp), (set(), set())),
        (resolve("c_bucket", exp), None),
        (resolve("c", exp), ({"node"}, set())),
    ]
    for got, want in checks:
        ran += 1
        if got != want:
            fails.add("parse_exposition/resolve", f"got {got}, want {want}")
    sels = selectors('sum by (le) (rate(x_bucket{a=~"$v"}[5m])) and on (job) y or vector(0)')
    ran += 1
    if sels != [("x_bucket", ["a"]), ("y", [])]:
        fails.add("selectors", f"got {sels}")
    return fails.report(f"selftest: {ran} deliberate mistakes and parser cases caught")
