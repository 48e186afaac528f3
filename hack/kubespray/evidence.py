#!/usr/bin/env python3
"""The kubespray tier's evidence: one run as JSON, and the runs as a page.

  evidence.py assemble FIGURES SUMMARY OUT.json KEY=VALUE...
      One run of hack/kubespray/run.sh as JSON, from what the run wrote:
      FIGURES, its figures directory (per step `NAME.time`, "SECONDS s" and
      ", FAILED" when it failed; `NAME`, the step's figure lines; for
      STEP-MODE also `STEP-MODE.watch`, `measure.py watch`'s key=value lines,
      and `STEP-MODE.traffic`, `measure.py traffic`'s lines), and SUMMARY,
      the summary whose first line names the run's layout (kept as
      `header`). KEY=VALUE: the run's metadata, the keys of RUN_KEYS
      (started, ended and exit_code required). Written to OUT.json.tmp, then
      renamed: a run never leaves half a file.

  evidence.py page RUNS_DIR OUT.md [--verify]
      Every RUNS_DIR/*.json (one a run, as assemble writes it) as a page:
      the runs (date, commits, layout, modes, duration, passed or where it
      stopped), then per layout: where both tool-free and tool runs are,
      whether the tool-free fix is enough at each step (its medians against
      the tool's on the figures of JUDGED), and per step a table with a row
      per figure and a column per mode, each cell the median, the range
      (min-max) and n, over the runs that have the figure. With no run,
      the page says so. Sorted throughout: the same runs give the same
      page, byte for byte.
      --verify writes nothing: exit 1, showing the difference, when OUT.md
      is not what it would write (hack/verify/generated.sh, make verify).

Only the standard library: run.sh runs it with the host's python3, also
when the run stopped before kubespray's venv was made.
"""
import difflib
import json
import os
import re
import statistics
import sys
from datetime import datetime

SCHEMA = 1
MODES = ("unpatched", "toolfree", "tool")
# the steps before the modes, and each mode's, in the order run.sh runs them
SETUP_STEPS = ("trees", "engine", "build", "release", "venv")
MODE_STEPS = ("hosts", "cluster", "nodes", "rerun", "check", "limit", "settings", "upgrade", "breaking", "breaking-upgrade", "egress")
# KEY=VALUE of assemble: the key and how its value is read
RUN_KEYS = {
    "kubespray_commit": str,
    "project_commit": str,
    "project_dirty": lambda v: v in ("1", "true", "yes"),
    "started": str,
    "ended": str,
    "exit_code": int,
    "modes": str.split,
    "steps": str.split,
    "control_planes": int,
    "workers": int,
    "load_balancer": str,
    "dns": str,
    "upgrade": str,
    "kubernetes": str,
    "upgrade_from": str,
    "upgrade_to": str,
}
REQUIRED = ("started", "ended", "exit_code")


def number(text):
    """An int or a float when text is one, else text."""
    if re.fullmatch(r"-?\d+", text):
        return int(text)
    if re.fullmatch(r"-?\d+\.\d*(e-?\d+)?", text):
        return float(text)
    return text


def read_lines(path):
    """The non-empty lines of path; None when there is no such file."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return [line.rstrip("\n") for line in f if line.strip()]
    except FileNotFoundError:
        return None


def read_time(path):
    """(seconds, passed) of a step's .time file ("12 s" or "12 s, FAILED")."""
    lines = read_lines(path) or [""]
    m = re.match(r"^(\d+) s(, FAILED)?$", lines[0].strip())
    if not m:
        raise ValueError(f"{path}: not a step time ('SECONDS s' or 'SECONDS s, FAILED'): {lines[0]!r}")
    return int(m.group(1)), m.group(2) is None


def read_watch(path):
    """measure.py watch's key=value lines as a dict, numbers as numbers;
    None when there is no file."""
    lines = read_lines(path)
    if lines is None:
        return None
    out = {}
    for line in lines:
        key, sep, value = line.partition("=")
        if sep:
            out[key] = number(value)
    return out


TRAFFIC = re.compile(r"^(\S+) (\S+) tries=(\d+) failed=(\d+) longest_gap=([0-9.]+)$")


def read_traffic(path):
    """measure.py traffic's lines, one dict each; None when there is no file."""
    lines = read_lines(path)
    if lines is None:
        return None
    out = []
    for line in lines:
        m = TRAFFIC.match(line.strip())
        if m:
            out.append({"host": m.group(1), "target": m.group(2), "tries": int(m.group(3)),
                        "failed": int(m.group(4)), "longest_gap": float(m.group(5))})
    return sorted(out, key=lambda t: (t["host"], t["target"]))


def read_step(figures, name):
    seconds, passed = read_time(os.path.join(figures, name + ".time"))
    lines = read_lines(os.path.join(figures, name)) or []
    step = {"seconds": seconds, "passed": passed, "figures": lines}
    watch = read_watch(os.path.join(figures, name + ".watch"))
    if watch is not None:
        step["watch"] = watch
    traffic = read_traffic(os.path.join(figures, name + ".traffic"))
    if traffic is not None:
        step["traffic"] = traffic
    return step


def step_order(step):
    return (MODE_STEPS.index(step) if step in MODE_STEPS else len(MODE_STEPS), step)


def mode_order(mode):
    return (MODES.index(mode) if mode in MODES else len(MODES), mode)


def assemble(figures, summary, pairs):
    """The run as a dict (see the module's doc)."""
    run = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or key not in RUN_KEYS:
            raise ValueError(f"{pair!r}: want KEY=VALUE, KEY one of {', '.join(RUN_KEYS)}")
        run[key] = RUN_KEYS[key](value)
    missing = [k for k in REQUIRED if k not in run]
    if missing:
        raise ValueError(f"missing {', '.join(missing)}")
    header = read_lines(summary)
    run["header"] = header[0] if header else ""
    run["duration_s"] = seconds_between(run["started"], run["ended"])
    modes = run.get("modes") or list(MODES)
    names = sorted(n[:-len(".time")] for n in os.listdir(figures) if n.endswith(".time"))
    setup, by_mode = {}, {}
    for name in names:
        if name in SETUP_STEPS:
            setup[name] = read_step(figures, name)
            continue
        step, _, mode = name.rpartition("-")
        if mode not in modes or not step:
            print(f"evidence.py: {name}.time: no step of a mode of this run, left out", file=sys.stderr)
            continue
        by_mode.setdefault(mode, {})[step] = read_step(figures, name)
    setup = {k: setup[k] for k in SETUP_STEPS if k in setup}
    # every step in the order it ran: (its name, what it recorded)
    ran = list(setup.items())
    out_modes = {}
    for mode in modes:
        if mode in by_mode:
            out_modes[mode] = {s: by_mode[mode][s] for s in sorted(by_mode[mode], key=step_order)}
            ran += [(f"{s}-{mode}", v) for s, v in out_modes[mode].items()]
    failed = [name for name, step in ran if not step["passed"]]
    run["failed_step"] = failed[0] if failed else None
    run["last_step"] = ran[-1][0] if ran else None
    run["passed"] = run["exit_code"] == 0 and not failed
    return {"schema": SCHEMA, "run": run, "setup": setup, "modes": out_modes}


def seconds_between(start, end):
    try:
        a = datetime.fromisoformat(start.replace("Z", "+00:00"))
        b = datetime.fromisoformat(end.replace("Z", "+00:00"))
    except ValueError:
        return None
    return int((b - a).total_seconds())


def write_json(doc, path):
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=1, ensure_ascii=False)
        f.write("\n")
    os.replace(tmp, path)


# The page's rows: label, and the value of a step of one run (None: the run
# has no such figure).
def _watch(key):
    def value(step):
        v = step.get("watch", {}).get(key)
        return v if isinstance(v, (int, float)) else None
    return value


def _per_node(s):
    w = s.get("watch", {})
    if isinstance(w.get("new"), int) and isinstance(w.get("nodes"), int) and w["nodes"] > 0:
        return w["new"] / w["nodes"]
    return None


# The prober's UDP targets (run.sh's traffic_start), measure.py's too: the
# echo through the prober's Service, and the DNS query through kube-dns's
# ClusterIP (KS_DNS=coredns); the others are TCP.
UDP_TARGETS = ("udp", "dns")
PROTOCOLS = {
    "TCP": lambda target: target not in UDP_TARGETS,
    "UDP": lambda target: target in UDP_TARGETS,
    "DNS": lambda target: target == "dns",
}


def _traffic(protocol, f):
    """A figure over the prober's targets of PROTOCOL: TCP (cluster,
    nodeport), UDP (udp and dns) or DNS (dns alone); None when the step has
    none of them."""
    def value(s):
        rows = [t for t in s.get("traffic") or [] if PROTOCOLS[protocol](t["target"])]
        return f(rows) if rows else None
    return value


ROWS = (
    ("wall time, s", lambda s: s["seconds"]),
    ("pods made per node", _per_node),
    ("pods made", _watch("new")),
    ("pods replaced", lambda s: _count(s, REPLACED)),
    ("rollouts of the DaemonSet", lambda s: _count(s, ROLLOUTS)),
    ("container restarts in place", _watch("restarts")),
    ("most nodes without a Ready kube-proxy at once", _watch("max_unavailable")),
    ("nodes touched (a pod made or a container restarted)", _watch("touched")),
    ("most nodes without a Ready kube-proxy at once, the one stopped mid-rollout counted",
     _watch("max_unavailable_all")),
    ("container restarts of the kube-proxy stopped mid-rollout", _watch("excused_restarts")),
    ("pods made while an API server was older (skew)", _watch("skew")),
    ("watch restarted (its connection ended)", _watch("gaps")),
    ("TCP tries (ClusterIP and NodePort, all hosts)", _traffic("TCP", lambda t: sum(x["tries"] for x in t))),
    ("TCP failed tries", _traffic("TCP", lambda t: sum(x["failed"] for x in t))),
    ("TCP longest gap, s (the worst host and target)", _traffic("TCP", lambda t: max(x["longest_gap"] for x in t))),
    ("UDP tries (echo and DNS, all hosts)", _traffic("UDP", lambda t: sum(x["tries"] for x in t))),
    ("UDP answers lost", _traffic("UDP", lambda t: sum(x["failed"] for x in t))),
    ("UDP longest gap, s (the worst host and target)", _traffic("UDP", lambda t: max(x["longest_gap"] for x in t))),
    ("DNS queries (kube-dns's ClusterIP, all hosts)", _traffic("DNS", lambda t: sum(x["tries"] for x in t))),
    ("DNS answers lost or wrong", _traffic("DNS", lambda t: sum(x["failed"] for x in t))),
    ("DNS longest gap, s (the worst host)", _traffic("DNS", lambda t: max(x["longest_gap"] for x in t))),
    ("packets that tried to leave the network", lambda s: _count(s, EGRESS)),
    ("of them from a host to the cluster's pod or Service addresses (no route there)", lambda s: _count(s, UNROUTED)),
)


# Figures read from a step's figure lines at page time (run.sh's own words),
# so that runs recorded before a reader was written count too.
REPLACED = re.compile(r"^kube-proxy pods replaced (\d+) of \d+")
ROLLOUTS = re.compile(r"^rollouts of the DaemonSet: (-?\d+)")
EGRESS = re.compile(r"^packets that tried to leave the \S+ network: (\d+)")
UNROUTED = re.compile(r"^packets that tried to leave the \S+ network: \d+, of them from a host to the cluster's pod or Service addresses: (\d+)")
CONFIGZ = re.compile(r"^/configz( FAILED)?: ")
RESTARTED = re.compile(r"^a kube-proxy stopped mid-rollout \(as a node reboot\): (.*)$")
STARTED_AFTER = re.compile(r"^a kube-proxy pod started afterwards on \S+ (.*)$")


def _figure(s, pattern):
    """The last of the step's figure lines PATTERN matches, as its match;
    None when none does."""
    found = [m for m in (pattern.match(line) for line in s.get("figures") or []) if m]
    return found[-1] if found else None


def _count(s, pattern):
    """The number PATTERN's first group reads from the step's last figure
    line it matches; None when none does."""
    m = _figure(s, pattern)
    return None if m is None else int(m.group(1))


def _inventory_reached(s):
    """1 when the step's last /configz figure says every kube-proxy runs
    kubespray's variables, from the ConfigMap it mounts; 0 when not (a
    value not kubespray's, a pod on an older write, or the check failed)."""
    m = _figure(s, CONFIGZ)
    if m is None:
        return None
    line = m.string
    stale = m.group(1) or "; not kubespray's variable:" in line or ", not all the ConfigMap's" in line
    return 0 if stale else 1


def _restart_served(s):
    """1 when the kube-proxy stopped mid-rollout ran again and served its
    /configz, 0 when it did not (within run.sh's 120 s and 30 s)."""
    m = _figure(s, RESTARTED)
    if m is None or "not made" in m.group(1):
        return None
    return 1 if "running again after" in m.group(1) and "no /configz within" not in m.group(1) else 0


def _started_after_runs(s):
    """1 when a kube-proxy pod started after the step (breaking-upgrade's)
    runs, 0 when it exits or is neither Ready nor restarted."""
    m = _figure(s, STARTED_AFTER)
    if m is None or "not measured" in m.group(1):
        return None
    return 1 if ": runs (" in m.group(1) else 0


ROW = dict(ROWS)
LOWER, HIGHER = "lower", "higher"
# What the tool-free fix is judged by against the tool: label, a step's
# value, which is better, and the steps (as run.sh names them; None: every
# step) where the figure judges.
JUDGED = (
    ("kube-proxy pods made (a rerun or a look needs none)", _watch("new"), LOWER, ("rerun", "check", "limit")),
    ("every kube-proxy runs the inventory's kube_proxy_* values afterwards (1 yes, 0 no)", _inventory_reached, HIGHER,
     ("settings", "upgrade")),
    ("kube-proxy pods made per node (an upgrade needs one each)", _per_node, LOWER, ("upgrade",)),
    # the kube-proxy the tier stops mid-rollout is judged by the row of its own
    ("most nodes without a Ready kube-proxy at once", _watch("max_unavailable"), LOWER, None),
    ("pods made while an API server was older (skew)", _watch("skew"), LOWER, None),
    ("TCP failed tries", ROW["TCP failed tries"], LOWER, None),
    ("UDP answers lost", ROW["UDP answers lost"], LOWER, None),
    ("DNS answers lost or wrong", ROW["DNS answers lost or wrong"], LOWER, None),
    ("nodes whose kube-proxy was replaced or restarted with the breaking value in the inventory", _watch("touched"),
     LOWER, ("breaking", "breaking-upgrade")),
    ("the kube-proxy stopped mid-rollout served again (1 yes, 0 no)", _restart_served, HIGHER, None),
    ("a kube-proxy pod started after the step runs (1 yes, 0 it exits)", _started_after_runs, HIGHER,
     ("breaking-upgrade",)),
)


def base_step(name):
    return name[:-len(CARRIES)] if name.endswith(CARRIES) else name


def enough_lines(have, steps):
    """The page's lines saying, per step, whether the tool-free fix is
    enough: HAVE is {step: {mode: [step of each run]}}."""
    lines = ["", "### Where the tool-free fix is enough", "",
             "Tool-free is enough at a step when its median is no worse than the tool's on every figure judged",
             "there that both modes' runs have; a figure only one of them has leaves the step unjudged. The runs",
             "column counts the runs passed, of those that ran the step (a failed one's figures count too). Judged:", ""]
    lines += [f"- {label}, {'lower' if better_is == LOWER else 'higher'} is better: "
              + (f"at {', '.join(only)}" if only else "at every step") for label, _, better_is, only in JUDGED]
    lines += ["",
             "| step | runs passed: unpatched; tool-free; tool | tool-free enough? "
             "| where the tool does better: tool-free's median against the tool's | where tool-free does better |",
             "| --- | --- | --- | --- | --- |"]
    for step in steps:
        runs = "; ".join(f"{sum(s['passed'] for s in have[step][m])} of {len(have[step][m])}" if have[step].get(m) else "–"
                         for m in MODES)
        if not have[step].get("toolfree") or not have[step].get("tool"):
            lines.append(f"| {step} | {runs} | not measured in both | – | – |")
            continue
        worse, better, one_sided = [], [], []
        for label, value, better_is, only in JUDGED:
            if only is not None and base_step(step) not in only:
                continue
            med = {}
            for m in ("toolfree", "tool"):
                values = [v for v in (value(s) for s in have[step][m]) if v is not None]
                med[m] = statistics.median(values) if values else None
            if (med["toolfree"] is None) != (med["tool"] is None):
                one_sided.append(f"{label} ({'tool-free' if med['toolfree'] is not None else 'the tool'} only)")
            if med["toolfree"] is None or med["tool"] is None or med["toolfree"] == med["tool"]:
                continue
            tool_wins = (med["tool"] < med["toolfree"]) == (better_is == LOWER)
            (worse if tool_wins else better).append(f"{label}: {fmt(med['toolfree'])} against {fmt(med['tool'])}")
        verdict = "no" if worse else f"not judged: {'; '.join(one_sided)}" if one_sided else "yes"
        lines.append(f"| {step} | {runs} | {verdict} | {'; '.join(worse) or '–'} | {'; '.join(better) or '–'} |")
    return lines


def fmt(value):
    """A number as the page shows it: an int plainly, else up to 2 decimals."""
    if isinstance(value, int) or float(value).is_integer():
        return str(int(value))
    return f"{value:.2f}".rstrip("0").rstrip(".")


def cell(values):
    if not values:
        return "–"
    med = statistics.median(values)
    if len(values) == 1:
        return f"{fmt(med)} (n=1)"
    return f"{fmt(med)} ({fmt(min(values))}–{fmt(max(values))}, n={len(values)})"


def load_runs(runs_dir):
    """(file name, summary) of every RUNS_DIR/*.json, oldest first."""
    runs = []
    for name in sorted(os.listdir(runs_dir)):
        if not name.endswith(".json"):
            continue
        with open(os.path.join(runs_dir, name), encoding="utf-8") as f:
            doc = json.load(f)
        if doc.get("schema") != SCHEMA:
            raise ValueError(f"{name}: schema {doc.get('schema')!r}, this page reads {SCHEMA}")
        runs.append((name, doc))
    return sorted(runs, key=lambda r: (r[1]["run"].get("started", ""), r[0]))


def layout(run):
    if run.get("upgrade", "0") not in ("0", ""):
        # KS_UPGRADE=1 is the patch upgrade (hack/lib.sh's ks_upgrade)
        kind = "patch" if run["upgrade"] == "1" else run["upgrade"]
        versions = f"{run.get('upgrade_from', '?')} to {run.get('upgrade_to', '?')} ({kind})"
    else:
        versions = run.get("kubernetes", "?")
    # a run from before KS_DNS ran without DNS (dns_mode: none)
    return (f"control planes {run.get('control_planes', '?')}, workers {run.get('workers', '?')}, "
            f"load balancer {run.get('load_balancer', '?')}, DNS {run.get('dns', 'none')}, Kubernetes {versions}")


def result(run):
    if run.get("passed"):
        return "passed"
    if run.get("failed_step"):
        return f"stopped at {run['failed_step']}"
    return f"exit {run.get('exit_code')} after {run.get('last_step') or 'no step'}"


def duration(seconds):
    if seconds is None:
        return "?"
    return f"{seconds // 60} min"


def commit(run, key):
    c = (run.get(key) or "?")[:12]
    return c + " (with uncommitted changes)" if key == "project_commit" and run.get("project_dirty") else c


def cmd_line(runs_dir, out):
    return f"hack/kubespray/evidence.py page {runs_dir} {out}"


# The steps run.sh runs with the settings step's value in the inventory.
# When a mode ran none of settings, the first of them that it ran makes
# that change too (an upgrade then changes the setting and the image at
# once): a different step, counted apart.
AFTER_SETTINGS = ("upgrade", "breaking", "breaking-upgrade")
CARRIES = ", with the settings change (no settings step before it)"


def table_steps(steps):
    """{table name: step} of one mode's steps in one run."""
    names = {s: s for s in steps}
    if "settings" not in steps:
        first = [s for s in sorted(steps, key=step_order) if s in AFTER_SETTINGS][:1]
        for s in first:
            names[s + CARRIES] = names.pop(s)
    return names


def table_order(name):
    step = name[:-len(CARRIES)] if name.endswith(CARRIES) else name
    return step_order(step) + (name,)


def step_tables(runs):
    """The page's lines of one layout's runs: a table per step."""
    lines = []
    modes = sorted({m for _, doc in runs for m in doc["modes"]}, key=mode_order)
    named = [{m: {n: steps[s] for n, s in table_steps(list(steps)).items()} for m, steps in doc["modes"].items()}
             for _, doc in runs]
    steps = sorted({n for run in named for m in run.values() for n in m}, key=table_order)
    every = {step: {m: [run[m][step] for run in named if step in run.get(m, {})] for m in modes} for step in steps}
    judged = [step for step in steps if step not in ("hosts", "cluster", "nodes", "egress")]
    if judged and {"toolfree", "tool"} <= set(modes):
        lines += enough_lines(every, judged)
    for step in steps:
        have = every[step]
        lines += ["", f"### {step}", "", "| figure | " + " | ".join(modes) + " |",
                  "| --- |" + " --- |" * len(modes)]
        ran = [f"{sum(s['passed'] for s in have[m])} of {len(have[m])}" if have[m] else "–" for m in modes]
        lines.append("| passed, of the runs that ran it | " + " | ".join(ran) + " |")
        for label, value in ROWS:
            cells = []
            for m in modes:
                cells.append(cell([v for v in (value(s) for s in have[m]) if v is not None]))
            if any(c != "–" for c in cells):
                lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return lines


def page(runs_dir, out):
    runs = load_runs(runs_dir)
    rel = os.path.relpath(runs_dir, os.path.dirname(out) or ".")
    lines = [
        "# kubespray tier: the evidence",
        "",
        "For kubespray maintainers and reviewers: what `make test-kubespray` measured on kubespray's own",
        "playbooks in its three modes (unpatched, tool-free, tool), step by step, as medians and ranges over",
        "the runs recorded. How the steps run and what each must show: [hack/kubespray](../hack/kubespray/README.md).",
        "",
        f"Generated by `{cmd_line(runs_dir, out)}` (`make generate`) from the",
        f"runs' summaries in [{rel}]({rel}/README.md); `make verify` fails when it is stale. Never edit it by",
        "hand: add a run's summary there and generate it again.",
        "",
        "## Runs",
        "",
    ]
    if not runs:
        lines += [f"No run recorded yet: `{runs_dir}` holds no summary, so this page has no figures.", ""]
        return "\n".join(lines)
    lines += ["| run | started (UTC) | duration | commit | kubespray | layout | modes | result |",
              "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for name, doc in runs:
        r = doc["run"]
        lines.append(" | ".join([
            f"| [{name[:-len('.json')]}]({rel}/{name})", r.get("started", "?"), duration(r.get("duration_s")),
            commit(r, "project_commit"), commit(r, "kubespray_commit"), layout(r), " ".join(r.get("modes", [])),
            result(r) + " |"]))
    lines += [
        "",
        "Each cell below: the median over the runs that have the figure for that step and mode, the range",
        "(lowest–highest) and n, the number of those runs; – where no run has it. Runs of one layout are",
        "counted together, never across layouts. A failed step's figures count too: the first row says",
        "how many of the runs passed it. Pods made per node: the kube-proxy pods created during the step",
        "over the nodes (1: each node's pod replaced once). TCP: the prober's tries through a Service's",
        "ClusterIP and NodePort on every host; UDP: a datagram to the ClusterIP, a new source port each,",
        "answered within 1 s, and with CoreDNS (DNS coredns) also a DNS query for that Service to",
        "kube-dns's ClusterIP, answered within 1 s with the Service's ClusterIP (its own rows too).",
        "Where a run had no settings step, the first step after it that ran also made the settings change",
        "(an upgrade then changes the setting and the image at once): its table is a step of its own, named so.",
    ]
    groups = {}
    for name, doc in runs:
        groups.setdefault(layout(doc["run"]), []).append((name, doc))
    for lay, group in groups.items():
        lines += ["", f"## Figures: {lay}"]
        lines += step_tables(group)
    lines.append("")
    return "\n".join(lines)


def verify(runs_dir, out):
    """0 when OUT is what page writes; else 1, the difference on stderr."""
    want = page(runs_dir, out)
    try:
        with open(out, encoding="utf-8") as f:
            have = f.read()
    except FileNotFoundError:
        have = ""
    if have == want:
        return 0
    sys.stderr.writelines(difflib.unified_diff(have.splitlines(True), want.splitlines(True), out, "generated"))
    print(f"{out} is not what `{cmd_line(runs_dir, out)}` writes: run it (make generate) and commit the page",
          file=sys.stderr)
    return 1


def main(argv):
    if len(argv) >= 4 and argv[0] == "assemble":
        try:
            doc = assemble(argv[1], argv[2], argv[4:])
        except (OSError, ValueError) as e:
            sys.exit(f"evidence.py assemble: {e}")
        write_json(doc, argv[3])
    elif len(argv) == 3 and argv[0] == "page":
        text = page(argv[1], argv[2])
        with open(argv[2], "w", encoding="utf-8") as f:
            f.write(text)
    elif len(argv) == 4 and argv[0] == "page" and argv[3] == "--verify":
        sys.exit(verify(argv[1], argv[2]))
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
