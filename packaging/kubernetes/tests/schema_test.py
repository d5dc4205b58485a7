#!/usr/bin/env python3
"""Every rendered object is valid against its API schema (Kubernetes, Prometheus Operator,
cert-manager), checked offline by validate/validate.mjs with the schemas of the kubernetes-models
npm packages, in strict mode (unknown fields fail).

  schema_test.py WORK_DIR

WORK_DIR (in the build tree) receives the pinned validator packages (`npm ci` from
validate/package-lock.json, once) and the rendered YAML. Skips (77) when node or npm is missing or
the packages cannot be installed. Also feeds tests/invalid.yaml to the validator and expects every
object there to be rejected, so a validator that accepts everything cannot pass.
"""
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import manifests as m  # noqa: E402

VALIDATE = os.path.join(m.KUBE, "validate")


def install(work):
    """Puts validate.mjs and its pinned packages in `work`; skips the test when that fails."""
    for tool in ("node", "npm"):
        if not shutil.which(tool):
            m.skip("%s is not installed (the schema validator runs on Node.js)" % tool)
    os.makedirs(work, exist_ok=True)
    changed = False
    for name in ("package.json", "package-lock.json", "validate.mjs"):
        src, dst = os.path.join(VALIDATE, name), os.path.join(work, name)
        with open(src, "rb") as f:
            data = f.read()
        old = open(dst, "rb").read() if os.path.exists(dst) else None
        if old != data:
            with open(dst, "wb") as f:
                f.write(data)
            changed = changed or name != "validate.mjs"
    marker = os.path.join(work, "node_modules", ".package-lock.json")
    if changed or not os.path.exists(marker):
        p = subprocess.run(["npm", "ci", "--no-audit", "--no-fund", "--ignore-scripts"], cwd=work,
                           capture_output=True, text=True, timeout=600)
        if p.returncode != 0:
            m.skip("npm ci of the validator packages failed (no registry?):\n" + p.stderr[-2000:])


def validate(work, files):
    p = subprocess.run(["node", os.path.join(work, "validate.mjs")] + files, cwd=work,
                       capture_output=True, text=True, timeout=300)
    return p.returncode, p.stdout + p.stderr


def main():
    if len(sys.argv) != 2:
        print("usage: schema_test.py WORK_DIR")
        sys.exit(2)
    m.require_tools()
    work = os.path.abspath(sys.argv[1])
    install(work)
    c = m.Checks()

    for label, path in m.KUSTOMIZATIONS.items():
        # The validator reads kustomize's own output, not a re-serialized copy.
        rc, text, err = m.render_text(path)
        if not c.expect(rc == 0, "render %s exited %d:\n%s" % (label, rc, err)):
            continue
        objects = [d for d in m.yaml.safe_load_all(text) if d]
        out_file = os.path.join(work, "rendered-" + label.replace("/", "-") + ".yaml")
        with open(out_file, "w", encoding="utf-8") as f:
            f.write(text)
        rc, out = validate(work, [out_file])
        ok_lines = [l for l in out.splitlines() if l.startswith("ok ")]
        c.expect(rc == 0 and len(ok_lines) == len(objects),
                 "%s: %d objects, %d valid:\n%s" % (label, len(objects), len(ok_lines), out))
        print("%s: %d objects valid (%s)" % (label, len(ok_lines),
                                             ", ".join(sorted({o["kind"] for o in objects}))))

    invalid = os.path.join(m.HERE, "invalid.yaml")
    with open(invalid, encoding="utf-8") as f:
        count = len([d for d in m.yaml.safe_load_all(f) if d])
    rc, out = validate(work, [invalid])
    fails = [l for l in out.splitlines() if l.startswith("FAIL ")]
    c.expect(rc == 1 and len(fails) == count,
             "invalid.yaml: %d objects, %d rejected:\n%s" % (count, len(fails), out))
    for needle in ("unknown field /spec/template/spec/hostNetwrok", "must be integer",
                   "required property selector", "unknown field /spec/endpoints/0/intervall",
                   "/for must match pattern", 'no schema package for API group "example.com"'):
        c.expect(needle in out, "invalid.yaml: the validator did not report %r:\n%s" % (needle, out))
    c.finish()


if __name__ == "__main__":
    main()
