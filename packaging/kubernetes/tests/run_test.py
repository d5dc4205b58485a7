#!/usr/bin/env python3
"""Today's binaries start and work with exactly the commands, arguments and files the rendered
manifests give them.

  run_test.py AGENT_BIN AGGREGATOR_BIN [SYSFS_DIR]

For base and the example overlay: each pod's volumes become temporary folders (a ConfigMap's keys
and a Secret's listed keys become files, the /sys hostPath becomes SYSFS_DIR, or an empty folder), the downward API values
become test values (node name k8s-test-node, host IP 127.0.0.2), $(VAR) references are expanded
as the kubelet does, init containers run (the fabric-interface one with FABRIC_INTERFACE=lo), and
the only arguments changed are the listen addresses (loopback, port 0), the agent's --aggregator
(the test's aggregator) and an added --port-file. Then: the aggregator answers /healthz and /readyz
and keeps its state in the --state-dir volume, the agent answers /healthz and /metrics, the
aggregator lists the agent under the downward-API node name with the expected probe address, and
both exit 0 on SIGTERM. A flag the binaries do not know would make them exit 3 at once.
"""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import manifests as m  # noqa: E402

NODE = "k8s-test-node"
NAMESPACE = "fw-test"
HOST_IP = "127.0.0.2"
FIELDS = {"spec.nodeName": NODE, "metadata.namespace": NAMESPACE, "status.hostIP": HOST_IP}


class Pod:
    """A pod template laid out in a temporary folder: volumes as folders, mounts as a path map."""

    def __init__(self, tmp, name, spec, objects, sysfs):
        self.root = os.path.join(tmp, name)
        self.dirs = {}
        for v in spec.get("volumes", []):
            path = os.path.join(self.root, v["name"])
            if v.get("hostPath", {}).get("path") == "/sys" and sysfs:
                path = sysfs
            else:
                os.makedirs(path)
            # A Secret's listed keys become files with test content (the Secret itself is made
            # outside the manifests, e.g. components/probe-key's key).
            for item in v.get("secret", {}).get("items", []):
                with open(os.path.join(path, item["path"]), "w", encoding="utf-8") as f:
                    f.write("k8s-test-secret-" + item["key"] + "\n")
            if "configMap" in v:
                cm = m.one(objects, "ConfigMap", v["configMap"]["name"])
                for key, text in cm.get("data", {}).items():
                    with open(os.path.join(path, key), "w", encoding="utf-8") as f:
                        f.write(text)
            self.dirs[v["name"]] = path
        for t in spec.get("volumeClaimTemplates", []):
            self.dirs[t["metadata"]["name"]] = os.path.join(self.root, t["metadata"]["name"])
            os.makedirs(self.dirs[t["metadata"]["name"]])

    def argv(self, container, binaries, env_override=None):
        """The container's command line with mounts mapped to folders and $(VAR) expanded."""
        env = {}
        for e in container.get("env", []):
            if "valueFrom" in e:
                env[e["name"]] = FIELDS[e["valueFrom"]["fieldRef"]["fieldPath"]]
            else:
                env[e["name"]] = m.expand(e.get("value", ""), env)
        env.update(env_override or {})
        mounts = sorted(container.get("volumeMounts", []), key=lambda vm: -len(vm["mountPath"]))

        # One pass over the text, longest mount path first, each only as a whole path prefix, so
        # that a folder substituted for one mount (under /tmp) is never rewritten by another.
        by_path = {vm["mountPath"].rstrip("/"): self.dirs[vm["name"]] for vm in mounts}
        pattern = re.compile(r"(?<![\w./-])(" + "|".join(re.escape(p) for p in by_path)
                             + r")(?![\w.-])")

        def remap(text):
            return pattern.sub(lambda mt: by_path[mt.group(1)], text) if by_path else text

        words = [remap(m.expand(w, env)) for w in container.get("command", []) +
                 container.get("args", [])]
        words[0] = binaries.get(words[0], words[0])
        return words, env


def replace_flag(words, flag, value):
    """Sets --flag=value; the flag must already be in the manifest's arguments."""
    hits = [i for i, w in enumerate(words) if w.startswith(flag + "=")]
    if len(hits) != 1:
        raise AssertionError("%s appears %d times in %s" % (flag, len(hits), words))
    words[hits[0]] = flag + "=" + value


def wait_json(path, proc, seconds):
    deadline = time.time() + seconds
    while time.time() < deadline:
        if proc.poll() is not None:
            return None
        try:
            with open(path, encoding="utf-8") as f:
                return json.load(f)
        except (OSError, ValueError):
            time.sleep(0.1)
    return None


def get(url, timeout=2):
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()
    except OSError as e:
        return None, str(e)


def poll(fn, seconds):
    deadline = time.time() + seconds
    while time.time() < deadline:
        value = fn()
        if value:
            return value
        time.sleep(0.2)
    return fn()


def start(c, label, name, words, tmp, procs):
    """Starts a daemon with --port-file added and checks its /healthz; returns its bound ports
    and HTTP base URL, or None (a failure)."""
    ports_file = os.path.join(tmp, name + ".ports")
    words = words + ["--port-file=" + ports_file]
    log = os.path.join(tmp, name + ".log")
    with open(log, "w") as out:
        proc = subprocess.Popen(words, stdout=out, stderr=subprocess.STDOUT)
    procs.append((proc, name, log))
    ports = wait_json(ports_file, proc, 20)
    if not c.expect(ports is not None, "%s: the %s did not start: %s\n%s"
                    % (label, name, " ".join(words), open(log).read()[-3000:])):
        return None
    http = "http://127.0.0.1:%d" % ports["http_port"]
    c.expect(get(http + "/healthz")[0] == 200, "%s: %s /healthz is not 200" % (label, name))
    return ports, http


def stop(c, proc, name, log):
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    if not c.expect(proc.returncode == 0, "%s exited %s after SIGTERM" % (name, proc.returncode)):
        with open(log, encoding="utf-8", errors="replace") as f:
            print(f.read()[-3000:])


def run_kustomization(c, label, path, binaries, sysfs):
    objs = m.render(path)
    sts = m.one(objs, "StatefulSet", "fabricwatch-aggregator")
    ds = m.one(objs, "DaemonSet", "fabricwatch-agent")
    with tempfile.TemporaryDirectory(prefix="fw-k8s-run-") as tmp:
        agg_pod = Pod(tmp, "aggregator", dict(sts["spec"]["template"]["spec"],
                                             volumeClaimTemplates=sts["spec"].get(
                                                 "volumeClaimTemplates", [])), objs, None)
        agent_pod = Pod(tmp, "agent", ds["spec"]["template"]["spec"], objs, sysfs)
        procs = []
        try:
            # Aggregator, as the StatefulSet runs it.
            agg_ctr = sts["spec"]["template"]["spec"]["containers"][0]
            words, _ = agg_pod.argv(agg_ctr, binaries)
            replace_flag(words, "--grpc-listen", "127.0.0.1:0")
            replace_flag(words, "--http-listen", "127.0.0.1:0")
            started = start(c, label, "aggregator", words, tmp, procs)
            if started is None:
                return
            ports, http = started
            c.expect(poll(lambda: get(http + "/readyz")[0] == 200, 15),
                     label + ": aggregator /readyz did not turn 200")
            state = next(w.split("=", 1)[1] for w in words if w.startswith("--state-dir="))
            c.expect(poll(lambda: os.listdir(state), 10),
                     label + ": the aggregator wrote nothing into its --state-dir volume")

            # Init containers, then the agent, as the DaemonSet runs them.
            for init in ds["spec"]["template"]["spec"].get("initContainers", []):
                override = {"FABRIC_INTERFACE": "lo"} if any(
                    e["name"] == "FABRIC_INTERFACE" for e in init.get("env", [])) else {}
                words, env = agent_pod.argv(init, binaries, override)
                p = subprocess.run(words, capture_output=True, text=True, timeout=30,
                                   env=dict(os.environ, **env))
                c.expect(p.returncode == 0, "%s: init container %s exited %d: %s"
                         % (label, init["name"], p.returncode, p.stderr))
            agent_ctr = ds["spec"]["template"]["spec"]["containers"][0]
            words, _ = agent_pod.argv(agent_ctr, binaries)
            replace_flag(words, "--aggregator", "127.0.0.1:%d" % ports["grpc_port"])
            replace_flag(words, "--http-listen", "127.0.0.1:0")
            replace_flag(words, "--probe-port", "0")
            started = start(c, label, "agent", words, tmp, procs)
            if started is None:
                return
            ahttp = started[1]
            status, body = get(ahttp + "/metrics")
            c.expect(status == 200 and "fabricwatch_build_info" in body,
                     label + ": agent /metrics lacks fabricwatch_build_info")

            # The fabric-interface overlay probes from lo's address; base from the host IP.
            want = "127.0.0.1" if ds["spec"]["template"]["spec"].get("initContainers") else HOST_IP

            def listed():
                status, body = get(http + "/api/v1/nodes")
                if status != 200:
                    return None
                node = next((n for n in json.loads(body) if n["name"] == NODE), None)
                return node if node and node["connected"] and node["endpoints"] else None
            node = poll(listed, 20)
            if c.expect(node is not None, "%s: the aggregator does not list %s as connected"
                        % (label, NODE)):
                addresses = {e["address"] for e in node["endpoints"]}
                c.expect(addresses == {want}, "%s: probe endpoints %s, expected %s"
                         % (label, sorted(addresses), want))
                print("%s: aggregator ready, agent %s connected, probing from %s"
                      % (label, NODE, ", ".join(sorted(addresses))))
        finally:
            for proc, name, log in reversed(procs):
                stop(c, proc, name, log)


def main():
    if len(sys.argv) not in (3, 4):
        print("usage: run_test.py AGENT_BIN AGGREGATOR_BIN [SYSFS_DIR]")
        sys.exit(2)
    m.require_tools()
    if not shutil.which("ip"):
        m.skip("`ip` (iproute2) is not installed; the fabric-interface init container needs it")
    binaries = {"fabricwatch-agent": os.path.abspath(sys.argv[1]),
                "fabricwatch-aggregator": os.path.abspath(sys.argv[2])}
    sysfs = sys.argv[3] if len(sys.argv) == 4 and os.path.isdir(sys.argv[3]) else None
    c = m.Checks()
    for label, path in m.KUSTOMIZATIONS.items():
        run_kustomization(c, label, path, binaries, sysfs)
    c.finish()


if __name__ == "__main__":
    main()
