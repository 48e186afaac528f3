#!/usr/bin/env python3
"""What hack/kubespray/run.sh measures, from files it collected.

  measure.py watch WATCH.json
      WATCH.json: `kubectl get pods -w --output-watch-events -o json` of the
      kube-proxy pods during a step (those kube-proxy's DaemonSet controls
      count). Prints, one `key=value` a line:
      nodes, pods (distinct UIDs seen), new (pods created during the step),
      max_per_node (pods seen on one node; 2 = replaced once),
      max_unavailable (most nodes at once without a Ready kube-proxy pod
      that is not being deleted, after any event of the stream), and
      revisions (pod template revisions, the controller-revision-hash
      label, of the pods created during the step that no pod before it had:
      the rollouts the pods saw), and gaps (times the watch was started
      again, after a {"type": "RELIST"} line: an API server restart ended
      it; what happened while it was down is not seen, and the pods its new
      list lacks were deleted meanwhile).

  measure.py configz KUBEADM_CONFIG CONFIG_CONF FIELD=VALUE... -- NODE=CONFIGZ...
      Compares what kube-proxy runs on each node (CONFIGZ: its /configz) with
      the KubeProxyConfiguration kubespray rendered from its variables
      (KUBEADM_CONFIG: the kubeadm config on the first control plane) and with
      the ConfigMap (CONFIG_CONF: its config.conf), for the fields mode,
      clusterCIDR and iptables.minSyncPeriod. FIELD=VALUE: the value the
      inventory set, which kubespray's rendering must carry. Prints one line a
      node and field; exit 1 when the ConfigMap or kubespray's rendering
      differs from what kube-proxy runs (stale=ok: only the ConfigMap must match;
      the drift from kubespray's variables is reported, not failed; stale=any:
      a drift from the ConfigMap too, a pod started before the ConfigMap's
      last write, is reported, not failed).
"""
import json
import sys

import yaml

# The fields compared: the versioned name (kubespray's KubeProxyConfiguration,
# the ConfigMap), and where kube-proxy's /configz has it. kube-proxy 1.34
# serves its internal config there (Go field names; the cluster CIDRs as a
# list, one minSyncPeriod for every mode); an older one, the versioned.
FIELDS = (
    ("mode", "Mode"),
    ("clusterCIDR", "DetectLocal.ClusterCIDRs"),
    ("iptables.minSyncPeriod", "MinSyncPeriod"),
)
# kube-proxy's defaulting of the versioned config
# (pkg/proxy/apis/config/v1alpha1/defaults.go): a zero minSyncPeriod runs as
# 1s.
ZERO_DEFAULTS = {"iptables.minSyncPeriod": "1s"}
UNITS = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}


def json_stream(text):
    decoder, i, out = json.JSONDecoder(), 0, []
    while True:
        while i < len(text) and text[i].isspace():
            i += 1
        if i >= len(text):
            return out
        obj, i = decoder.raw_decode(text, i)
        out.append(obj)


def pod_node(pod):
    # A DaemonSet pod names its node in spec.nodeName once bound, and in its
    # node affinity before (as the DaemonSet controller attributes it).
    if pod["spec"].get("nodeName"):
        return pod["spec"]["nodeName"]
    terms = (pod["spec"].get("affinity", {}).get("nodeAffinity", {})
             .get("requiredDuringSchedulingIgnoredDuringExecution", {}).get("nodeSelectorTerms", []))
    for term in terms:
        for field in term.get("matchFields", []):
            if field.get("key") == "metadata.name" and field.get("values"):
                return field["values"][0]
    return "?"


def of_daemonset(pod, name="kube-proxy"):
    # The watch selects by label; a pod only counts when kube-proxy's
    # DaemonSet controls it (a pod someone made with the label does not).
    return any(ref.get("controller") and ref.get("kind") == "DaemonSet" and ref.get("name") == name
               for ref in pod["metadata"].get("ownerReferences", []))


def ready(pod):
    if pod["metadata"].get("deletionTimestamp"):
        return False
    return any(c["type"] == "Ready" and c["status"] == "True" for c in pod.get("status", {}).get("conditions", []))


def watch_figures(events):
    """The figures of `measure.py watch` from the events of one stream."""
    live, seen, initial, nodes, worst = {}, {}, set(), set(), 0
    revision, gaps = {}, 0
    listing, relist = True, None

    def unavailable():
        up = {n for n, r in live.values() if r}
        return len(nodes - up)

    def end_relist():
        # The new list is complete: what it lacks went while the watch was down.
        for gone in set(live) - relist:
            live.pop(gone)

    for ev in events:
        if ev.get("type") == "RELIST":
            if relist is not None:
                end_relist()
            gaps, relist, listing = gaps + 1, set(), False
            continue
        pod = ev["object"]
        if not of_daemonset(pod):
            continue
        uid, node = pod["metadata"]["uid"], pod_node(pod)
        # The watch starts with the existing pods as ADDED events.
        if listing and ev["type"] == "ADDED" and uid not in seen:
            initial.add(uid)
        else:
            listing = False
        seen[uid] = node
        revision[uid] = pod["metadata"].get("labels", {}).get("controller-revision-hash", "?")
        nodes.add(node)
        if relist is not None:
            if ev["type"] == "ADDED":
                relist.add(uid)
                live[uid] = (node, ready(pod))
                continue
            end_relist()
            relist = None
        if ev["type"] == "DELETED":
            live.pop(uid, None)
        else:
            live[uid] = (node, ready(pod))
        worst = max(worst, unavailable())
    # A stream that ends inside a relist: its list is all there is.
    if relist is not None:
        end_relist()
        worst = max(worst, unavailable())
    per_node = {}
    for node in seen.values():
        per_node[node] = per_node.get(node, 0) + 1
    before = {revision[u] for u in initial}
    return {
        "nodes": len(nodes),
        "pods": len(seen),
        "new": len(set(seen) - initial),
        "max_per_node": max(per_node.values(), default=0),
        "max_unavailable": worst,
        "revisions": len({revision[u] for u in set(seen) - initial} - before),
        "gaps": gaps,
    }


def watch(path):
    with open(path, encoding="utf-8") as f:
        figures = watch_figures(json_stream(f.read()))
    for key, value in figures.items():
        print(f"{key}={value}")


def get(doc, dotted):
    for key in dotted.split("."):
        if not isinstance(doc, dict) or key not in doc:
            return None
        doc = doc[key]
    if isinstance(doc, list):
        return ",".join(str(d) for d in doc)
    return None if doc is None else str(doc)


def seconds(value):
    """A Go duration ("1m30s", "0s") in seconds; None if it is not one."""
    rest, total = value, 0.0
    if not rest:
        return None
    while rest:
        num = ""
        while rest and (rest[0].isdigit() or rest[0] == "."):
            num, rest = num + rest[0], rest[1:]
        unit = next((u for u in sorted(UNITS, key=len, reverse=True) if rest.startswith(u)), None)
        if not num or unit is None:
            return None if rest or not num or num.strip("0.") else 0.0
        total, rest = total + float(num) * UNITS[unit], rest[len(unit):]
    return total


def same(a, b):
    if a is None or b is None:
        return a == b
    sa, sb = seconds(a), seconds(b)
    return sa == sb if sa is not None and sb is not None else a == b


def versioned(doc, field):
    """FIELD of a versioned config as kube-proxy runs it (its defaulting),
    and as written."""
    value = get(doc, field)
    if field in ZERO_DEFAULTS and value is not None and seconds(value) == 0:
        return ZERO_DEFAULTS[field], f"{value} (runs as {ZERO_DEFAULTS[field]}: kube-proxy's default for 0)"
    return value, value


def configz(args):
    sep = args.index("--")
    kubeadm_config, config_conf, settings = args[0], args[1], args[2:sep]
    stale_any = "stale=any" in settings
    stale_ok = stale_any or "stale=ok" in settings
    want = dict(s.split("=", 1) for s in settings if s not in ("stale=ok", "stale=any"))
    with open(kubeadm_config, encoding="utf-8") as f:
        rendered = [d for d in yaml.safe_load_all(f) if d and d.get("kind") == "KubeProxyConfiguration"]
    if len(rendered) != 1:
        sys.exit(f"{kubeadm_config}: no KubeProxyConfiguration")
    with open(config_conf, encoding="utf-8") as f:
        configmap = yaml.safe_load(f)
    bad = 0
    for field, value in want.items():
        if not same(get(rendered[0], field), value):
            print(f"FAIL kubespray rendered {field}={get(rendered[0], field)}, the inventory says {value}")
            bad += 1
    for arg in args[sep + 1:]:
        node, path = arg.split("=", 1)
        with open(path, encoding="utf-8") as f:
            running = json.load(f)["kubeproxy.config.k8s.io"]
        for field, internal in FIELDS:
            run = get(running, field if "mode" in running else internal)
            (cm, cm_text), (ks, ks_text) = versioned(configmap, field), versioned(rendered[0], field)
            verdict = "ok"
            if not same(run, cm):
                verdict = "STALE (not the ConfigMap's)"
                if not stale_any:
                    verdict, bad = "FAIL (not the ConfigMap's)", bad + 1
            elif not same(run, ks):
                verdict = "STALE (not kubespray's variable)"
                if not stale_ok:
                    verdict, bad = "FAIL (not kubespray's variable)", bad + 1
            print(f"{node} {field}: runs {run}, ConfigMap {cm_text}, kubespray {ks_text}: {verdict}")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "watch":
        watch(sys.argv[2])
    elif len(sys.argv) > 4 and sys.argv[1] == "configz" and "--" in sys.argv:
        configz(sys.argv[2:])
    else:
        sys.exit(__doc__)
