"""Shared helpers of the Kubernetes manifest tests: render a kustomization the way an operator does
(packaging/kubernetes/render), parse the objects, and expand container arguments as the kubelet does.

Each test exits 0 on success, 1 on failure, and 77 (ctest SKIP_RETURN_CODE) when a precondition
is missing (kubectl, PyYAML), naming what is missing.
"""
import os
import re
import subprocess
import sys

SKIP = 77
HERE = os.path.dirname(os.path.abspath(__file__))
KUBE = os.path.dirname(HERE)                      # packaging/kubernetes
ROOT = os.path.dirname(os.path.dirname(KUBE))     # the repository
RULES_FILE = os.path.join(ROOT, "dashboards", "prometheus", "fabricwatch.rules.yml")
# Every kustomization that the tests render: the plain base, and the example overlay with every
# component.
KUSTOMIZATIONS = {
    "base": os.path.join(KUBE, "base"),
    "overlays/example": os.path.join(KUBE, "overlays", "example"),
}

try:
    import yaml
except ImportError:
    yaml = None


def skip(why):
    print("SKIP: " + why)
    sys.exit(SKIP)


def require_tools():
    if yaml is None:
        skip("PyYAML is not installed (Debian: python3-yaml)")
    if subprocess.run(["sh", "-c", "command -v kubectl || command -v kustomize"],
                      stdout=subprocess.DEVNULL).returncode != 0:
        skip("neither kubectl nor kustomize is on PATH")


def render_text(kustomization, env=None):
    """Runs packaging/kubernetes/render; returns (exit status, stdout, stderr)."""
    p = subprocess.run([os.path.join(KUBE, "render"), kustomization], capture_output=True,
                       text=True, env=env, timeout=120)
    return p.returncode, p.stdout, p.stderr


def render(kustomization):
    """The rendered objects of `kustomization` (a directory), or exit 1 with kustomize's message."""
    rc, out, err = render_text(kustomization)
    if rc != 0:
        print("FAIL: render %s exited %d:\n%s" % (kustomization, rc, err))
        sys.exit(1)
    return [d for d in yaml.safe_load_all(out) if d]


def find(objects, kind, name=None):
    found = [o for o in objects
             if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)]
    return found


def one(objects, kind, name=None):
    found = find(objects, kind, name)
    if len(found) != 1:
        print("FAIL: expected one %s%s, rendered %d" % (kind, " " + name if name else "",
                                                         len(found)))
        sys.exit(1)
    return found[0]


_REF = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")


def expand(text, env):
    """Kubelet expansion of command and args: $(NAME) becomes env[NAME] when NAME is defined and
    stays as written otherwise; $$ is an escaped $."""
    def sub(m):
        if m.group(0) == "$$":
            return "$"
        return env.get(m.group(1), m.group(0))
    return _REF.sub(sub, text)


class Checks:
    """Collects failures so that one run reports all of them."""

    def __init__(self):
        self.failures = 0
        self.passed = 0

    def expect(self, ok, what):
        if ok:
            self.passed += 1
        else:
            self.failures += 1
            print("FAIL: " + what)
        return ok

    def finish(self):
        print("%d passed, %d failed" % (self.passed, self.failures))
        sys.exit(1 if self.failures else 0)
