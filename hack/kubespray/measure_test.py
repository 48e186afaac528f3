"""Tests of measure.py's figures (run by make test: python -m unittest)."""
import contextlib
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import measure  # noqa: E402  pylint: disable=wrong-import-position


def pod(uid, node, is_ready=True, revision="a", deleting=False, owner="kube-proxy", image="reg/kube-proxy:v1.34.3",
        restarts=0):
    meta = {
        "uid": uid,
        "labels": {"controller-revision-hash": revision},
        "ownerReferences": [{"kind": "DaemonSet", "name": owner, "controller": True}],
    }
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {
        "metadata": meta,
        "spec": {"nodeName": node, "containers": [{"name": "kube-proxy", "image": image}]},
        "status": {
            "conditions": [{"type": "Ready", "status": "True" if is_ready else "False"}],
            "containerStatuses": [{"name": "kube-proxy", "restartCount": restarts}],
        },
    }


def apiserver(node, version):
    # a mirror pod: owned by its Node, labelled by kubeadm
    return {
        "metadata": {
            "uid": "api-" + node + "-" + version,
            "labels": {"component": "kube-apiserver", "tier": "control-plane"},
            "ownerReferences": [{"kind": "Node", "name": node, "controller": True}],
        },
        "spec": {"nodeName": node, "containers": [{"name": "kube-apiserver", "image": "reg/kube-apiserver:" + version}]},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]},
    }


def replace(old, node, new, version="v1.34.4", revision="b"):
    """The events of one pod replaced by a new one on the same node: the old
    one deleted, the new one created, then Ready."""
    image = "reg/kube-proxy:" + version
    return [
        ev("MODIFIED", pod(old, node, deleting=True)),
        ev("DELETED", pod(old, node, deleting=True)),
        ev("ADDED", pod(new, node, is_ready=False, revision=revision, image=image)),
        ev("MODIFIED", pod(new, node, revision=revision, image=image)),
    ]


def ev(kind, obj=None):
    return {"type": kind} if obj is None else {"type": kind, "object": obj}


def listed(*pods):
    return [ev("ADDED", p) for p in pods]


THREE = (pod("u1", "n1"), pod("u2", "n2"), pod("u3", "n3"))


class WatchFigures(unittest.TestCase):
    def test_one_pod_replaced(self):
        events = listed(*THREE) + [
            ev("MODIFIED", pod("u1", "n1", deleting=True)),
            ev("DELETED", pod("u1", "n1", deleting=True)),
            ev("ADDED", pod("v1", "n1", is_ready=False, revision="b")),
            ev("MODIFIED", pod("v1", "n1", revision="b")),
        ]
        got = measure.watch_figures(events)
        self.assertEqual(
            got,
            {"nodes": 3, "pods": 4, "new": 1, "max_per_node": 2, "max_unavailable": 1, "revisions": 1, "gaps": 0,
             "restarts": 0, "per_node": "n1 1 new 0 restarts; n2 0 new 0 restarts; n3 0 new 0 restarts",
             "touched": 1, "touched_nodes": "n1"},
        )

    def test_a_canary_that_crash_loops_and_is_rolled_back(self):
        # the breaking step, patched: n2's pod is replaced by one of the new
        # template that crash-loops, then by one of the old template again
        events = listed(*THREE) + replace("u2", "n2", "v2") + [
            ev("MODIFIED", pod("v2", "n2", is_ready=False, revision="b", restarts=1)),
            ev("MODIFIED", pod("v2", "n2", is_ready=False, revision="b", restarts=2)),
        ] + replace("v2", "n2", "w2", version="v1.34.3", revision="a")
        got = measure.watch_figures(events)
        self.assertEqual((got["new"], got["max_per_node"], got["max_unavailable"], got["restarts"]), (2, 3, 1, 2))
        self.assertEqual(got["per_node"], "n1 0 new 0 restarts; n2 2 new 2 restarts; n3 0 new 0 restarts")
        self.assertEqual((got["touched"], got["touched_nodes"]), (1, "n2"))

    def test_a_relist_ended_by_an_event_drops_the_pods_it_lacks(self):
        # u2 and u3 went while the watch was down; the new list has u1 only.
        events = listed(*THREE) + [ev("RELIST")] + listed(THREE[0]) + [ev("MODIFIED", THREE[0])]
        got = measure.watch_figures(events)
        self.assertEqual((got["max_unavailable"], got["gaps"]), (2, 1))

    def test_a_stream_that_ends_inside_a_relist_drops_the_pods_it_lacks(self):
        events = listed(*THREE) + [ev("RELIST")] + listed(*THREE[:2])
        got = measure.watch_figures(events)
        self.assertEqual((got["max_unavailable"], got["gaps"]), (1, 1))

    def test_two_relists_in_a_row(self):
        # The first relist's list (u1, u2) is complete when the second begins.
        events = listed(*THREE) + [ev("RELIST")] + listed(*THREE[:2]) + [ev("RELIST")] + listed(*THREE[:2])
        got = measure.watch_figures(events)
        self.assertEqual((got["max_unavailable"], got["gaps"]), (1, 2))

    def test_a_pod_being_deleted_is_not_ready(self):
        events = listed(*THREE) + [ev("MODIFIED", pod("u3", "n3", deleting=True))]
        self.assertEqual(measure.watch_figures(events)["max_unavailable"], 1)

    def test_a_pod_the_daemonset_does_not_control_is_not_counted(self):
        # a pod someone made with kube-proxy's label, on a fourth node, never Ready
        events = listed(*THREE) + [ev("ADDED", pod("x1", "n4", is_ready=False, owner="debug"))]
        got = measure.watch_figures(events)
        self.assertEqual((got["nodes"], got["pods"], got["max_unavailable"]), (3, 3, 0))

    def test_restarts_in_place_are_counted(self):
        # no pod replaced, but u2's container restarted twice during the step
        events = listed(pod("u1", "n1"), pod("u2", "n2", restarts=1), pod("u3", "n3")) + [
            ev("MODIFIED", pod("u2", "n2", is_ready=False, restarts=2)),
            ev("MODIFIED", pod("u2", "n2", restarts=3)),
        ]
        got = measure.watch_figures(events)
        self.assertEqual((got["new"], got["restarts"]), (0, 2))
        self.assertEqual((got["touched"], got["touched_nodes"]), (1, "n2"), "a restart in place touches its node")
        self.assertNotIn("canary_first", got, "no kube-apiserver in the stream: no upgrade figures")

    def test_a_pod_stopped_on_purpose_is_excused_and_counted_apart(self):
        # n3's container stopped mid-rollout (restart_mid) while n1's pod is
        # replaced: its restart and its minute without Ready are the tier's,
        # not the rollout's; once the rollout deletes it, it counts again
        stopped = [ev("MODIFIED", pod("u3", "n3", is_ready=False, restarts=1))]
        rolled = listed(*THREE) + [ev("MODIFIED", pod("u1", "n1", deleting=True))] + stopped + [
            ev("DELETED", pod("u1", "n1", deleting=True)),
            ev("ADDED", pod("v1", "n1", is_ready=False, revision="b")),
            ev("MODIFIED", pod("u3", "n3", restarts=1)),
            ev("MODIFIED", pod("v1", "n1", revision="b")),
        ]
        got = measure.watch_figures(rolled, {"u3"})
        self.assertEqual((got["max_unavailable"], got["max_unavailable_all"]), (1, 2))
        self.assertEqual((got["restarts"], got["excused_restarts"]), (0, 1))
        self.assertEqual((got["touched"], got["touched_nodes"]), (1, "n1"))
        self.assertEqual(got["per_node"], "n1 1 new 0 restarts; n2 0 new 0 restarts; n3 0 new 0 restarts")
        # not excused: the same stream counts it as any restart
        plain = measure.watch_figures(rolled)
        self.assertEqual((plain["max_unavailable"], plain["restarts"], plain["touched"]), (2, 1, 2))
        self.assertNotIn("max_unavailable_all", plain)
        # the excused pod, Ready again, deleted by the rollout is a node
        # without kube-proxy
        deleted = listed(*THREE) + stopped + [ev("MODIFIED", pod("u3", "n3", restarts=1)),
                                              ev("MODIFIED", pod("u3", "n3", deleting=True, restarts=1)),
                                              ev("MODIFIED", pod("u2", "n2", deleting=True))]
        self.assertEqual(measure.watch_figures(deleted, {"u3"})["max_unavailable"], 2)

    def test_an_excused_pod_replaced_while_not_ready_excuses_its_node_until_a_pod_there_is_ready(self):
        # 2026-11-30's tool-free upgrade: n1's pod replaced by the rollout,
        # n3's stopped (restart_mid); the DaemonSet controller deleted n3's at
        # once for being unavailable (outside maxUnavailable), and n3 had no
        # Ready kube-proxy until its new pod was Ready: that is the stop's
        stopped = listed(*THREE) + [
            ev("MODIFIED", pod("u1", "n1", deleting=True)),
            ev("DELETED", pod("u1", "n1", deleting=True)),
            ev("ADDED", pod("v1", "n1", is_ready=False, revision="b")),
            ev("MODIFIED", pod("u3", "n3", is_ready=False, restarts=1)),
            ev("MODIFIED", pod("u3", "n3", is_ready=False, deleting=True, restarts=1)),
            ev("DELETED", pod("u3", "n3", is_ready=False, deleting=True, restarts=1)),
            ev("ADDED", pod("v3", "n3", is_ready=False, revision="b")),
        ]
        got = measure.watch_figures(stopped, {"u3"})
        self.assertEqual((got["max_unavailable"], got["max_unavailable_all"]), (1, 2))
        # once a pod there is Ready, n3 counts again
        later = stopped + [ev("MODIFIED", pod("v3", "n3", revision="b")),
                           ev("MODIFIED", pod("v3", "n3", is_ready=False, revision="b"))]
        self.assertEqual(measure.watch_figures(later, {"u3"})["max_unavailable"], 2)


class NewPod(unittest.TestCase):
    BEFORE = {"u1", "u2", "u3"}

    def test_the_listed_pods_are_not_new(self):
        self.assertFalse(measure.new_pod(listed(*THREE) + [ev("MODIFIED", pod("u1", "n1", deleting=True))], self.BEFORE))

    def test_a_pod_of_the_daemonset_not_listed_before_is(self):
        self.assertTrue(measure.new_pod(listed(*THREE) + replace("u1", "n1", "v1"), self.BEFORE))

    def test_a_pod_of_another_owner_is_not(self):
        self.assertFalse(measure.new_pod(listed(*THREE) + [ev("ADDED", pod("x1", "n4", owner="debug"))], self.BEFORE))

    def test_a_stream_being_written_leaves_its_last_object_out(self):
        whole = "".join(json.dumps(e) + "\n" for e in listed(*THREE))
        cut = json.dumps(ev("ADDED", pod("v1", "n1")))[:40]
        events, rest = measure.json_prefix(whole + cut)
        self.assertEqual((len(events), rest), (3, cut))
        with self.assertRaises(json.JSONDecodeError):
            measure.json_stream(whole + cut)

    def test_follows_the_file_until_a_new_pod_or_the_stop_file(self):
        tmp = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, tmp)
        path, stop = os.path.join(tmp, "watch.json"), os.path.join(tmp, "stop")
        new = json.dumps(ev("ADDED", pod("v1", "n1")))
        with open(path, "w", encoding="utf-8") as f:
            # the listed pods, and the new pod's event cut short: not yet
            f.write("".join(json.dumps(e) + "\n" for e in listed(*THREE)) + new[:40])
        with open(stop, "w", encoding="utf-8"):
            pass
        self.assertFalse(measure.follow_new_pod(path, self.BEFORE, stop, interval=0))
        with open(path, "a", encoding="utf-8") as f:
            f.write(new[40:] + "\n")
        self.assertTrue(measure.follow_new_pod(path, self.BEFORE, stop, interval=0))

    def test_a_character_cut_short_waits_for_its_end(self):
        tmp = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, tmp)
        path, stop = os.path.join(tmp, "watch.json"), os.path.join(tmp, "stop")
        data = (json.dumps(ev("ADDED", pod("v1", "n1")), ensure_ascii=False)[:-1] + ', "note": "µ"}\n').encode()
        cut = data.index("µ".encode()) + 1  # inside the two bytes of µ
        with open(path, "wb") as f:
            f.write(data[:cut])
        with open(stop, "w", encoding="utf-8"):
            pass
        self.assertFalse(measure.follow_new_pod(path, self.BEFORE, stop, interval=0))
        with open(path, "ab") as f:
            f.write(data[cut:])
        self.assertTrue(measure.follow_new_pod(path, self.BEFORE, stop, interval=0))


CONTROL_PLANES = (apiserver("cp1", "v1.34.3"), apiserver("cp2", "v1.34.3"), apiserver("cp3", "v1.34.3"))


def upgraded(node):
    # the kubelet restarts the static pod: its mirror is deleted, then made anew
    return [ev("DELETED", apiserver(node, "v1.34.3")), ev("ADDED", apiserver(node, "v1.34.4"))]


class UpgradeFigures(unittest.TestCase):
    def test_rolled_once_canary_first_after_every_control_plane(self):
        events = (listed(*CONTROL_PLANES, *THREE) + upgraded("cp1") + upgraded("cp2") + upgraded("cp3")
                  + replace("u2", "n2", "v2") + replace("u1", "n1", "v1") + replace("u3", "n3", "v3"))
        got = measure.watch_figures(events)
        self.assertEqual((got["new"], got["max_per_node"], got["max_unavailable"]), (3, 2, 1))
        self.assertEqual((got["canary_first"], got["canary_node"]), ("yes", "n2"))
        self.assertEqual((got["skew"], got["skew_detail"]), (0, ""))

    def test_kube_proxy_newer_than_an_api_server_is_skew(self):
        # kubespray's own write: right after the first control plane's upgrade
        events = (listed(*CONTROL_PLANES, *THREE) + upgraded("cp1")
                  + replace("u1", "n1", "v1") + upgraded("cp2") + upgraded("cp3"))
        got = measure.watch_figures(events)
        self.assertEqual(got["skew"], 1)
        self.assertIn("cp2 reg/kube-apiserver:v1.34.3", got["skew_detail"])
        self.assertIn("cp3 reg/kube-apiserver:v1.34.3", got["skew_detail"])

    def test_an_api_server_whose_mirror_pod_is_gone_keeps_its_last_image(self):
        events = listed(*CONTROL_PLANES, *THREE) + [ev("DELETED", CONTROL_PLANES[1])] + replace("u1", "n1", "v1")
        self.assertEqual(measure.watch_figures(events)["skew"], 1)

    def test_all_at_once_is_no_canary(self):
        # the DaemonSet controller or a forced delete: a second pod is created
        # before the first new one is Ready
        events = listed(*CONTROL_PLANES, *THREE) + [
            ev("DELETED", THREE[0]), ev("DELETED", THREE[1]),
            ev("ADDED", pod("v1", "n1", is_ready=False, revision="b")),
            ev("ADDED", pod("v2", "n2", is_ready=False, revision="b")),
            ev("MODIFIED", pod("v1", "n1", revision="b")),
            ev("MODIFIED", pod("v2", "n2", revision="b")),
        ]
        got = measure.watch_figures(events)
        self.assertEqual((got["canary_first"], got["canary_node"], got["max_unavailable"]), ("no", "n1", 2))

    def test_no_pod_created(self):
        got = measure.watch_figures(listed(*CONTROL_PLANES, *THREE))
        self.assertEqual((got["canary_first"], got["canary_node"], got["skew"]), ("none", "", 0))


class Writers(unittest.TestCase):
    def test_the_writes_since_the_step_began(self):
        ds = {"kind": "DaemonSet", "metadata": {"name": "kube-proxy", "managedFields": [
            {"manager": "kubeadm", "operation": "Update", "time": "2026-11-27T10:00:00Z"},
            {"manager": "kube-proxy-sync", "operation": "Update", "time": "2026-11-27T12:00:05Z"},
            {"manager": "kube-controller-manager", "operation": "Update", "time": "2026-11-27T12:01:00Z",
             "subresource": "status"},
        ]}}
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
            json.dump(ds, f)
        self.addCleanup(os.unlink, f.name)
        self.assertEqual(measure.writers("2026-11-27T12:00:00Z", [f.name]), [
            "DaemonSet/kube-proxy kube-proxy-sync Update 2026-11-27T12:00:05Z",
            "DaemonSet/kube-proxy kube-controller-manager Update 2026-11-27T12:01:00Z",
        ])

    def test_an_object_without_managed_fields_is_an_error_not_no_writer(self):
        # what kubectl get -o json prints without --show-managed-fields
        ds = {"kind": "DaemonSet", "metadata": {"name": "kube-proxy", "generation": 2}}
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
            json.dump(ds, f)
        self.addCleanup(os.unlink, f.name)
        with self.assertRaises(SystemExit) as ended:
            measure.writers("2026-11-27T12:00:00Z", [f.name])
        self.assertIn("no managedFields", str(ended.exception.code))

    def test_the_audit_outcomes_since_the_step_began(self):
        records = [
            {"time": "2026-11-27T11:59:00.5+00:00", "phase": "outcome", "outcome": "succeeded", "restart": True},
            {"time": "2026-11-27T12:00:01.1+00:00", "phase": "intent", "restart": True},
            {"time": "2026-11-27T13:00:09.123456789+01:00", "phase": "outcome", "outcome": "succeeded", "restart": True,
             "restart_reason": "image-changed", "image_before": "r/kube-proxy:v1.34.3", "image_after": "r/kube-proxy:v1.34.4",
             "rollout": {"strategy": "canary", "canary_nodes": ["n2"]}},
        ]
        with tempfile.NamedTemporaryFile("w", suffix=".log", delete=False) as f:
            f.write("\n".join(json.dumps(r) for r in records) + "\n")
        self.addCleanup(os.unlink, f.name)
        self.assertEqual(measure.audit("2026-11-27T12:00:00Z", f.name), [
            "outcome=succeeded restart=yes reason=image-changed image=r/kube-proxy:v1.34.3->r/kube-proxy:v1.34.4 "
            "strategy=canary canary=n2",
        ])

    def test_versions(self):
        self.assertEqual(measure.version("reg:5000/kube-proxy:v1.34.4"), (1, 34, 4))
        self.assertEqual(measure.version("reg:5000/kube-proxy:v1.34.4@sha256:ab"), (1, 34, 4))
        self.assertIsNone(measure.version("reg:5000/kube-proxy:latest"))
        self.assertIsNone(measure.version("reg:5000/kube-proxy"))


class TrafficFigures(unittest.TestCase):
    def test_failed_tries_and_the_longest_gap_without_a_success(self):
        lines = [
            "1000 cluster 404", "1100 nodeport 404",
            "1250 cluster 000", "1300 nodeport 404",
            "2250 cluster 000", "2300 nodeport 404",
            "2500 cluster 404", "2550 nodeport 404",
            "2600 cluster 404", "2650 nodeport 000",
            "2700 cluster",  # cut off by the stop
        ]
        figures = measure.traffic_figures(lines)
        self.assertEqual(figures["cluster"], {"tries": 5, "failed": 2, "longest_gap": 1.5})
        self.assertEqual(figures["nodeport"], {"tries": 5, "failed": 1, "longest_gap": 1.0})

    def test_never_a_success_is_the_whole_step(self):
        figures = measure.traffic_figures(["1000 cluster 000", "3000 cluster 000"])
        self.assertEqual(figures["cluster"], {"tries": 2, "failed": 2, "longest_gap": 2.0})

    def test_one_line_per_host_and_target(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "cp1.log")
            with open(path, "w", encoding="utf-8") as f:
                f.write("1000 nodeport 200\n1000 cluster 200\n1400 cluster 200\n")
            self.assertEqual(measure.traffic(["cp1=" + path]), [
                "cp1 cluster tries=2 failed=0 longest_gap=0.40",
                "cp1 nodeport tries=1 failed=0 longest_gap=0.00",
            ])

    def test_udp_is_a_target_of_its_own(self):
        # the prober's round: cluster, nodeport, then udp; UDP lost while
        # TCP answers shows on udp alone
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "w1.log")
            with open(path, "w", encoding="utf-8") as f:
                f.write("1000 cluster 404\n1010 nodeport 404\n1020 udp 200\n"
                        "1300 cluster 404\n1310 nodeport 404\n2310 udp 000\n"
                        "2600 cluster 404\n2610 nodeport 404\n2620 udp 200\n")
            self.assertEqual(measure.traffic(["w1=" + path]), [
                "w1 cluster tries=3 failed=0 longest_gap=1.30",
                "w1 nodeport tries=3 failed=0 longest_gap=1.30",
                "w1 udp tries=3 failed=1 longest_gap=1.60",
            ])

    def test_dns_answers_only_with_the_service_address(self):
        # the dns target: 200 an answer holding the Service's ClusterIP, 502
        # an answer without it (NXDOMAIN, another address), 000 none in 1 s;
        # UDP as udp is: only 200 answers
        lines = ["1000 dns 200", "1300 dns 502", "1600 dns 000", "1900 dns 200",
                 "2200 dns 502", "2500 udp 200", "2800 udp 502"]
        figures = measure.traffic_figures(lines)
        self.assertEqual(figures["dns"], {"tries": 5, "failed": 3, "longest_gap": 0.9})
        self.assertEqual(figures["udp"], {"tries": 2, "failed": 1, "longest_gap": 0.3})

    def test_tcp_answers_with_any_status(self):
        # an HTTP status, 502 too, is an answer through the rules; 000 none
        figures = measure.traffic_figures(["1000 cluster 502", "1300 cluster 000", "1600 cluster 404"])
        self.assertEqual(figures["cluster"], {"tries": 3, "failed": 1, "longest_gap": 0.6})




class Configz(unittest.TestCase):
    """measure.py configz against files, as run.sh calls it."""

    def run_configz(self, rendered, configmap, running, *settings):
        d = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, d)
        paths = {}
        for name, text in (("kubeadm-config.yaml", rendered), ("config.conf", configmap), ("n1.json", running)):
            paths[name] = os.path.join(d, name)
            with open(paths[name], "w", encoding="utf-8") as f:
                f.write(text)
        out = io.StringIO()
        with contextlib.redirect_stdout(out), self.assertRaises(SystemExit) as ended:
            measure.configz([paths["kubeadm-config.yaml"], paths["config.conf"], *settings, "--", "n1=" + paths["n1.json"]])
        return ended.exception.code, out.getvalue()

    RENDERED = ("kind: KubeProxyConfiguration\nmode: iptables\nclusterCIDR: 10.233.64.0/18\n"
                "iptables: {minSyncPeriod: 2s}\nconntrack: {maxPerCore: %d}\n")
    CONFIGMAP = "mode: iptables\nclusterCIDR: 10.233.64.0/18\niptables: {minSyncPeriod: 2s}\nconntrack: {maxPerCore: %d}\n"
    # the shape of kube-proxy 1.34's /configz on the tier's hosts (2026-11-28)
    RUNNING = ('{"kubeproxy.config.k8s.io": {"Mode": "iptables", "DetectLocal": {"ClusterCIDRs": ["10.233.64.0/18"]}, '
               '"MinSyncPeriod": "2s", "Linux": {"Conntrack": {"MaxPerCore": %d, "Min": 131072}}}}')

    def test_what_one_kube_proxy_runs(self):
        self.assertEqual(measure.running_fields(json.loads(self.RUNNING % 32768)),
                         "mode=iptables clusterCIDR=10.233.64.0/18 iptables.minSyncPeriod=2s conntrack.maxPerCore=32768")
        # an older kube-proxy serves the versioned config
        versioned = {"kubeproxy.config.k8s.io": {"mode": "nftables", "clusterCIDR": "10.0.0.0/8",
                                                 "iptables": {"minSyncPeriod": "1s"}, "conntrack": {"maxPerCore": 0}}}
        self.assertEqual(measure.running_fields(versioned),
                         "mode=nftables clusterCIDR=10.0.0.0/8 iptables.minSyncPeriod=1s conntrack.maxPerCore=0")

    def test_the_same_config_every_field(self):
        before = json.loads(self.RUNNING % 0)["kubeproxy.config.k8s.io"]
        self.assertEqual(measure.config_differences(before, json.loads(self.RUNNING % 0)["kubeproxy.config.k8s.io"]), [])
        after = json.loads(self.RUNNING % 0)["kubeproxy.config.k8s.io"]
        after["Linux"]["Conntrack"]["Min"] = 0
        del after["MinSyncPeriod"]
        after["Extra"] = {"x": 1}
        # a field running_fields does not show counts too
        self.assertEqual(measure.running_fields({"kubeproxy.config.k8s.io": after}).split()[0], "mode=iptables")
        self.assertEqual(measure.config_differences(before, after), ["Extra", "Linux.Conntrack.Min", "MinSyncPeriod"])
        self.assertEqual(measure.config_differences(before, [before]), ["(the whole config)"])

    # the shapes of the /configz read before a kube-proxy v1.35.4's stop and
    # after its restart on the tier's hosts (2026-11-30; the second answered
    # by a v1.36.3 pod made on that host meanwhile), cut to some fields, the
    # values made equal
    INTERNAL = {"Mode": "iptables", "MinSyncPeriod": "1s", "SyncPeriod": "30s",
                "DetectLocal": {"BridgeInterface": "", "ClusterCIDRs": ["10.233.64.0/18"]},
                "Linux": {"Conntrack": {"MaxPerCore": 0, "Min": 131072}, "MasqueradeAll": False},
                "ClientConnection": {"Kubeconfig": "/var/lib/kube-proxy/kubeconfig.conf", "QPS": 5}}
    VERSIONED = {"apiVersion": "kubeproxy.config.k8s.io/v1alpha1", "kind": "KubeProxyConfiguration", "mode": "iptables",
                 "clusterCIDR": "10.233.64.0/18", "detectLocal": {"bridgeInterface": ""},
                 "iptables": {"masqueradeAll": False, "syncPeriod": "30s", "minSyncPeriod": "1s"},
                 "nftables": {"minSyncPeriod": "0s"}, "conntrack": {"maxPerCore": 0, "min": 131072},
                 "clientConnection": {"kubeconfig": "/var/lib/kube-proxy/kubeconfig.conf", "qps": 5}}

    def test_the_same_config_in_one_form(self):
        self.assertEqual(measure.same_config(self.INTERNAL, json.loads(json.dumps(self.INTERNAL))), (True, "same"))
        self.assertEqual(measure.same_config(self.VERSIONED, self.VERSIONED), (True, "same"))
        # every field, the versioned's apiVersion too
        other = dict(self.VERSIONED, apiVersion="v2")
        self.assertEqual(measure.same_config(self.VERSIONED, other), (False, "differs: apiVersion"))
        changed = json.loads(json.dumps(self.INTERNAL))
        changed["MinSyncPeriod"] = "2s"
        changed["Linux"]["Conntrack"]["MaxPerCore"] = 32768
        self.assertEqual(measure.same_config(self.INTERNAL, changed),
                         (False, "differs: Linux.Conntrack.MaxPerCore, MinSyncPeriod"))

    def test_two_forms_are_two_versions_not_compared(self):
        # the config in both is the same; the forms say two binaries answered
        same, text = measure.same_config(self.INTERNAL, self.VERSIONED)
        self.assertIsNone(same)
        self.assertTrue(text.startswith("not compared: another kube-proxy version answered (/configz in the internal "
                                        "form before the stop, the versioned after;"), text)
        same, text = measure.same_config(self.VERSIONED, self.INTERNAL)
        self.assertIsNone(same)
        self.assertIn("in the versioned form before the stop, the internal after;", text)

    def test_a_form_the_container_image_does_not_serve_is_not_compared(self):
        # one form, the same config, but not the form the container's version serves
        same, text = measure.same_config(self.VERSIONED, self.VERSIONED, "registry:5000/kube-proxy:v1.35.4")
        self.assertIsNone(same)
        self.assertIn("(/configz in the versioned form before the stop, which kube-proxy:v1.35.4 does not serve;", text)
        later = dict(self.INTERNAL, Mode="ipvs")
        same, text = measure.same_config(self.INTERNAL, later, "registry:5000/kube-proxy:v1.34.4")
        self.assertEqual((same, text), (False, "differs: Mode"))
        same, text = measure.same_config(self.INTERNAL, self.INTERNAL, "registry:5000/kube-proxy:v1.36.3")
        self.assertIn("(/configz in the internal form before the stop, which kube-proxy:v1.36.3 does not serve;", text)
        self.assertEqual(measure.same_config(self.VERSIONED, self.VERSIONED, "kube-proxy:v1.36.3"), (True, "same"))
        # a tag that is no version tells nothing
        self.assertEqual(measure.same_config(self.VERSIONED, self.VERSIONED, "kube-proxy:latest"), (True, "same"))

    def test_same_config_on_the_command_line(self):
        # run.sh reads the printed text and the exit code
        d = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, d)
        paths = {}
        for name, config in (("internal", self.INTERNAL), ("versioned", self.VERSIONED),
                             ("other", dict(self.VERSIONED, mode="nftables"))):
            paths[name] = os.path.join(d, name + ".json")
            with open(paths[name], "w", encoding="utf-8") as f:
                json.dump({"kubeproxy.config.k8s.io": config}, f)

        def run(before, after):
            out = subprocess.run([sys.executable, measure.__file__, "same-config", paths[before], paths[after]],
                                 capture_output=True, text=True, check=False)
            return out.returncode, out.stdout.split(" (")[0]

        self.assertEqual(run("internal", "internal"), (0, "same\n"))
        self.assertEqual(run("versioned", "other"), (1, "differs: mode\n"))
        self.assertEqual(run("internal", "versioned"), (3, "not compared: another kube-proxy version answered"))
        out = subprocess.run([sys.executable, measure.__file__, "same-config", paths["versioned"], paths["versioned"],
                              "registry:5000/kube-proxy:v1.35.4"], capture_output=True, text=True, check=False)
        self.assertEqual((out.returncode, out.stdout.split(" (")[0]), (3, "not compared: another kube-proxy version answered"))

    def test_a_breaking_setting_rolled_back_runs_the_configmap_not_kubespray(self):
        code, out = self.run_configz(self.RENDERED % 32768, self.CONFIGMAP % 0, self.RUNNING % 0,
                                     "stale=ok", "conntrack.maxPerCore=32768")
        self.assertEqual(code, 0, out)
        self.assertIn("n1 conntrack.maxPerCore: runs 0, ConfigMap 0, kubespray 32768: STALE (not kubespray's variable)", out)

    def test_a_pod_running_other_than_its_configmap_fails(self):
        code, out = self.run_configz(self.RENDERED % 0, self.CONFIGMAP % 0, self.RUNNING % 32768)
        self.assertEqual(code, 1, out)
        self.assertIn("n1 conntrack.maxPerCore: runs 32768, ConfigMap 0, kubespray 0: FAIL (not the ConfigMap's)", out)


SYNC = "Kube-proxy-sync | Sync kube-proxy's config and restart kube-proxy only if it changed"


def banner(title):
    return f"TASK [{title}] " + "*" * 20


class Task(unittest.TestCase):
    """The results of one task in an ansible-playbook log (the default
    callback, kubespray's profile_tasks timing lines in between)."""

    def test_ok_and_changed_per_run_of_the_task(self):
        log = [
            banner("kubernetes/control-plane : " + SYNC),
            "Sunday 29 November 2026  12:00:00 +0000 (0:00:01.000)       0:05:00.000 ****",
            "ok: [kps-ks-cp1]",
            banner("kubernetes/control-plane : Kube-proxy-sync | Show the result"),
            "ok: [kps-ks-cp1] => {",
            banner("kubernetes/control-plane : " + SYNC),
            "changed: [kps-ks-cp3 -> kps-ks-cp1]",
            "PLAY RECAP " + "*" * 20,
            "ok: [kps-ks-w1]",
        ]
        self.assertEqual(measure.task_results(log, SYNC), ["ok kps-ks-cp1", "changed kps-ks-cp3"])

    def test_shown_the_tools_message_and_its_diff(self):
        shown = {"msg": ["configmap kube-system/kube-proxy would change (config.conf:iptables.minSyncPeriod); "
                         "would restart daemonset kube-system/kube-proxy (config-changed)",
                         {"before": "iptables:\n  masqueradeAll: false\n  minSyncPeriod: 0s\nmode: iptables\n",
                          "after": "iptables:\n  masqueradeAll: false\n  minSyncPeriod: 2s\nmode: iptables\n",
                          "before_header": "configmap kube-system/kube-proxy (live)",
                          "after_header": "configmap kube-system/kube-proxy (desired)"}]}
        log = [banner("kubernetes/control-plane : " + SYNC), "changed: [kps-ks-cp1]",
               banner("kubernetes/control-plane : Kube-proxy-sync | Show the result"),
               "ok: [kps-ks-cp1] => {"] + json.dumps(shown, indent=4).splitlines()[1:] + [
               banner("kubernetes/control-plane : Kube-proxy-sync | Show the result"),
               'ok: [kps-ks-cp2] => {', '    "msg": "another host"', "}"]
        msg = measure.task_shown(log, "Kube-proxy-sync | Show the result")
        self.assertEqual(msg, shown["msg"])
        self.assertEqual(measure.shown_lines(msg), [shown["msg"][0], "-  minSyncPeriod: 0s", "+  minSyncPeriod: 2s"])
        # the task that ran is not the one shown, and one never run shows nothing
        self.assertIsNone(measure.task_shown(log, SYNC))
        self.assertIsNone(measure.task_shown(log, "Kube-proxy-sync | Show nothing"))
        self.assertEqual(measure.shown_lines("a one-line message"), ["a one-line message"])

    def test_a_failure_carries_the_tools_result_from_its_stdout(self):
        tool = {"changed": True, "failed": True, "rolled_back": True, "msg": "kube-proxy on kps-ks-w2 cannot run\nthe new config: rolled back"}
        result = {"changed": True, "cmd": ["/tmp/releases/kube-proxy-sync-1.0.0-amd64"], "rc": 1,
                  "msg": "non-zero return code", "stdout": json.dumps(tool)}
        log = [banner("kubernetes/control-plane : " + SYNC), "fatal: [kps-ks-cp1]: FAILED! => " + json.dumps(result)]
        self.assertEqual(measure.task_results(log, SYNC),
                         ["fatal kps-ks-cp1 rolled_back=true msg=kube-proxy on kps-ks-w2 cannot run the new config: rolled back"])

    def test_a_failure_without_the_tools_result(self):
        log = [banner(SYNC), 'fatal: [kps-ks-cp1]: FAILED! => {"msg": "The conditional check failed", "stdout": "panic"}']
        self.assertEqual(measure.task_results(log, SYNC), ["fatal kps-ks-cp1 msg=The conditional check failed"])

    def test_another_task_or_a_task_never_run_is_nothing(self):
        log = [banner("kubernetes/kubeadm : Wait for kube-proxy's rollout"), "ok: [kps-ks-cp1]",
               banner("x : Prefix " + SYNC), "ok: [kps-ks-cp2]"]
        self.assertEqual(measure.task_results(log, SYNC), [])



def kubeadm_addon(command=("/usr/local/bin/kube-proxy", "--config=/var/lib/kube-proxy/config.conf")):
    ds = {
        "apiVersion": "apps/v1", "kind": "DaemonSet",
        "metadata": {"name": "kube-proxy", "namespace": "kube-system"},
        "spec": {"template": {
            "metadata": {"labels": {"k8s-app": "kube-proxy"}},
            "spec": {
                "containers": [{"name": "kube-proxy", "image": "reg/kube-proxy:v1.35.4", "command": list(command),
                                "volumeMounts": [{"name": "kube-proxy", "mountPath": "/var/lib/kube-proxy"}]}],
                "volumes": [{"name": "kube-proxy", "configMap": {"name": "kube-proxy"}}],
                "tolerations": [{"operator": "Exists"}],
                "serviceAccountName": "kube-proxy",
            }}},
    }
    rb = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
          "metadata": {"name": "kube-proxy", "namespace": "kube-system"},
          "roleRef": {"kind": "Role", "name": "kube-proxy"},
          "subjects": [{"kind": "Group", "name": "system:bootstrappers:kubeadm:default-node-token"}]}
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "kube-proxy"}, "data": {"config.conf": "x"}}
    return [cm, ds, rb]


class AddonTest(unittest.TestCase):
    def live(self, edit=None):
        objs = json.loads(json.dumps(kubeadm_addon()[1:]))
        spec = objs[0]["spec"]["template"]["spec"]
        # what kube-proxy-sync and the API server add: a copy mounted, a
        # probe, defaults, an annotation
        spec["volumes"][0]["configMap"] = {"name": "kube-proxy-0123456789", "defaultMode": 420}
        spec["containers"][0]["readinessProbe"] = {"httpGet": {"path": "/livez", "port": 10256}}
        spec["containers"][0]["imagePullPolicy"] = "IfNotPresent"
        objs[0]["spec"]["template"]["metadata"]["annotations"] = {"kube-proxy-sync.io/config": "kube-proxy-0123456789"}
        objs[0]["spec"]["updateStrategy"] = {"type": "RollingUpdate"}
        if edit:
            edit(objs)
        return {"kind": "List", "items": objs}

    def test_in_place_with_what_others_add(self):
        lines, ok = measure.addon(kubeadm_addon(), self.live())
        self.assertTrue(ok, lines)
        self.assertEqual(lines, ["DaemonSet/kube-proxy ok", "RoleBinding/kube-proxy ok"])

    def test_an_older_template_differs(self):
        def older(objs):
            objs[0]["spec"]["template"]["spec"]["containers"][0]["image"] = "reg/kube-proxy:v1.34.4"
        lines, ok = measure.addon(kubeadm_addon(), self.live(older))
        self.assertFalse(ok)
        self.assertEqual(lines[0], 'DaemonSet/kube-proxy differs: spec.template.spec.containers[kube-proxy].image '
                                   'kubeadm="reg/kube-proxy:v1.35.4" live="reg/kube-proxy:v1.34.4"')

    def test_a_zero_value_the_api_server_leaves_out(self):
        # kubeadm's xtables-lock mount says readOnly: false; the API server
        # stores no false (omitempty): the same mount
        manifests = kubeadm_addon()
        mounts = manifests[1]["spec"]["template"]["spec"]["containers"][0]["volumeMounts"]
        mounts.append({"name": "xtables-lock", "mountPath": "/run/xtables.lock", "readOnly": False})

        def live_mount(objs):
            objs[0]["spec"]["template"]["spec"]["containers"][0]["volumeMounts"].append(
                {"name": "xtables-lock", "mountPath": "/run/xtables.lock"})
        lines, ok = measure.addon(manifests, self.live(live_mount))
        self.assertTrue(ok, lines)
        mounts[-1]["readOnly"] = True
        lines, ok = measure.addon(manifests, self.live(live_mount))
        self.assertFalse(ok)
        self.assertEqual(lines[0], "DaemonSet/kube-proxy differs: spec.template.spec.containers[kube-proxy]"
                                   ".volumeMounts[xtables-lock].readOnly kubeadm=true live=null")

    def test_a_new_flag_of_kubeadms_is_missed(self):
        lines, ok = measure.addon(kubeadm_addon(command=("/usr/local/bin/kube-proxy", "--config=/var/lib/kube-proxy/config.conf",
                                                         "--hostname-override=$(NODE_NAME)")), self.live())
        self.assertFalse(ok)
        self.assertIn("containers[kube-proxy].command", lines[0])

    def test_rbac_missing_or_changed(self):
        lines, ok = measure.addon(kubeadm_addon(), self.live(lambda objs: objs.pop()))
        self.assertFalse(ok)
        self.assertEqual(lines[1], "RoleBinding/kube-proxy missing")

        def other_group(objs):
            objs[1]["subjects"][0]["name"] = "system:nodes"
        lines, ok = measure.addon(kubeadm_addon(), self.live(other_group))
        self.assertFalse(ok)
        self.assertIn("RoleBinding/kube-proxy differs: subjects[system:bootstrappers:kubeadm:default-node-token]", lines[1])
        self.assertIn("live=null", lines[1])


if __name__ == "__main__":
    unittest.main()
