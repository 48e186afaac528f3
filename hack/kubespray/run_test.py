"""Tests of run.sh's restart_judged and coredns_pods, run in bash on the
functions as run.sh defines them (run by make test: python -m unittest)."""
import os
import re
import shlex
import subprocess
import tempfile
import unittest

RUN_SH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "run.sh")

# restart_mid's line, as run.sh writes it, up to what it ran
STOPPED = ("w2's kube-proxy stopped once the rollout began, as a reboot would: running again after 3 s in "
           "the same pod (one the step began with), image kube-proxy:v1.35.4, ConfigMap kube-proxy-45bb4e0da8")
IMMUTABLE = STOPPED + " (immutable), running mode=iptables conntrack.maxPerCore=0"


def function(name):
    """The text of run.sh's bash function NAME, up to its closing brace."""
    with open(RUN_SH, encoding="utf-8") as f:
        script = f.read()
    found = re.search(rf"^{name}\(\) {{\n.*?^}}\n", script, re.M | re.S)
    if not found:
        raise AssertionError(f"run.sh defines no function {name}")
    return found.group(0)


class RestartJudgedTest(unittest.TestCase):
    def judged(self, line):
        """restart_judged's exit code and output on a restart log whose last line is LINE."""
        with tempfile.TemporaryDirectory() as logs:
            with open(os.path.join(logs, "upgrade-tool.restart.log"), "w", encoding="utf-8") as f:
                f.write("an earlier line\n" + line + "\n")
            done = subprocess.run(
                ["bash", "-c", function("restart_judged") + 'restart_judged upgrade-tool'],
                env={"LOGS": logs, "PATH": os.environ["PATH"]}, capture_output=True, text=True, check=False)
        return done.returncode, done.stdout + done.stderr

    def assert_fails(self, line, why):
        """restart_judged fails the step on LINE, saying WHY."""
        rc, out = self.judged(line)
        self.assertEqual(rc, 1, out)
        self.assertIn(why, out)

    def test_back_in_its_old_pod_on_the_config_before_the_stop(self):
        self.assertEqual(self.judged(IMMUTABLE + " (as before the stop)"), (0, ""))

    def test_back_in_its_old_pod_on_another_config(self):
        self.assert_fails(IMMUTABLE + " (conntrack.maxPerCore: 0 before the stop, 32768 after)",
                          "not on the config it ran before the stop")

    def test_only_the_exact_words_pass(self):
        # a line that only begins like the pass is judged on what follows
        self.assert_fails(IMMUTABLE + " (as before the stop, but conntrack.maxPerCore: 0 before, 32768 after)",
                          "not on the config it ran before the stop")

    def test_back_in_its_old_pod_on_a_mutable_configmap(self):
        self.assert_fails(STOPPED + ", running mode=iptables (as before the stop)", "is not immutable")

    def test_what_it_ran_before_the_stop_unknown(self):
        self.assert_fails(IMMUTABLE + " (before the stop: unknown, its /configz did not answer in 10 s)", "is unknown")

    def test_another_kube_proxy_answered_is_only_recorded(self):
        for why in ("another kube-proxy container ran on the host by then (the pod replaced meanwhile), so the "
                    "/configz may be its",
                    "another kube-proxy version answered (the versioned form after the restart, which "
                    "kube-proxy:v1.35.4 does not serve)"):
            self.assertEqual(self.judged(IMMUTABLE + f" (not compared: {why})"), (0, ""), why)

    def test_no_configz_after_the_restart(self):
        self.assert_fails(STOPPED + " (immutable), running no /configz within 30 s (before the stop: mode=iptables)",
                          "served no /configz")

    def test_in_a_pod_the_rollout_made_is_only_recorded(self):
        line = IMMUTABLE.replace("the same pod (one the step began with)", "a pod the rollout made meanwhile")
        self.assertEqual(self.judged(line + " (conntrack.maxPerCore: 0 before the stop, 32768 after)"), (0, ""))

    def test_restart_not_made_or_not_run_again(self):
        self.assertEqual(self.judged("not made: no kube-proxy pod replaced"), (0, ""))
        self.assert_fails("w2's kube-proxy did not run again within 120 s", "did not run again")
        self.assert_fails("", "nothing recorded")


class CorednsPodsTest(unittest.TestCase):
    def pods(self, listed, rc=0, prefix=None):
        """coredns_pods' exit code and output when the control plane's kubectl prints LISTED and exits RC
        (KS_PREFIX unset unless PREFIX)."""
        stub = f"cp_ssh() {{ printf %s {shlex.quote(listed)}; return {rc}; }}\n"
        env = {"PATH": os.environ["PATH"]}
        if prefix:
            env["KS_PREFIX"] = prefix
        done = subprocess.run(
            ["bash", "-c", "set -euo pipefail\n" + stub + function("coredns_pods") + "coredns_pods"],
            env=env, capture_output=True, text=True, check=False)
        return done.returncode, done.stdout.strip()

    def test_sorted_one_line_without_the_default_host_prefix(self):
        self.assertEqual(self.pods("10.233.66.2 on kps-ks-w2\n10.233.65.2 on kps-ks-w1\n"),
                         (0, "10.233.65.2 on w1, 10.233.66.2 on w2"))

    def test_another_prefix(self):
        self.assertEqual(self.pods("10.233.65.9 on lab-cp1\n", prefix="lab"), (0, "10.233.65.9 on cp1"))

    def test_a_pod_without_an_address_or_a_node_says_so(self):
        self.assertEqual(self.pods(" on \n10.233.65.2 on kps-ks-w1\n on kps-ks-w2\n"),
                         (0, "(no IP) on (no node), (no IP) on w2, 10.233.65.2 on w1"))

    def test_the_control_plane_not_answering_is_a_failure(self):
        # the caller records "not read" on a failure, never an empty list as if there were no pods
        rc, _ = self.pods("", rc=124)
        self.assertNotEqual(rc, 0)


if __name__ == "__main__":
    unittest.main()
