#!/usr/bin/env python3
"""The rendered manifests hang together the way fabricwatch needs them to, in base and in the
example overlay: each check names a thing an operator would notice broken on a cluster.

Agent: host network with cluster DNS, /sys read-only at --sysfs-root, /dev/infiniband, node name
from the downward API, probe address from status.hostIP (or from the fabric-interface init
container), GPU tolerations, requests and limits, container ports and probes on the flags' ports,
and --aggregator naming the aggregator Service's gRPC port. Aggregator: one replica, --state-dir on
the volume claim, --fabric-map (when given) on a key of a ConfigMap, /healthz and /readyz on the
HTTP port, a Service that selects its pods. Monitoring and certificates (overlay): monitors select
the right pods and ports, the alert rules' job labels are the monitors' jobs, and the TLS Secrets
mounted are the ones cert-manager writes, for the Service's names in the rendered namespace.
Images: the base's tags are the project version (top-level CMakeLists.txt).
"""
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import manifests as m  # noqa: E402


def flags(container):
    """--name=value arguments of a container as a dict (every flag here is written with '=')."""
    out = {}
    for a in container.get("args", []):
        name, _, value = a.partition("=")
        out[name] = value
    return out


def port_of(address):
    return int(address.rsplit(":", 1)[1])


def mount_for(container, volumes, path):
    """(volume, mount) whose mountPath contains `path`, or (None, None)."""
    best = (None, None)
    for vm in container.get("volumeMounts", []):
        mp = vm["mountPath"].rstrip("/")
        if path == mp or path.startswith(mp + "/"):
            if best[1] is None or len(mp) > len(best[1]["mountPath"]):
                best = (volumes.get(vm["name"]), vm)
    return best


def field_ref(env, name):
    """The downward-API fieldPath that env var `name` comes from, or None."""
    return env.get(name, {}).get("valueFrom", {}).get("fieldRef", {}).get("fieldPath")


def selects(selector, labels):
    return all(labels.get(k) == v for k, v in selector.items())


def workload(objs, kind, name, container):
    """(object, pod spec, container, its flags, its env by name, the pod's volumes by name)."""
    obj = m.one(objs, kind, name)
    pod = obj["spec"]["template"]["spec"]
    ctr = next(x for x in pod["containers"] if x["name"] == container)
    return (obj, pod, ctr, flags(ctr), {e["name"]: e for e in ctr.get("env", [])},
            {v["name"]: v for v in pod.get("volumes", [])})


def check_agent(c, label, objs, svc):
    ds, pod, ctr, f, env, volumes = workload(objs, "DaemonSet", "fabricwatch-agent", "agent")
    what = label + ": agent: "

    c.expect(pod.get("hostNetwork") is True, what + "hostNetwork is not true")
    c.expect(pod.get("dnsPolicy") == "ClusterFirstWithHostNet",
             what + "dnsPolicy is not ClusterFirstWithHostNet (the Service name would not resolve)")
    vol, vm = mount_for(ctr, volumes, f.get("--sysfs-root", "/sys"))
    c.expect(vol is not None and vol.get("hostPath", {}).get("path") == "/sys"
             and vm.get("readOnly") is True, what + "--sysfs-root is not a read-only hostPath /sys")
    vol, vm = mount_for(ctr, volumes, "/dev/infiniband")
    c.expect(vol is not None and vol.get("hostPath", {}).get("path") == "/dev/infiniband",
             what + "/dev/infiniband is not mounted from the host")

    c.expect(f.get("--node-name") == "$(NODE_NAME)"
             and field_ref(env, "NODE_NAME") == "spec.nodeName",
             what + "--node-name is not the downward API's spec.nodeName")
    init = pod.get("initContainers", [])
    if "--probe-address" in f:
        c.expect(f["--probe-address"] == "$(PROBE_ADDRESS)"
                 and field_ref(env, "PROBE_ADDRESS") == "status.hostIP",
                 what + "--probe-address is not the downward API's status.hostIP")
    else:
        # fabric-interface: the init container writes the config file that --config names.
        cfg = f.get("--config", "")
        writer = [i for i in init if cfg and cfg in " ".join(i.get("command", []))]
        c.expect(bool(writer), what + "no --probe-address, and no init container writes --config")
        if writer:
            iv, _ = mount_for(writer[0], volumes, cfg)
            av, _ = mount_for(ctr, volumes, cfg)
            c.expect(iv is not None and iv is av,
                     what + "the init container and the agent do not share the --config volume")
            c.expect("FABRIC_INTERFACE" in {e["name"] for e in writer[0].get("env", [])},
                     what + "the probe-address init container has no FABRIC_INTERFACE")

    # components/probe-key: the key file is a listed key of a Secret that must exist.
    key_file = f.get("--probe-key-file")
    if key_file is not None:
        vol, vm = mount_for(ctr, volumes, key_file)
        secret = (vol or {}).get("secret", {})
        rel = os.path.relpath(key_file, vm["mountPath"]) if vm else None
        c.expect(bool(secret) and not secret.get("optional")
                 and rel in [i["path"] for i in secret.get("items", [])],
                 what + "--probe-key-file=%s is not a listed key of a required Secret" % key_file)
        c.expect(pod.get("securityContext", {}).get("fsGroup") ==
                 pod.get("securityContext", {}).get("runAsGroup") and
                 secret.get("defaultMode", 0o644) & 0o040,
                 what + "the probe key is not readable by the agent's group (fsGroup, mode)")

    keys = {(t.get("key"), t.get("effect")) for t in pod.get("tolerations", [])}
    c.expect(("nvidia.com/gpu", "NoSchedule") in keys, what + "no toleration for nvidia.com/gpu")
    res = ctr.get("resources", {})
    for kind in ("cpu", "memory"):
        c.expect(kind in res.get("requests", {}) and kind in res.get("limits", {}),
                 what + "no %s request and limit" % kind)

    ports = {(p["containerPort"], p.get("protocol", "TCP")): p for p in ctr.get("ports", [])}
    http_port = port_of(f.get("--http-listen", "0.0.0.0:9752"))
    probe_port = int(f.get("--probe-port", "9753"))
    for key in ((http_port, "TCP"), (probe_port, "UDP"), (probe_port, "TCP")):
        c.expect(key in ports and ports[key].get("hostPort") == key[0],
                 what + "no container/host port %d/%s" % key)
    for probe in ("livenessProbe", "readinessProbe"):
        g = ctr.get(probe, {}).get("httpGet", {})
        c.expect(g.get("path") == "/healthz" and g.get("port") == http_port,
                 what + "%s is not /healthz on --http-listen's port" % probe)

    # --aggregator=SERVICE.$(POD_NAMESPACE).svc:PORT names the aggregator Service's gRPC port.
    agg = f.get("--aggregator", "")
    mt = re.fullmatch(r"([a-z0-9-]+)\.\$\(POD_NAMESPACE\)\.svc:(\d+)", agg)
    grpc = next((p for p in svc["spec"]["ports"] if p["name"] == "grpc"), None)
    c.expect(mt is not None and mt.group(1) == svc["metadata"]["name"] and grpc is not None
             and int(mt.group(2)) == grpc["port"],
             what + "--aggregator=%s is not the Service %s's gRPC port" % (agg, svc["metadata"]["name"]))
    c.expect(field_ref(env, "POD_NAMESPACE") == "metadata.namespace",
             what + "POD_NAMESPACE is not the pod's")
    return ds, ctr


def check_aggregator(c, label, objs, svc):
    sts, pod, ctr, f, _, volumes = workload(objs, "StatefulSet", "fabricwatch-aggregator",
                                            "aggregator")
    what = label + ": aggregator: "

    c.expect(sts["spec"].get("replicas") == 1, what + "replicas is not 1 (one writer of state)")
    claims = {t["metadata"]["name"] for t in sts["spec"].get("volumeClaimTemplates", [])}
    state = f.get("--state-dir", "")
    _, vm = mount_for(ctr, volumes, state)
    c.expect(bool(state) and vm is not None and vm["name"] in claims,
             what + "--state-dir=%s is not on a volume claim" % state)

    # Without --fabric-map the aggregator localizes to pairs and hosts; with it, the map must be
    # a key of a ConfigMap mounted where the flag points (components/fabric-map).
    fmap = f.get("--fabric-map")
    if fmap is not None:
        vol, vm = mount_for(ctr, volumes, fmap)
        cm_name = (vol or {}).get("configMap", {}).get("name")
        cms = m.find(objs, "ConfigMap", cm_name) if cm_name else []
        key = os.path.relpath(fmap, vm["mountPath"]) if vm else None
        if c.expect(len(cms) == 1 and key in cms[0].get("data", {}),
                    what + "--fabric-map=%s is not a key of a rendered ConfigMap" % fmap):
            fm = m.yaml.safe_load(cms[0]["data"][key])
            c.expect(isinstance(fm, dict) and all(fm.get(k) for k in ("switches", "links",
                                                                       "hosts")),
                     what + "the fabric map has no switches, links or hosts")

    http_port = port_of(f.get("--http-listen", "0.0.0.0:9751"))
    grpc_port = port_of(f.get("--grpc-listen", "0.0.0.0:9750"))
    named = {p["name"]: p["containerPort"] for p in ctr.get("ports", [])}
    c.expect(named.get("http") == http_port and named.get("grpc") == grpc_port,
             what + "container ports http/grpc are not --http-listen/--grpc-listen's")
    for probe, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz"),
                        ("startupProbe", "/healthz")):
        g = ctr.get(probe, {}).get("httpGet", {})
        port = named.get(g.get("port"), g.get("port"))
        c.expect(g.get("path") == path and port == http_port,
                 what + "%s is not %s on the HTTP port" % (probe, path))

    labels = sts["spec"]["template"]["metadata"]["labels"]
    c.expect(selects(svc["spec"]["selector"], labels), what + "the Service does not select the pods")
    c.expect(not selects(svc["spec"]["selector"],
                         m.one(objs, "DaemonSet")["spec"]["template"]["metadata"]["labels"]),
             what + "the Service also selects agent pods")
    for p in svc["spec"]["ports"]:
        c.expect(named.get(p["targetPort"], p["targetPort"]) == p["port"],
                 what + "Service port %s does not reach the container port" % p["name"])
    return sts, ctr


def check_monitoring(c, label, objs, svc, ds, agent_ctr):
    what = label + ": monitoring: "
    sm = m.one(objs, "ServiceMonitor")
    c.expect(selects(sm["spec"]["selector"]["matchLabels"], svc["metadata"]["labels"]),
             what + "the ServiceMonitor does not select the aggregator Service")
    svc_ports = {p["name"] for p in svc["spec"]["ports"]}
    c.expect(all(e["port"] in svc_ports for e in sm["spec"]["endpoints"]),
             what + "a ServiceMonitor endpoint names no Service port")
    pm = m.one(objs, "PodMonitor")
    c.expect(selects(pm["spec"]["selector"]["matchLabels"],
                     ds["spec"]["template"]["metadata"]["labels"]),
             what + "the PodMonitor does not select the agent pods")
    ctr_ports = {p.get("name") for p in agent_ctr.get("ports", [])}
    c.expect(all(e["port"] in ctr_ports for e in pm["spec"]["podMetricsEndpoints"]),
             what + "a PodMonitor endpoint names no agent container port")

    jobs = set()
    for e in sm["spec"]["endpoints"] + pm["spec"]["podMetricsEndpoints"]:
        for r in e.get("relabelings", []):
            if r.get("targetLabel") == "job":
                jobs.add(r.get("replacement"))
    with open(m.RULES_FILE, encoding="utf-8") as fh:
        rules = m.yaml.safe_load(fh)
    wanted = set()
    for g in rules["groups"]:
        for r in g.get("rules", []):
            wanted |= set(re.findall(r'job\s*=~?\s*"([^"]+)"', str(r.get("expr", ""))))
    c.expect(wanted <= jobs, what + "the rules match job(s) %s, the monitors set %s"
             % (sorted(wanted - jobs), sorted(jobs)))


def check_certificates(c, label, objs, svc, ds, sts):
    what = label + ": certificates: "
    certs = {x["spec"]["secretName"]: x for x in m.find(objs, "Certificate")}
    ns = svc["metadata"]["namespace"]
    mounted = []
    for w in (ds, sts):
        for v in w["spec"]["template"]["spec"].get("volumes", []):
            if "secret" in v and v["name"] == "tls":
                mounted.append(v["secret"]["secretName"])
    for s in mounted:
        c.expect(s in certs, what + "Secret %s is mounted but no Certificate writes it" % s)
    agg = certs.get("fabricwatch-aggregator-tls", {}).get("spec", {})
    want = "%s.%s.svc" % (svc["metadata"]["name"], ns)
    c.expect(want in agg.get("dnsNames", []),
             what + "the aggregator's certificate does not name %s: %s" % (want, agg.get("dnsNames")))
    for cert in certs.values():
        ref = cert["spec"]["issuerRef"]["name"]
        c.expect(bool(m.find(objs, "Issuer", ref)),
                 what + "Certificate %s names a missing Issuer %s" % (cert["metadata"]["name"], ref))


def check_image_tags(c, objs):
    """The base's images carry the project version, so a release that bumps it bumps them."""
    with open(os.path.join(m.ROOT, "CMakeLists.txt"), encoding="utf-8") as fh:
        version = re.search(r"project\(fabricwatch VERSION ([0-9.]+)", fh.read()).group(1)
    for w in m.find(objs, "DaemonSet") + m.find(objs, "StatefulSet"):
        for ctr in w["spec"]["template"]["spec"]["containers"]:
            c.expect(ctr["image"].endswith(":" + version),
                     "base: %s image %s is not tagged with the project version %s"
                     % (w["metadata"]["name"], ctr["image"], version))


def main():
    m.require_tools()
    c = m.Checks()
    for label, path in m.KUSTOMIZATIONS.items():
        objs = m.render(path)
        svc = m.one(objs, "Service", "fabricwatch-aggregator")
        ds, agent_ctr = check_agent(c, label, objs, svc)
        sts, _ = check_aggregator(c, label, objs, svc)
        if m.find(objs, "ServiceMonitor"):
            check_monitoring(c, label, objs, svc, ds, agent_ctr)
        if m.find(objs, "Certificate"):
            check_certificates(c, label, objs, svc, ds, sts)
        if label == "base":
            check_image_tags(c, objs)
        print("%s: %d objects checked" % (label, len(objs)))
    c.finish()


if __name__ == "__main__":
    main()
