"""Tests of evidence.py: a run's summary.json, and the page of the runs."""
import contextlib
import io
import json
import os
import re
import shutil
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import evidence  # noqa: E402  pylint: disable=wrong-import-position

META = [
    "kubespray_commit=46dbdd399aaaabbbbccccdddd", "project_commit=6a2211b0123456789", "project_dirty=0",
    "started=2026-12-01T10:00:00Z", "ended=2026-12-01T11:00:30Z", "exit_code=1", "modes=unpatched tool",
    "steps=rerun settings", "control_planes=1", "workers=2", "load_balancer=haproxy", "dns=coredns", "upgrade=0",
    "kubernetes=v1.34.4", "upgrade_from=v1.34.4", "upgrade_to=v1.34.4",
]


def write(path, text):
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


class Assemble(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, self.dir)
        fig = self.figures = os.path.join(self.dir, "figures")
        os.mkdir(fig)
        write(os.path.join(self.dir, "summary.txt"), "kubespray 46dbdd399aaa, modes: unpatched tool, ...\n  x\n")
        for name, time in [("trees", "3 s"), ("build", "300 s"), ("hosts-unpatched", "20 s"),
                           ("rerun-unpatched", "400 s"), ("egress-unpatched", "1 s"), ("hosts-tool", "21 s"),
                           ("rerun-tool", "410 s"), ("settings-tool", "500 s, FAILED")]:
            write(os.path.join(fig, name + ".time"), time + "\n")
        write(os.path.join(fig, "release"), "kube-proxy-sync 0.9.0 on the file server\n")
        write(os.path.join(fig, "rerun-unpatched"),
              "kube-proxy pods replaced 3 of 3 (pods created 3, most on one node 2)\n"
              "rollouts of the DaemonSet: 0 (ControllerRevision 1 to 1; template revisions among the new pods: 0)\n")
        write(os.path.join(fig, "rerun-unpatched.watch"),
              "nodes=3\npods=6\nnew=3\nmax_unavailable=3\nrestarts=0\nper_node=kps-ks-cp1 1 new 0 restarts\n"
              "touched=3\ntouched_nodes=kps-ks-cp1,kps-ks-w1,kps-ks-w2\n")
        write(os.path.join(fig, "rerun-unpatched.traffic"),
              "kps-ks-cp1 cluster tries=100 failed=4 longest_gap=3.10\n"
              "kps-ks-cp1 nodeport tries=98 failed=0 longest_gap=0.52\n")
        write(os.path.join(fig, "egress-unpatched"), "packets that tried to leave the kps-kubespray network: 0\n")
        # settings-tool failed and has no watch file
        write(os.path.join(fig, "settings-tool"), "traffic: not measured (no answer)\n")

    def test_run(self):
        doc = evidence.assemble(self.figures, os.path.join(self.dir, "summary.txt"), META)
        run = doc["run"]
        self.assertEqual(run["header"], "kubespray 46dbdd399aaa, modes: unpatched tool, ...")
        self.assertEqual(run["modes"], ["unpatched", "tool"])
        self.assertEqual(run["steps"], ["rerun", "settings"])
        self.assertEqual(run["control_planes"], 1)
        self.assertEqual(run["load_balancer"], "haproxy")
        self.assertEqual(run["dns"], "coredns")
        self.assertIs(run["project_dirty"], False)
        self.assertEqual(run["duration_s"], 3630)
        self.assertEqual(run["exit_code"], 1)
        self.assertIs(run["passed"], False)
        self.assertEqual(run["failed_step"], "settings-tool")
        self.assertEqual(run["last_step"], "settings-tool")
        self.assertEqual(list(doc["setup"]), ["trees", "build"])
        self.assertEqual(list(doc["modes"]), ["unpatched", "tool"])
        self.assertEqual(list(doc["modes"]["unpatched"]), ["hosts", "rerun", "egress"])

    def test_steps(self):
        doc = evidence.assemble(self.figures, os.path.join(self.dir, "summary.txt"), META)
        rerun = doc["modes"]["unpatched"]["rerun"]
        self.assertEqual(rerun["seconds"], 400)
        self.assertIs(rerun["passed"], True)
        self.assertEqual(rerun["watch"], {
            "nodes": 3, "pods": 6, "new": 3, "max_unavailable": 3, "restarts": 0,
            "per_node": "kps-ks-cp1 1 new 0 restarts", "touched": 3,
            "touched_nodes": "kps-ks-cp1,kps-ks-w1,kps-ks-w2"})
        self.assertEqual(rerun["traffic"], [
            {"host": "kps-ks-cp1", "target": "cluster", "tries": 100, "failed": 4, "longest_gap": 3.1},
            {"host": "kps-ks-cp1", "target": "nodeport", "tries": 98, "failed": 0, "longest_gap": 0.52}])
        self.assertEqual(len(rerun["figures"]), 2)
        self.assertEqual(evidence.ROW["pods replaced"](rerun), 3)
        self.assertEqual(evidence.ROW["rollouts of the DaemonSet"](rerun), 0)
        self.assertEqual(evidence.ROW["packets that tried to leave the network"](doc["modes"]["unpatched"]["egress"]), 0)
        settings = doc["modes"]["tool"]["settings"]
        self.assertEqual(settings, {"seconds": 500, "passed": False,
                                    "figures": ["traffic: not measured (no answer)"]})

    def test_passed(self):
        os.remove(os.path.join(self.figures, "settings-tool.time"))
        meta = [m if not m.startswith("exit_code=") else "exit_code=0" for m in META]
        run = evidence.assemble(self.figures, os.path.join(self.dir, "summary.txt"), meta)["run"]
        self.assertIs(run["passed"], True)
        self.assertIsNone(run["failed_step"])
        self.assertEqual(run["last_step"], "rerun-tool")

    def test_exit_without_failed_step(self):
        os.remove(os.path.join(self.figures, "settings-tool.time"))
        run = evidence.assemble(self.figures, os.path.join(self.dir, "summary.txt"), META)["run"]
        self.assertIs(run["passed"], False)
        self.assertIsNone(run["failed_step"])
        self.assertEqual(evidence.result(run), "exit 1 after rerun-tool")

    def test_bad_input(self):
        summary = os.path.join(self.dir, "summary.txt")
        with self.assertRaisesRegex(ValueError, "missing exit_code"):
            evidence.assemble(self.figures, summary, [m for m in META if not m.startswith("exit_code=")])
        with self.assertRaisesRegex(ValueError, "'colour=red'"):
            evidence.assemble(self.figures, summary, META + ["colour=red"])
        write(os.path.join(self.figures, "nodes-tool.time"), "soon\n")
        with self.assertRaisesRegex(ValueError, "nodes-tool.time"):
            evidence.assemble(self.figures, summary, META)

    def test_written_whole(self):
        out = os.path.join(self.dir, "summary.json")
        evidence.main(["assemble", self.figures, os.path.join(self.dir, "summary.txt"), out] + META)
        with open(out, encoding="utf-8") as f:
            self.assertEqual(json.load(f)["run"]["failed_step"], "settings-tool")
        self.assertFalse(os.path.exists(out + ".tmp"))


def step(seconds, passed=True, watch=None, traffic=None, figures=()):
    s = {"seconds": seconds, "passed": passed, "figures": list(figures)}
    if watch is not None:
        s["watch"] = watch
    if traffic is not None:
        s["traffic"] = [{"host": h, "target": t, "tries": n, "failed": f, "longest_gap": g}
                        for h, t, n, f, g in traffic]
    return s


def summary(started, commit, passed, modes, failed_step=None):
    return {"schema": 1, "setup": {}, "modes": modes, "run": {
        "started": started, "ended": "x", "duration_s": 3600 + 90, "exit_code": 0 if passed else 1,
        "passed": passed, "failed_step": failed_step, "last_step": failed_step, "project_commit": commit,
        "project_dirty": False, "kubespray_commit": "46dbdd399aaabbbb", "modes": sorted(modes),
        "control_planes": 1, "workers": 2, "load_balancer": "haproxy", "dns": "none", "upgrade": "1",
        "upgrade_from": "v1.34.3", "upgrade_to": "v1.34.4", "kubernetes": "v1.34.4"}}


class Page(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, self.dir)
        self.runs = os.path.join(self.dir, "runs")
        os.mkdir(self.runs)

    def add(self, name, doc):
        write(os.path.join(self.runs, name), json.dumps(doc))

    def page(self):
        return evidence.page(self.runs, os.path.join(self.dir, "evidence.md"))

    def row(self, text, step, label):
        section = text.split(f"\n### {step}\n", 1)[1].split("\n### ", 1)[0]
        for line in section.splitlines():
            if line.startswith(f"| {label} |"):
                return [c.strip() for c in line.strip("|").split("|")][1:]
        return None

    def test_no_run(self):
        text = self.page()
        self.assertIn("No run recorded yet: `" + self.runs + "` holds no summary, so this page has no figures.", text)
        self.assertNotIn("###", text)
        self.assertNotIn("| run |", text)

    def test_medians_and_ranges(self):
        w = {"nodes": 3, "new": 3, "restarts": 0, "max_unavailable": 1, "touched": 3}
        # the second run added in the directory is the oldest: listed first
        self.add("2026-12-02-bbbbbbb.json", summary("2026-12-02T09:00:00Z", "bbbbbbbcccc", True, {
            "unpatched": {"settings": step(400, watch=dict(w, new=6, max_unavailable=3),
                                           traffic=[("cp1", "cluster", 100, 4, 3.5), ("w1", "cluster", 90, 1, 1.25),
                                                    ("w1", "udp", 90, 7, 4.25)])},
            "tool": {"settings": step(500, watch=w, traffic=[("cp1", "cluster", 100, 0, 0.5)],
                                      figures=["rollouts of the DaemonSet: 1"]),
                     "upgrade": step(900, watch=dict(w, skew=0))}}))
        self.add("2026-12-01-aaaaaaa.json", summary("2026-12-01T09:00:00Z", "aaaaaaadddd", True, {
            "unpatched": {"settings": step(300, watch=dict(w, new=3, max_unavailable=2),
                                           traffic=[("cp1", "cluster", 100, 2, 2.0)])},
            "tool": {"settings": step(510, watch=w, traffic=[("cp1", "cluster", 100, 0, 0.7)],
                                      figures=["rollouts of the DaemonSet: 1"])}}))
        # stopped at tool's settings: no watch, and no upgrade step at all
        self.add("2026-12-03-ccccccc.json", summary("2026-12-03T09:00:00Z", "cccccccdddd", False, {
            "unpatched": {"settings": step(350, watch=dict(w, new=9, max_unavailable=3),
                                           traffic=[("cp1", "cluster", 100, 0, 1.0)])},
            "tool": {"settings": step(520, passed=False)}}, failed_step="settings-tool"))
        text = self.page()
        self.assertEqual(text, self.page(), "the same runs, the same page")
        runs = [line for line in text.splitlines() if line.startswith("| [")]
        self.assertEqual([r.split("]")[0] for r in runs], ["| [2026-12-01-aaaaaaa", "| [2026-12-02-bbbbbbb",
                                                           "| [2026-12-03-ccccccc"])
        self.assertEqual(runs[0], "| [2026-12-01-aaaaaaa](runs/2026-12-01-aaaaaaa.json) | 2026-12-01T09:00:00Z | "
                                  "61 min | aaaaaaadddd | 46dbdd399aaa | control planes 1, workers 2, load "
                                  "balancer haproxy, DNS none, Kubernetes v1.34.3 to v1.34.4 (patch) | tool unpatched "
                                  "| passed |")
        self.assertTrue(runs[2].endswith("| stopped at settings-tool |"))
        self.assertEqual(text.count("\n### "), 2, "no section on the tool-free fix without a tool-free run")
        self.assertLess(text.index("\n### settings\n"), text.index("\n### upgrade\n"))
        self.assertIn("| figure | unpatched | tool |", text)
        self.assertEqual(self.row(text, "settings", "passed, of the runs that ran it"), ["3 of 3", "2 of 3"])
        self.assertEqual(self.row(text, "settings", "wall time, s"), ["350 (300–400, n=3)", "510 (500–520, n=3)"])
        # pods made per node: 6/3, 3/3, 9/3; the tool's third run has no watch: an even count
        self.assertEqual(self.row(text, "settings", "pods made per node"), ["2 (1–3, n=3)", "1 (1–1, n=2)"])
        self.assertEqual(self.row(text, "settings", "most nodes without a Ready kube-proxy at once"),
                         ["3 (2–3, n=3)", "1 (1–1, n=2)"])
        # failed tries summed over hosts (4+1, 2, 0); the worst host's gap
        self.assertEqual(self.row(text, "settings", "TCP failed tries"),
                         ["2 (0–5, n=3)", "0 (0–0, n=2)"])
        self.assertEqual(self.row(text, "settings", "TCP longest gap, s (the worst host and target)"),
                         ["2 (1–3.5, n=3)", "0.6 (0.5–0.7, n=2)"])
        # UDP apart from TCP: only the first unpatched run's w1 tried it
        self.assertEqual(self.row(text, "settings", "UDP answers lost"), ["7 (n=1)", "–"])
        self.assertEqual(self.row(text, "settings", "UDP longest gap, s (the worst host and target)"),
                         ["4.25 (n=1)", "–"])
        # a figure only the tool's runs have
        self.assertEqual(self.row(text, "settings", "rollouts of the DaemonSet"), ["–", "1 (1–1, n=2)"])
        # a step only one run has: n=1, and a mode without it
        self.assertEqual(self.row(text, "upgrade", "pods made while an API server was older (skew)"),
                         ["–", "0 (n=1)"])
        self.assertEqual(self.row(text, "upgrade", "passed, of the runs that ran it"), ["–", "1 of 1"])
        self.assertIsNone(self.row(text, "settings", "packets that tried to leave the network"))

    def test_layouts_apart(self):
        self.add("a.json", summary("2026-12-01T00:00:00Z", "c", True, {"tool": {"rerun": step(10)}}))
        other = summary("2026-12-02T00:00:00Z", "c", True, {"tool": {"rerun": step(30)}})
        other["run"]["control_planes"] = "3"
        self.add("b.json", other)
        text = self.page()
        self.assertEqual(text.count("\n## Figures: "), 2)
        first, second = text.split("\n## Figures: ")[1:]
        self.assertTrue(first.startswith("control planes 1,"), first[:40])
        self.assertIn("| wall time, s | 10 (n=1) |", first)
        self.assertIn("| wall time, s | 30 (n=1) |", second)

    def test_dns_layouts_apart(self):
        # a run of the same layout but for its cluster DNS, and one from
        # before KS_DNS, which ran without DNS
        self.add("a.json", summary("2026-12-01T00:00:00Z", "c", True, {"tool": {"rerun": step(10)}}))
        other = summary("2026-12-02T00:00:00Z", "c", True, {"tool": {"rerun": step(30)}})
        other["run"]["dns"] = "coredns"
        self.add("b.json", other)
        older = summary("2026-11-30T00:00:00Z", "c", True, {"tool": {"rerun": step(20)}})
        del older["run"]["dns"]
        self.add("c.json", older)
        text = self.page()
        self.assertEqual(text.count("\n## Figures: "), 2)
        none, coredns = text.split("\n## Figures: ")[1:]
        self.assertIn("load balancer haproxy, DNS none, Kubernetes", none[:120])
        self.assertIn("| wall time, s | 15 (10–20, n=2) |", none)
        self.assertIn("load balancer haproxy, DNS coredns, Kubernetes", coredns[:120])
        self.assertIn("| wall time, s | 30 (n=1) |", coredns)

    def test_patch_and_minor_upgrades_apart(self):
        # KS_UPGRADE=1 (patch) and KS_UPGRADE=minor: two layouts, each
        # named by its versions and the kind of upgrade
        patch = summary("2026-12-01T00:00:00Z", "c", True, {"tool": {"upgrade": step(10)}})
        minor = summary("2026-12-02T00:00:00Z", "c", True, {"tool": {"upgrade": step(30)}})
        minor["run"].update(upgrade="minor", upgrade_from="v1.35.4", upgrade_to="v1.36.3")
        self.add("a.json", patch)
        self.add("b.json", minor)
        text = self.page()
        self.assertEqual(text.count("\n## Figures: "), 2)
        first, second = text.split("\n## Figures: ")[1:]
        self.assertIn("Kubernetes v1.34.3 to v1.34.4 (patch)\n", first)
        self.assertIn("Kubernetes v1.35.4 to v1.36.3 (minor)\n", second)
        self.assertIn("| wall time, s | 30 (n=1) |", second)

    def test_upgrade_with_the_settings_change_apart(self):
        # KS_STEPS=upgrade: the upgrade makes the settings change too, a
        # step of its own; a later step of that run is the same as anywhere
        self.add("a.json", summary("2026-12-01T00:00:00Z", "c", True, {"tool": {
            "settings": step(10), "upgrade": step(100), "breaking": step(5)}}))
        self.add("b.json", summary("2026-12-02T00:00:00Z", "c", True, {"tool": {
            "upgrade": step(300), "breaking": step(7)}}))
        text = self.page()
        carries = "upgrade, with the settings change (no settings step before it)"
        self.assertEqual(self.row(text, "upgrade", "wall time, s"), ["100 (n=1)"])
        self.assertEqual(self.row(text, carries, "wall time, s"), ["300 (n=1)"])
        self.assertEqual(self.row(text, "breaking", "wall time, s"), ["6 (5–7, n=2)"])
        self.assertLess(text.index("\n### upgrade\n"), text.index(f"\n### {carries}\n"))
        self.assertLess(text.index(f"\n### {carries}\n"), text.index("\n### breaking\n"))
        # without upgrade, breaking is the one that makes it
        self.add("c.json", summary("2026-12-03T00:00:00Z", "c", True, {"tool": {"breaking": step(9)}}))
        self.assertEqual(self.row(self.page(), "breaking, with the settings change (no settings step before it)",
                                  "wall time, s"), ["9 (n=1)"])

    def test_dns_is_udp(self):
        # the prober's dns target (a query to CoreDNS through kube-dns's
        # ClusterIP) counts with udp, never with TCP, and has rows of its own
        self.add("r.json", summary("2026-12-01T00:00:00Z", "c", True, {"tool": {"settings": step(10, traffic=[
            ("cp1", "cluster", 100, 1, 1.5), ("cp1", "nodeport", 100, 0, 0.5),
            ("cp1", "udp", 50, 2, 2.25), ("cp1", "dns", 50, 5, 3.5), ("w1", "dns", 40, 1, 1.0)])}}))
        text = self.page()
        self.assertEqual(self.row(text, "settings", "TCP tries (ClusterIP and NodePort, all hosts)"), ["200 (n=1)"])
        self.assertEqual(self.row(text, "settings", "TCP failed tries"), ["1 (n=1)"])
        self.assertEqual(self.row(text, "settings", "TCP longest gap, s (the worst host and target)"), ["1.5 (n=1)"])
        self.assertEqual(self.row(text, "settings", "UDP tries (echo and DNS, all hosts)"), ["140 (n=1)"])
        self.assertEqual(self.row(text, "settings", "UDP answers lost"), ["8 (n=1)"])
        self.assertEqual(self.row(text, "settings", "UDP longest gap, s (the worst host and target)"), ["3.5 (n=1)"])
        self.assertEqual(self.row(text, "settings", "DNS queries (kube-dns's ClusterIP, all hosts)"), ["90 (n=1)"])
        self.assertEqual(self.row(text, "settings", "DNS answers lost or wrong"), ["6 (n=1)"])
        self.assertEqual(self.row(text, "settings", "DNS longest gap, s (the worst host)"), ["3.5 (n=1)"])

    def test_no_dns_rows_without_dns(self):
        self.add("r.json", summary("2026-12-01T00:00:00Z", "c", True, {"tool": {"settings": step(10, traffic=[
            ("cp1", "cluster", 100, 1, 1.5), ("cp1", "udp", 50, 2, 2.25)])}}))
        text = self.page()
        self.assertEqual(self.row(text, "settings", "UDP answers lost"), ["2 (n=1)"])
        self.assertIsNone(self.row(text, "settings", "DNS answers lost or wrong"))

    def test_the_kube_proxy_stopped_mid_rollout_has_rows_of_its_own(self):
        w = {"nodes": 3, "new": 3, "restarts": 0, "max_unavailable": 1, "touched": 3}
        self.add("r.json", summary("2026-12-01T00:00:00Z", "c", True, {"tool": {
            "upgrade": step(10, watch=dict(w, max_unavailable_all=2, excused_restarts=1)), "settings": step(5, watch=w)}}))
        text = self.page()
        stopped = "most nodes without a Ready kube-proxy at once, the one stopped mid-rollout counted"
        self.assertEqual(self.row(text, "upgrade", stopped), ["2 (n=1)"])
        self.assertEqual(self.row(text, "upgrade", "most nodes without a Ready kube-proxy at once"), ["1 (n=1)"])
        self.assertEqual(self.row(text, "upgrade", "container restarts of the kube-proxy stopped mid-rollout"), ["1 (n=1)"])
        self.assertIsNone(self.row(text, "settings", stopped), "a step that stopped none has no such row")

    def test_egress_to_the_cluster_addresses_has_a_row_of_its_own(self):
        self.add("a.json", summary("2026-12-01T00:00:00Z", "a", True, {"toolfree": {"egress": step(1, figures=[
            "packets that tried to leave the kps-kubespray network: 180, of them from a host to the cluster's pod or Service "
            "addresses: 177 (20 logged from cp1 to 10.233.65.4 UDP/53)"])}}))
        self.add("b.json", summary("2026-11-01T00:00:00Z", "b", False, {"toolfree": {"egress": step(1, figures=[
            "packets that tried to leave the kps-kubespray network: 177"])}}))
        text = self.page()
        self.assertEqual(self.row(text, "egress", "packets that tried to leave the network"), ["178.5 (177–180, n=2)"])
        unrouted = "of them from a host to the cluster's pod or Service addresses (no route there)"
        self.assertEqual(self.row(text, "egress", unrouted), ["177 (n=1)"],
                         "a run recorded before the split has no figure for it")

    def test_the_figure_lines_read_are_the_ones_run_sh_writes(self):
        # run.sh's egress figure, its words up to the first variable, as the
        # readers take them
        with open(os.path.join(os.path.dirname(__file__), "run.sh"), encoding="utf-8") as f:
            script = f.read()
        for pattern in (evidence.EGRESS, evidence.UNROUTED, evidence.REPLACED, evidence.ROLLOUTS):
            words = re.split(r"\\S\+|\(|\\d", pattern.pattern.lstrip("^"))[0]
            self.assertIn(words, script, f"{pattern.pattern}: run.sh writes no such figure")
        egress = next(line for line in script.splitlines() if 'figure "egress-$1"' in line)
        self.assertIn(", of them from a host to the cluster's pod or Service addresses: ${unrouted}", egress)

    def enough(self, text, layout_step):
        section = text.split("\n### Where the tool-free fix is enough\n", 1)[1].split("\n### ", 1)[0]
        for line in section.splitlines():
            if line.startswith(f"| {layout_step} |"):
                return [c.strip() for c in line.strip("|").split("|")][1:]
        return None

    def test_where_the_tool_free_fix_is_enough(self):
        w = {"nodes": 3, "new": 0, "restarts": 0, "max_unavailable": 0, "touched": 0}

        def with_figures(s, *lines):
            s["figures"] = list(lines)
            return s
        # run.sh's restart_mid line, as the figure has it (9962a77's upgrade-tool), and one whose pod exits
        stopped = "a kube-proxy stopped mid-rollout (as a node reboot): w2's kube-proxy stopped once the rollout began, as a reboot would: running again after "
        served = stopped + "7 s in the same pod (one the step began with), image kube-proxy:v1.35.4, ConfigMap kube-proxy-45bb4e0da8, running mode=iptables clusterCIDR=10.233.64.0/18 iptables.minSyncPeriod=2s conntrack.maxPerCore=0"
        exited = stopped + "3 s in the same pod (one the step began with), image kube-proxy:v1.35.4, ConfigMap kube-proxy, running no /configz within 30 s"
        for i in range(2):
            self.add(f"r{i}.json", summary(f"2026-12-0{i + 1}T00:00:00Z", "c", True, {
                "toolfree": {
                    "rerun": step(10, watch=w),
                    "settings": with_figures(step(10, watch=w), "/configz: a=1 b=2; not kubespray's variable: b"),
                    "upgrade": with_figures(step(10, watch=dict(w, new=6, max_unavailable=1)),
                                            "/configz: a=1 b=3, not all the ConfigMap's (a pod started before its last write)"),
                    "breaking": step(10, watch=w),
                    "breaking-upgrade": with_figures(
                        step(10, watch=dict(w, new=3, touched=3, max_unavailable=1, max_unavailable_all=2)), exited,
                        "a kube-proxy pod started afterwards on w2 (as after a reboot or a drain): exits (restarted 4 times within 90 s), no service proxy on that node")},
                "tool": {
                    "rerun": step(10, watch=w),
                    "settings": with_figures(step(10, watch=dict(w, new=3, max_unavailable=1)), "/configz FAILED: x", "/configz: a=1 b=3"),
                    "upgrade": with_figures(step(10, watch=dict(w, new=3, max_unavailable=1)), served, "/configz: a=1 b=3"),
                    "breaking": step(10, watch=dict(w, new=2, touched=1, max_unavailable=1)),
                    "breaking-upgrade": with_figures(
                        step(10, watch=dict(w, new=2, touched=1, max_unavailable=1, max_unavailable_all=2)), served,
                        "a kube-proxy pod started afterwards on w2 (as after a reboot or a drain): runs (Ready, no restart in 90 s)")}}))
        self.add("r9.json", summary("2026-12-09T00:00:00Z", "c", False, {"tool": {"limit": step(10, False, watch=w),
                                                                                 "rerun": step(10, False, watch=w)}}))
        text = self.page()
        self.assertEqual(self.enough(text, "rerun"), ["–; 2 of 2; 2 of 3", "yes", "–", "–"])
        # cluster.yml leaves the running ConfigMap alone without the tool: its last /configz line says so
        self.assertEqual(self.enough(text, "settings"), [
            "–; 2 of 2; 2 of 2", "no",
            "every kube-proxy runs the inventory's kube_proxy_* values afterwards (1 yes, 0 no): 0 against 1",
            "most nodes without a Ready kube-proxy at once: 0 against 1"])
        # a pod on an older write is not the inventory's either; the restart only the tool has leaves it unjudged
        self.assertEqual(self.enough(text, "upgrade"), [
            "–; 2 of 2; 2 of 2",
            "no", "every kube-proxy runs the inventory's kube_proxy_* values afterwards (1 yes, 0 no): 0 against 1; "
            "kube-proxy pods made per node (an upgrade needs one each): 2 against 1", "–"])
        # with nothing applied, nothing breaks: tool-free does better there
        self.assertEqual(self.enough(text, "breaking"), [
            "–; 2 of 2; 2 of 2", "yes", "–",
            "most nodes without a Ready kube-proxy at once: 0 against 1; "
            "nodes whose kube-proxy was replaced or restarted with the breaking value in the inventory: 0 against 1"])
        self.assertEqual(self.enough(text, "breaking-upgrade"), [
            "–; 2 of 2; 2 of 2", "no",
            "nodes whose kube-proxy was replaced or restarted with the breaking value in the inventory: 3 against 1; "
            "the kube-proxy stopped mid-rollout served again (1 yes, 0 no): 0 against 1; "
            "a kube-proxy pod started after the step runs (1 yes, 0 it exits): 0 against 1", "–"])
        self.assertEqual(self.enough(text, "limit"), ["–; –; 0 of 1", "not measured in both", "–", "–"])
        self.assertIsNone(self.enough(text, "hosts"))

    def test_a_figure_one_mode_lacks_leaves_the_step_unjudged(self):
        w = {"nodes": 3, "new": 3, "restarts": 0, "max_unavailable": 1, "touched": 3}
        tool = step(10, watch=w)
        tool["figures"] = ["a kube-proxy stopped mid-rollout (as a node reboot): w2's kube-proxy stopped once the "
                           "rollout began, as a reboot would: running again after 7 s in a pod the rollout made "
                           "meanwhile, image kube-proxy:v1.36.3, ConfigMap kube-proxy-45bb4e0da8, running mode=iptables"]
        not_made = step(10, watch=w)
        not_made["figures"] = ["a kube-proxy stopped mid-rollout (as a node reboot): not made: no kube-proxy pod replaced"]
        self.add("r.json", summary("2026-12-01T00:00:00Z", "c", True, {
            "toolfree": {"upgrade": not_made}, "tool": {"upgrade": tool}}))
        self.assertEqual(self.enough(self.page(), "upgrade, with the settings change (no settings step before it)")[1],
                         "not judged: the kube-proxy stopped mid-rollout served again (1 yes, 0 no) (the tool only)")

    def test_even_median(self):
        for i, seconds in enumerate([10, 11, 20, 40]):
            self.add(f"r{i}.json", summary(f"2026-12-0{i + 1}T00:00:00Z", "c", True,
                                          {"tool": {"rerun": step(seconds)}}))
        self.assertEqual(self.row(self.page(), "rerun", "wall time, s"), ["15.5 (10–40, n=4)"])

    def test_verify(self):
        out = os.path.join(self.dir, "evidence.md")
        evidence.main(["page", self.runs, out])
        self.assertEqual(evidence.verify(self.runs, out), 0)
        self.add("r.json", summary("2026-12-01T00:00:00Z", "c", True, {"tool": {"rerun": step(10)}}))
        with contextlib.redirect_stderr(io.StringIO()) as err:
            self.assertEqual(evidence.verify(self.runs, out), 1)
        self.assertIn("+| [r](runs/r.json) |", err.getvalue())

    def test_other_schema(self):
        doc = summary("2026-12-01T00:00:00Z", "c", True, {})
        doc["schema"] = 2
        self.add("r.json", doc)
        with self.assertRaisesRegex(ValueError, "r.json: schema 2"):
            self.page()


if __name__ == "__main__":
    unittest.main()
