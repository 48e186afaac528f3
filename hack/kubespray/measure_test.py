"""Tests of measure.py's figures (run by make test: python -m unittest)."""
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import measure  # noqa: E402  pylint: disable=wrong-import-position


def pod(uid, node, is_ready=True, revision="a", deleting=False, owner="kube-proxy"):
    meta = {
        "uid": uid,
        "labels": {"controller-revision-hash": revision},
        "ownerReferences": [{"kind": "DaemonSet", "name": owner, "controller": True}],
    }
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {
        "metadata": meta,
        "spec": {"nodeName": node},
        "status": {"conditions": [{"type": "Ready", "status": "True" if is_ready else "False"}]},
    }


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
            {"nodes": 3, "pods": 4, "new": 1, "max_per_node": 2, "max_unavailable": 1, "revisions": 1, "gaps": 0},
        )

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


if __name__ == "__main__":
    unittest.main()
