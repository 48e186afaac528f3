#!/usr/bin/env python3
"""What hack/kubespray/run.sh measures, from files it collected.

  measure.py watch WATCH.json [UID...]
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
      list lacks were deleted meanwhile). From container restart counts:
      restarts (container restarts of kube-proxy's pods during the step, a
      restart in place that replaces no pod), and per_node (each node's
      pods created and container restarts during the step: `NODE N new M
      restarts; ...`), touched (the nodes where a pod was created or a
      container restarted during the step: those whose kube-proxy the step
      took down at least once) and touched_nodes (their names, comma
      separated). When the stream has every pod
      of kube-system (the upgrade step's), also: canary_first (yes when the
      first pod created during the step was Ready before a second one was
      created; no; none: no pod created), canary_node (its node), and skew
      (kube-proxy pods created while some kube-apiserver, by the last image
      seen of each control plane's pod, ran an older version than their
      image: kube-proxy must never be newer than the oldest API server; must
      be 0), with skew_detail naming them. UIDs: pods whose container the
      tier stopped on purpose mid-rollout, as a reboot of their node would
      (run.sh's restart_mid): their restarts are not in restarts, per_node
      or touched, and their not being Ready (but while deleted) not in
      max_unavailable, nor their node's time without a Ready pod when the
      DaemonSet controller deleted them while not Ready (it replaces an
      unavailable old pod at once, outside maxUnavailable, as after a
      reboot) until a pod there is Ready again; excused_restarts and
      max_unavailable_all (every pod as it is) count them.

  measure.py new-pod WATCH.json BEFORE STOP
      Follows WATCH.json as it is written (what was added, twice a second;
      a last object cut short waits for its end) and exits 0 once it holds
      a pod of kube-proxy's DaemonSet whose UID is none of BEFORE's ("NODE
      UID" lines, a file): a rollout began. Exits 3 once the file STOP
      exists without one (any other exit: it failed).

  measure.py running CONFIGZ.json
      What one kube-proxy runs, from its /configz: `FIELD=VALUE` of each
      field configz compares (below), on one line.

  measure.py same-config BEFORE.json AFTER.json [IMAGE]
      Whether two /configz of one kube-proxy container, before and after
      its restart, hold the same config, every field: prints `same` and
      exits 0, or `differs: FIELD, ...` (dotted paths, at most 5 named)
      and exits 1. kube-proxy up to 1.35 serves its internal config there
      (`Mode`, `MinSyncPeriod`), from 1.36 the versioned one (`mode`,
      `iptables.minSyncPeriod`; kubernetes#136044), and a container keeps
      its image across a restart: a read in another form than the
      container's IMAGE (its tag a version) serves, or a pair in two
      forms, was answered by another version, so prints `not compared:
      ...` and exits 3.
  measure.py writers SINCE OBJECT.json...
      Who wrote each object since SINCE (an RFC 3339 time, the step's start by
      the API server's clock), from its managedFields: one line per entry,
      `NAME MANAGER OPERATION TIME`. The upgrade step fails in tool mode on
      a kubeadm write of kube-proxy's DaemonSet or ConfigMap.

  measure.py audit SINCE AUDIT.log
      kube-proxy-sync's runs since SINCE, from its audit log (JSON lines, on
      the last control plane, where kubespray's 0004 runs it): one line per
      outcome record, `outcome=... restart=... reason=...
      image=BEFORE->AFTER strategy=... canary=NODES`.

  measure.py configz KUBEADM_CONFIG CONFIG_CONF FIELD=VALUE... -- NODE=CONFIGZ...
      Compares what kube-proxy runs on each node (CONFIGZ: its /configz) with
      the KubeProxyConfiguration kubespray rendered from its variables
      (KUBEADM_CONFIG: the kubeadm config on the first control plane) and with
      the ConfigMap the DaemonSet mounts (CONFIG_CONF: its config.conf), for
      the fields mode, clusterCIDR, iptables.minSyncPeriod and
      conntrack.maxPerCore. FIELD=VALUE: the value the inventory set, which kubespray's rendering must carry. Prints one line a
      node and field; exit 1 when the ConfigMap or kubespray's rendering
      differs from what kube-proxy runs (stale=ok: only the ConfigMap must match;
      the drift from kubespray's variables is reported, not failed; stale=any:
      a drift from the ConfigMap too, a pod started before the ConfigMap's
      last write, is reported, not failed).
  measure.py task LOG NAME
      The results of the Ansible task named NAME (its TASK line ends in
      `NAME]`, a role prefix before it allowed) in LOG, an ansible-playbook
      log with the default callback: one line per host result, `STATUS HOST`
      (ok, changed, fatal, failed, skipping), and for a result Ansible
      printed (a failure), `rolled_back=BOOL msg=TEXT` from the task's
      stdout when it is one JSON object (kube-proxy-sync's result), else
      `msg=TEXT` from the result itself. Every time the task ran, in order;
      nothing when it never ran on a host Ansible showed.
  measure.py shown LOG NAME
      What the Ansible task NAME (a debug task, as 0004's `Kube-proxy-sync
      | Show the result`) showed in LOG, the first host's: each item of its
      msg on a line of its own, and for an item that is kube-proxy-sync's
      diff (before and after), the lines that differ, `-LINE` and `+LINE`,
      in the order of the text. Exit 1 when the task showed nothing.
  measure.py addon MANIFESTS LIVE.json
      Whether kubeadm's kube-proxy addon as the cluster's kubeadm renders it
      (MANIFESTS: `kubeadm init phase addon kube-proxy --print-manifest`,
      the upgraded version's kubeadm with the cluster's config) is in place
      (LIVE.json: a `kubectl get -o json` list of the live objects): every
      field kubeadm sets in the DaemonSet's pod template and in its
      ServiceAccount, Role, RoleBinding and ClusterRoleBinding has kubeadm's
      value live (lists of named items matched by name; what others add is
      left alone), but the name of the ConfigMap the template mounts, which
      kube-proxy-sync points at its copy. One line an object, `KIND/NAME
      ok`, `KIND/NAME missing` or `KIND/NAME differs: PATH kubeadm=X
      live=Y`; exit 1 unless every one is ok. kubeadm's ConfigMap is left
      out: /configz (configz above) is what counts of the config.
  measure.py traffic HOST=LOG...
      LOG: the traffic prober's lines on HOST during a step (run.sh's
      traffic_start), one per try: `EPOCH_MS TARGET CODE`. TCP: TARGET
      cluster or nodeport, CODE the HTTP status, any status an answer, 000
      none (no connection in 1 s, no answer in 2 s). UDP (UDP_TARGETS):
      udp, CODE 200 when the datagram came back within 1 s, and dns (with
      KS_DNS=coredns), CODE 200 when a DNS query to kube-dns's ClusterIP
      was answered within 1 s with the prober's Service's ClusterIP, 502
      when answered without it; only 200 answers, 000 is none. Prints one
      line per host and target, `HOST TARGET tries=N failed=N
      longest_gap=S`: the longest time in seconds without a successful try
      (between two, or before the first and after the last success,
      counted from the first and to the last try).
"""
import codecs
import difflib
import json
import os
import re
import sys
import time
from datetime import datetime

import yaml

# the prober's UDP targets, one list for the figures and the evidence page
from evidence import UDP_TARGETS

# The fields compared: the versioned name (kubespray's KubeProxyConfiguration,
# the ConfigMap), and where kube-proxy's /configz has it. kube-proxy 1.31 to
# 1.35 serve their internal config there (Go field names; the cluster CIDRs
# as a list, one minSyncPeriod for every mode, conntrack under Linux), 1.36
# and later the versioned one (kubernetes#136044). Older internal layouts
# are not read.
FIELDS = (
    ("mode", "Mode"),
    ("clusterCIDR", "DetectLocal.ClusterCIDRs"),
    ("iptables.minSyncPeriod", "MinSyncPeriod"),
    ("conntrack.maxPerCore", "Linux.Conntrack.MaxPerCore"),
)
# kube-proxy's defaulting of the versioned config
# (pkg/proxy/apis/config/v1alpha1/defaults.go): a zero minSyncPeriod runs as
# 1s.
ZERO_DEFAULTS = {"iptables.minSyncPeriod": "1s"}
UNITS = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}


def json_stream(text):
    """The objects of a stream of JSON documents."""
    out, rest = json_prefix(text)
    if rest.strip():
        json.JSONDecoder().raw_decode(rest)  # raises: the stream is cut short
    return out


def json_prefix(text):
    """The whole objects at the start of a stream still being written, and
    the text after them (a last object cut short, or nothing)."""
    decoder, i, out = json.JSONDecoder(), 0, []
    while True:
        while i < len(text) and text[i].isspace():
            i += 1
        if i >= len(text):
            return out, ""
        try:
            obj, i = decoder.raw_decode(text, i)
        except json.JSONDecodeError:
            return out, text[i:]
        out.append(obj)


def follow_new_pod(path, before, stop, interval=0.5):
    """Reads path as it grows until its events hold a pod new_pod counts
    (True) or the file stop exists (False). What a writer left cut short, an
    object or a character, waits for the next read; stop is looked at before
    each read, so an event written before it is never missed."""
    rest, decode = "", codecs.getincrementaldecoder("utf-8")().decode
    with open(path, "rb") as f:
        while True:
            stopped = os.path.exists(stop)
            events, rest = json_prefix(rest + decode(f.read()))
            if new_pod(events, before):
                return True
            if stopped:
                return False
            time.sleep(interval)


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


def version(image):
    """The version tuple of an image's tag (registry:5000/kube-proxy:v1.34.4
    gives (1, 34, 4)); None when the tag is not a version."""
    tag = image.split("@", 1)[0].rsplit("/", 1)[-1].rpartition(":")[2]
    parts = tag.lstrip("v").split("-", 1)[0].split(".")
    if len(parts) != 3 or not all(p.isdigit() for p in parts):
        return None
    return tuple(int(p) for p in parts)


def container_image(pod, name):
    for c in pod["spec"].get("containers", []):
        if c.get("name") == name:
            return c.get("image", "")
    return ""


def restart_count(pod):
    return sum(c.get("restartCount", 0) for c in pod.get("status", {}).get("containerStatuses", []))


def is_apiserver(pod):
    return pod["metadata"].get("labels", {}).get("component") == "kube-apiserver"


def watch_figures(events, excused=()):
    """The figures of `measure.py watch` from the events of one stream.
    excused: UIDs of pods whose container the tier stopped on purpose, as a
    node's reboot would (run.sh's restart_mid): their restarts, and their
    not being Ready but while they are deleted, are left out of the figures
    and counted apart (excused_restarts, max_unavailable_all). Deleted
    while not Ready (the DaemonSet controller replaces an unavailable old
    pod at once, outside maxUnavailable), its node is left out until a pod
    there is Ready again."""
    live, seen, initial, nodes, worst, worst_all = {}, {}, set(), set(), 0, 0
    revision, gaps = {}, 0
    listing, relist = True, None
    # restart counts: the first and the highest seen per pod
    restarts_first, restarts_max = {}, {}
    # the last image seen of each node's kube-apiserver pod (kept when the
    # pod goes: a static pod's mirror is deleted and made again as the
    # kubelet restarts it); the pods created during the step, in order
    apiservers, created, ready_at, skew = {}, [], {}, []
    saw_apiserver = False

    # nodes whose excused pod the DaemonSet controller deleted while it was
    # not Ready (it replaces an unavailable old pod outside maxUnavailable, as
    # after a real reboot): excused until a pod there is Ready again
    excused_nodes = set()

    def unavailable(excuse=True):
        up = {n for n, r in live.values() if r[0 if excuse else 1]}
        return len(nodes - up - (excused_nodes if excuse else set()))

    def readiness(uid, pod):
        # (as counted, as it is): an excused pod counts as Ready unless deleted
        r = ready(pod)
        return (r or (uid in excused and not pod["metadata"].get("deletionTimestamp"))), r

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
        if is_apiserver(pod):
            saw_apiserver = True
            if ev["type"] != "DELETED":
                apiservers[pod_node(pod)] = container_image(pod, "kube-apiserver")
            continue
        if not of_daemonset(pod):
            continue
        uid, node = pod["metadata"]["uid"], pod_node(pod)
        # The watch starts with the existing pods as ADDED events.
        if listing and ev["type"] == "ADDED" and uid not in seen:
            initial.add(uid)
        else:
            listing = False
        if uid not in seen and uid not in initial:
            created.append(uid)
            image = version(container_image(pod, "kube-proxy"))
            older = sorted(f"{n} {img}" for n, img in apiservers.items()
                           if image and version(img) and version(img) < image)
            if older:
                skew.append(f"{node} {container_image(pod, 'kube-proxy')} while {', '.join(older)}")
        if uid not in ready_at and ready(pod):
            ready_at[uid] = len(created)
        restarts_first.setdefault(uid, restart_count(pod))
        restarts_max[uid] = max(restarts_max.get(uid, 0), restart_count(pod))
        if uid in excused and pod["metadata"].get("deletionTimestamp") and uid in live and not live[uid][1][1]:
            excused_nodes.add(node)
        elif uid not in excused and ready(pod):
            excused_nodes.discard(node)
        seen[uid] = node
        revision[uid] = pod["metadata"].get("labels", {}).get("controller-revision-hash", "?")
        nodes.add(node)
        if relist is not None:
            if ev["type"] == "ADDED":
                relist.add(uid)
                live[uid] = (node, readiness(uid, pod))
                continue
            end_relist()
            relist = None
        if ev["type"] == "DELETED":
            live.pop(uid, None)
        else:
            live[uid] = (node, readiness(uid, pod))
        worst, worst_all = max(worst, unavailable()), max(worst_all, unavailable(False))
    # A stream that ends inside a relist: its list is all there is.
    if relist is not None:
        end_relist()
        worst, worst_all = max(worst, unavailable()), max(worst_all, unavailable(False))
    per_node, made, restarted = {}, {}, {}
    for uid, node in seen.items():
        per_node[node] = per_node.get(node, 0) + 1
        made[node] = made.get(node, 0) + (uid not in initial)
        restarted[node] = restarted.get(node, 0) + (0 if uid in excused else restarts_max[uid] - restarts_first[uid])
    before = {revision[u] for u in initial}
    touched = [n for n in sorted(nodes) if made[n] or restarted[n]]
    figures = {
        "nodes": len(nodes),
        "pods": len(seen),
        "new": len(set(seen) - initial),
        "max_per_node": max(per_node.values(), default=0),
        "max_unavailable": worst,
        "revisions": len({revision[u] for u in set(seen) - initial} - before),
        "gaps": gaps,
        "restarts": sum(restarts_max[u] - restarts_first[u] for u in restarts_max if u not in excused),
        "per_node": "; ".join(f"{n} {made[n]} new {restarted[n]} restarts" for n in sorted(nodes)),
        "touched": len(touched),
        "touched_nodes": ",".join(touched),
    }
    if excused:
        figures["excused_restarts"] = sum(restarts_max[u] - restarts_first[u] for u in restarts_max if u in excused)
        figures["max_unavailable_all"] = worst_all
    if saw_apiserver:
        # the first pod created was Ready while it was the only one created
        first = created[0] if created else None
        figures["canary_first"] = "none" if first is None else ("yes" if ready_at.get(first) == 1 else "no")
        figures["canary_node"] = seen[first] if first else ""
        figures["skew"] = len(skew)
        figures["skew_detail"] = "; ".join(skew)
    return figures


def watch(path, excused=()):
    with open(path, encoding="utf-8") as f:
        figures = watch_figures(json_stream(f.read()), set(excused))
    for key, value in figures.items():
        print(f"{key}={value}")


def new_pod(events, before):
    """Whether events hold a pod of kube-proxy's DaemonSet whose UID is not
    among before's."""
    return any(ev.get("object") and of_daemonset(ev["object"]) and ev["object"]["metadata"]["uid"] not in before
               for ev in events)


def writers(since, paths):
    """NAME MANAGER OPERATION TIME of every managedFields entry of the
    objects at PATHS written at SINCE or later (RFC 3339 times in UTC
    compare as strings)."""
    out = []
    for path in paths:
        with open(path, encoding="utf-8") as f:
            obj = json.load(f)
        name = f"{obj.get('kind', '?')}/{obj['metadata'].get('name', '?')}"
        if not obj["metadata"].get("managedFields"):
            # kubectl get leaves them out without --show-managed-fields: no
            # entry would pass for "nobody wrote it"
            sys.exit(f"{path}: {name} has no managedFields (kubectl get --show-managed-fields)")
        for entry in obj["metadata"].get("managedFields", []):
            if entry.get("time", "") >= since:
                out.append(f"{name} {entry.get('manager', '?')} {entry.get('operation', '?')} {entry.get('time')}")
    return out


def audit(since, path):
    """One line per outcome record of kube-proxy-sync's audit log at SINCE or
    later (its times are RFC 3339 with a zone offset: compared in UTC)."""
    cutoff = datetime.fromisoformat(since.replace("Z", "+00:00"))
    out = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            if not line.strip():
                continue
            rec = json.loads(line)
            if rec.get("phase") != "outcome" or datetime.fromisoformat(rec["time"].replace("Z", "+00:00")) < cutoff:
                continue
            roll = rec.get("rollout") or {}
            out.append(" ".join([
                f"outcome={rec.get('outcome', '')}",
                f"restart={'yes' if rec.get('restart') else 'no'}",
                f"reason={rec.get('restart_reason', '')}",
                f"image={rec.get('image_before', '')}->{rec.get('image_after', '')}",
                f"strategy={roll.get('strategy', '')}",
                f"canary={','.join(roll.get('canary_nodes') or [])}",
            ]))
    return out


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


def form(config):
    """The form of a /configz config: kube-proxy up to 1.35 serves its
    internal config (Go field names, "Mode"), from 1.36 the versioned one
    ("mode", with apiVersion and kind; kubernetes#136044)."""
    return "internal" if "Mode" in config else "versioned"


def served_form(image):
    """The form of /configz a kube-proxy IMAGE serves (form); None when its
    tag is not a version."""
    v = version(image)
    return None if v is None else ("internal" if v[:2] < (1, 36) else "versioned")


def running_value(running, field, internal):
    """FIELD of a kube-proxy's /configz config: by its versioned name in the
    versioned form, by INTERNAL in the internal one."""
    return get(running, internal if form(running) == "internal" else field)


def running_fields(configz_doc):
    """FIELD=VALUE of what a kube-proxy runs, from its /configz."""
    running = configz_doc["kubeproxy.config.k8s.io"]
    return " ".join(f"{field}={running_value(running, field, internal)}" for field, internal in FIELDS)


def config_differences(before, after, path=""):
    """The dotted paths where two values of a /configz's config differ,
    sorted; [] when they are the same."""
    if isinstance(before, dict) and isinstance(after, dict):
        out = []
        for key in sorted(set(before) | set(after)):
            sub = f"{path}.{key}" if path else key
            if key not in before or key not in after:
                out.append(sub)
            else:
                out += config_differences(before[key], after[key], sub)
        return out
    return [] if before == after else [path or "(the whole config)"]


def same_config(before, after, image=None):
    """(same, text) of two /configz configs read from one kube-proxy
    container before and after its restart: every field. A container keeps
    its image across a restart, so a read in another form than the IMAGE it
    runs serves, or a pair in two forms, was answered by another kube-proxy
    version: same is None, not compared."""
    forms = form(before), form(after)
    rule = "kube-proxy serves its internal config up to 1.35, the versioned from 1.36"
    want = served_form(image) if image else None
    for when, got in (("before the stop", forms[0]), ("after the restart", forms[1])):
        if want is not None and got != want:
            tag = image.rsplit("/", 1)[-1]
            return None, (f"not compared: another kube-proxy version answered (/configz in the {got} form {when}, "
                          f"which {tag} does not serve; {rule})")
    if forms[0] != forms[1]:
        return None, (f"not compared: another kube-proxy version answered (/configz in the {forms[0]} form before "
                      f"the stop, the {forms[1]} after; {rule})")
    differ = config_differences(before, after)
    if not differ:
        return True, "same"
    return False, "differs: " + ", ".join(differ[:5]) + (", ..." if len(differ) > 5 else "")


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
            run = running_value(running, field, internal)
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


# A task's banner, "TASK [ROLE : NAME] ****", and a host's result under the
# default callback: "ok: [HOST]", "changed: [HOST -> DELEGATE]", "fatal:
# [HOST]: FAILED! => {JSON}" (one line).
BANNER = re.compile(r"^(TASK|RUNNING HANDLER) \[(.*)\]|^PLAY ")
RESULT = re.compile(r"^(ok|changed|fatal|failed|skipping): \[([^\]\s]+)[^\]]*\](?:.*? => (\{.*\}))?\s*$")


def is_task(banner, name):
    """Whether the BANNER match opens the task NAME (with or without its
    role's prefix)."""
    title = banner.group(2) or ""
    return banner.group(1) == "TASK" and (title == name or title.endswith(" : " + name))


def task_results(lines, name):
    """STATUS HOST [rolled_back=BOOL] [msg=TEXT] of each result of the task
    NAME, in the order of the log."""
    out, inside = [], False
    for line in lines:
        banner = BANNER.match(line)
        if banner:
            inside = is_task(banner, name)
            continue
        result = RESULT.match(line) if inside else None
        if not result:
            continue
        status, host, body = result.groups()
        fields = [status, host]
        if body:
            fields += failure_fields(body)
        out.append(" ".join(fields))
    return out


SHOWN = re.compile(r"^ok: \[[^\]\s]+[^\]]*\] => \{$")


def task_shown(lines, name):
    """The msg the task NAME showed (the default callback's JSON of a
    debug result, over several lines), the first host's; None when none."""
    inside, body = False, None
    for line in lines:
        if body is not None:
            body.append(line)
            if line == "}":
                try:
                    return json.loads("\n".join(body)).get("msg")
                except ValueError:
                    return None
            continue
        banner = BANNER.match(line)
        if banner:
            inside = is_task(banner, name)
            continue
        if inside and SHOWN.match(line):
            body = ["{"]
    return None


def shown_lines(msg):
    """The lines of a shown msg: text items as they are, a diff's changed
    lines as -LINE and +LINE."""
    out = []
    for item in msg if isinstance(msg, list) else [msg]:
        if isinstance(item, dict) and "before" in item and "after" in item:
            for line in difflib.ndiff(str(item["before"]).splitlines(), str(item["after"]).splitlines()):
                if line[:2] in ("- ", "+ "):
                    out.append(line[0] + line[2:])
        else:
            out.append(one_line(item))
    return out


def failure_fields(body):
    """rolled_back=BOOL msg=TEXT from a result whose stdout is kube-proxy-sync's
    JSON result, else msg=TEXT of the result."""
    try:
        result = json.loads(body)
    except ValueError:
        return ["msg=(the result is not JSON)"]
    tool = None
    stdout = result.get("stdout")
    if isinstance(stdout, str) and stdout.lstrip().startswith("{"):
        try:
            tool = json.loads(stdout)
        except ValueError:
            tool = None
    if isinstance(tool, dict):
        return [f"rolled_back={str(bool(tool.get('rolled_back'))).lower()}", "msg=" + one_line(tool.get("msg", ""))]
    return ["msg=" + one_line(result.get("msg", ""))]


def one_line(text):
    return " ".join(str(text).split())


def answered(target, code):
    """Whether a prober's try was answered: TCP by any HTTP status, UDP by
    200 alone (the echo came back; the DNS answer held the right address)."""
    if target in UDP_TARGETS:
        return code == "200"
    return code != "000"


def traffic_figures(lines):
    """{target: {tries, failed, longest_gap}} of one host's prober lines
    (see traffic); a line that is not three fields is skipped (a try cut
    off when the prober was stopped)."""
    seen = {}
    for line in lines:
        parts = line.split()
        if len(parts) != 3 or not parts[0].isdigit():
            continue
        ms, target, code = int(parts[0]), parts[1], parts[2]
        t = seen.setdefault(target, {"tries": 0, "failed": 0, "since": ms, "last": ms, "gap": 0})
        t["tries"] += 1
        t["last"] = ms
        if not answered(target, code):
            t["failed"] += 1
            continue
        t["gap"] = max(t["gap"], ms - t["since"])
        t["since"] = ms
    return {
        target: {"tries": t["tries"], "failed": t["failed"],
                 "longest_gap": max(t["gap"], t["last"] - t["since"]) / 1000}
        for target, t in seen.items()
    }


def traffic(args):
    out = []
    for arg in args:
        host, path = arg.split("=", 1)
        with open(path, encoding="utf-8") as f:
            figures = traffic_figures(f.read().splitlines())
        for target in sorted(figures):
            t = figures[target]
            out.append(f"{host} {target} tries={t['tries']} failed={t['failed']} longest_gap={t['longest_gap']:.2f}")
    return out


def subset_diff(want, have, path=""):
    """The first place where HAVE lacks or differs from what WANT sets:
    (path, want, have), or None. Lists of dicts with a name are matched by
    name; other lists must be equal. A zero value WANT sets (false, 0, "",
    an empty list or map) matches one HAVE leaves out: the API server omits
    them (kubeadm's xtables-lock mount says `readOnly: false`, the live one
    has no readOnly)."""
    if have is None and not want:
        return None
    if isinstance(want, dict):
        if have is None:
            have = {}
        if not isinstance(have, dict):
            return path, want, have
        for k, v in want.items():
            d = subset_diff(v, have.get(k), f"{path}.{k}" if path else k)
            if d:
                return d
        return None
    if isinstance(want, list) and want and all(isinstance(w, dict) and "name" in w for w in want):
        if not isinstance(have, list):
            return path, want, have
        by_name = {h.get("name"): h for h in have if isinstance(h, dict)}
        for w in want:
            d = subset_diff(w, by_name.get(w["name"]), f"{path}[{w['name']}]")
            if d:
                return d
        return None
    if isinstance(want, list):
        if not isinstance(have, list) or len(want) != len(have):
            return path, want, have
        for i, (w, h) in enumerate(zip(want, have)):
            d = subset_diff(w, h, f"{path}[{i}]")
            if d:
                return d
        return None
    return None if want == have else (path, want, have)


ADDON_KINDS = ("DaemonSet", "ServiceAccount", "Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding")


def addon(manifests, live):
    """(lines, ok) for `measure.py addon` (its help above)."""
    have = {(o.get("kind"), o["metadata"]["name"]): o for o in live.get("items", [])}
    out, ok = [], True
    for obj in manifests:
        if not isinstance(obj, dict) or obj.get("kind") not in ADDON_KINDS:
            continue
        key = (obj["kind"], obj["metadata"]["name"])
        got = have.get(key)
        name = f"{key[0]}/{key[1]}"
        if got is None:
            out.append(f"{name} missing")
            ok = False
            continue
        if obj["kind"] == "DaemonSet":
            want = json.loads(json.dumps(obj["spec"]["template"]))
            want.get("metadata", {}).pop("annotations", None)
            for v in want["spec"].get("volumes", []):
                # kube-proxy-sync mounts its immutable copy: another name
                if "configMap" in v:
                    v["configMap"].pop("name", None)
            d = subset_diff(want, got["spec"]["template"], "spec.template")
        else:
            want = {k: v for k, v in obj.items() if k in ("rules", "subjects", "roleRef", "automountServiceAccountToken")}
            d = subset_diff(want, got)
        if d:
            out.append(f"{name} differs: {d[0]} kubeadm={json.dumps(d[1], sort_keys=True)} live={json.dumps(d[2], sort_keys=True)}")
            ok = False
        else:
            out.append(f"{name} ok")
    if not out:
        return ["kubeadm printed no kube-proxy DaemonSet or RBAC"], False
    return out, ok


if __name__ == "__main__":
    if len(sys.argv) >= 3 and sys.argv[1] == "watch":
        watch(sys.argv[2], sys.argv[3:])
    elif len(sys.argv) == 5 and sys.argv[1] == "new-pod":
        with open(sys.argv[3], encoding="utf-8") as f:
            uids = {line.split()[1] for line in f if len(line.split()) == 2}
        sys.exit(0 if follow_new_pod(sys.argv[2], uids, sys.argv[4]) else 3)
    elif len(sys.argv) == 4 and sys.argv[1] == "audit":
        print("\n".join(audit(sys.argv[2], sys.argv[3])))
    elif len(sys.argv) > 3 and sys.argv[1] == "writers":
        print("\n".join(writers(sys.argv[2], sys.argv[3:])))
    elif len(sys.argv) > 4 and sys.argv[1] == "configz" and "--" in sys.argv:
        configz(sys.argv[2:])
    elif len(sys.argv) == 4 and sys.argv[1] == "task":
        with open(sys.argv[2], encoding="utf-8", errors="replace") as f:
            print("\n".join(task_results(f.read().splitlines(), sys.argv[3])))
    elif len(sys.argv) == 3 and sys.argv[1] == "running":
        with open(sys.argv[2], encoding="utf-8") as f:
            print(running_fields(json.load(f)))
    elif len(sys.argv) in (4, 5) and sys.argv[1] == "same-config":
        docs = []
        for path in sys.argv[2:4]:
            with open(path, encoding="utf-8") as f:
                docs.append(json.load(f)["kubeproxy.config.k8s.io"])
        matched, text = same_config(*docs, *sys.argv[4:])
        print(text)
        sys.exit({True: 0, False: 1, None: 3}[matched])
    elif len(sys.argv) == 4 and sys.argv[1] == "shown":
        with open(sys.argv[2], encoding="utf-8", errors="replace") as f:
            msg = task_shown(f.read().splitlines(), sys.argv[3])
        if msg is None:
            sys.exit(f"measure.py shown: the task {sys.argv[3]!r} showed nothing in {sys.argv[2]}")
        print("\n".join(shown_lines(msg)))
    elif len(sys.argv) == 4 and sys.argv[1] == "addon":
        with open(sys.argv[2], encoding="utf-8") as f:
            printed = list(yaml.safe_load_all(f))
        with open(sys.argv[3], encoding="utf-8") as f:
            lines, good = addon(printed, json.load(f))
        print("\n".join(lines))
        sys.exit(0 if good else 1)
    elif len(sys.argv) > 2 and sys.argv[1] == "traffic":
        print("\n".join(traffic(sys.argv[2:])))
    else:
        sys.exit(__doc__)
