#!/usr/bin/env python3
"""The rendered PrometheusRule holds exactly the rules of dashboards/prometheus/fabricwatch.rules.yml.

The rules file is the one source of truth, read at render time by the generator plugin; this test
renders the example overlay as an operator does and compares spec.groups with the file's groups
(parsed, so formatting may differ but no group, rule, expression, duration, label or annotation
may). It also runs promtool on the rendered spec when promtool is installed, and checks that the
generator refuses a rules file it cannot turn into a PrometheusRule instead of rendering a partial
one.
"""
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import manifests as m  # noqa: E402


def main():
    m.require_tools()
    c = m.Checks()
    objects = m.render(m.KUSTOMIZATIONS["overlays/example"])
    rule = m.one(objects, "PrometheusRule")
    with open(m.RULES_FILE, encoding="utf-8") as f:
        source = m.yaml.safe_load(f)

    rendered_groups = rule["spec"]["groups"]
    c.expect(list(rule["spec"].keys()) == ["groups"],
             "PrometheusRule spec has keys %s besides groups" % list(rule["spec"].keys()))
    names = [g["name"] for g in source["groups"]]
    c.expect([g["name"] for g in rendered_groups] == names,
             "groups differ: rendered %s, rules file %s"
             % ([g["name"] for g in rendered_groups], names))
    for want in source["groups"]:
        got = next((g for g in rendered_groups if g["name"] == want["name"]), None)
        if got is None:
            continue
        c.expect(got == want, "group %s differs from the rules file" % want["name"])
    rules = sum(len(g.get("rules", [])) for g in source["groups"])
    c.expect(rules > 0, "the rules file holds no rules")
    print("rules file: %d groups, %d rules; compared with PrometheusRule %s/%s"
          % (len(names), rules, rule["metadata"]["namespace"], rule["metadata"]["name"]))

    # Prometheus itself accepts the rendered spec (a PrometheusRule's spec is a rules file).
    promtool = shutil.which("promtool")
    with tempfile.TemporaryDirectory() as tmp:
        if promtool:
            path = os.path.join(tmp, "rendered.rules.yml")
            with open(path, "w", encoding="utf-8") as f:
                m.yaml.safe_dump(rule["spec"], f)
            p = subprocess.run([promtool, "check", "rules", path], capture_output=True, text=True)
            c.expect(p.returncode == 0, "promtool check rules on the rendered spec:\n" + p.stdout
                     + p.stderr)
        else:
            print("note: promtool not installed; rendered spec not checked by promtool")

        # A rules file with something besides `groups:` must stop the render, not be half-copied.
        bad = os.path.join(tmp, "bad.rules.yml")
        with open(m.RULES_FILE, encoding="utf-8") as f:
            text = f.read()
        with open(bad, "w", encoding="utf-8") as f:
            f.write(text + "\nrule_files: [other.yml]\n")
        env = dict(os.environ, FABRICWATCH_RULES_FILE=bad)
        rc, out, err = m.render_text(m.KUSTOMIZATIONS["overlays/example"], env)
        c.expect(rc != 0 and "holds only `groups:`" in err,
                 "render with an extra top-level key exited %d: %s" % (rc, err.strip()))
        env = dict(os.environ, FABRICWATCH_RULES_FILE=os.path.join(tmp, "missing.yml"))
        rc, out, err = m.render_text(m.KUSTOMIZATIONS["overlays/example"], env)
        c.expect(rc != 0 and "cannot read rules file" in err,
                 "render with a missing rules file exited %d: %s" % (rc, err.strip()))
    c.finish()


if __name__ == "__main__":
    main()
