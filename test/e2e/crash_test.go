//go:build e2e

package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kube-proxy-sync/kube-proxy-sync/internal/app"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/audit"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/kpsync"
	"github.com/kube-proxy-sync/kube-proxy-sync/test/e2e/cluster"
)

// minReadySeconds slows the rollout down (each new pod counts as available
// only after this long, and maxUnavailable is 1), so that "in the middle of
// the wait" is a real moment and not a few milliseconds on fake nodes.
const minReadySeconds = 3

// TestCrashSafety kills the binary with SIGKILL at each step boundary of a
// real change, then reruns it: the change must end with exactly one
// rollout, every node's pod replaced exactly once (none lost, none
// doubled), and the restart's intent on disk in the audit log before the
// restart. The config travels with the template: killed after it created
// the copy of the new config and before the restart, the run leaves the
// pods' config as it was (the template still mounts the ConfigMap, which
// is unwritten), and the rerun makes the change again onto that copy;
// killed after the restart, the rerun restarts nothing, and the ConfigMap
// kube-proxy (the record kubeadm reads) is written once no pod mounts it,
// by the rerun or, if the rollout was not over by then, by the next run.
func TestCrashSafety(t *testing.T) {
	c := cluster.Connect(t)
	bin := kubeProxySyncBinary(t)
	c.Reset(t)
	t.Cleanup(func() { c.Reset(t) })
	slowRollout(t, c)
	var summary []string
	t.Cleanup(func() { t.Logf("crash points:\n  %s", strings.Join(summary, "\n  ")) })

	// Every SIGKILL leaves the run's Lease behind: each rerun first waits
	// for it to expire (30s) and takes it over, which dominates this test's
	// time. So both starting states are tried only where they take
	// different paths: before the restart, a fresh DaemonSet has no stamp
	// to tell what its pods run.
	for n, tc := range []struct {
		step    string
		adopted bool
	}{
		{kpsync.StepConfigMapWritten, false},
		{kpsync.StepConfigMapWritten, true},
		{kpsync.StepDaemonSetPatched, true},
		{kpsync.StepWaiting, false},
		// the rollout is done, the record not written yet
		{kpsync.StepRecordWrite, true},
	} {
		step, adopted := tc.step, tc.adopted
		name := fmt.Sprintf("%s/%s", step, map[bool]string{false: "fresh", true: "adopted"}[adopted])
		t.Run(name, func(t *testing.T) {
			crashStart(t, c, adopted)
			before := c.PodUIDs(t)
			mountedBefore := cluster.MountedConfigMapName(c.DaemonSet(t))
			recordBefore := c.ConfigMap(t)
			history := watchPods(t, c)
			auditLog := filepath.Join(t.TempDir(), "audit.log")
			server := fmt.Sprintf("https://10.96.2.%d:6443", n+1)
			args := []string{"--kubeconfig", c.KubeconfigPath, "--server", server, "--probe-path", "none",
				"--audit-log", auditLog, "--output", "json", "--timeout", "2m"}

			killed := runPaused(t, bin, args, step, syscall.SIGKILL)
			assert.Equal(t, -1, killed.code, "killed by SIGKILL")
			cp := copyWith(t, c, server)
			require.NotNil(t, cp, "the copy of the new config was created before the kill")
			assert.Equal(t, recordBefore.ResourceVersion, c.ConfigMap(t).ResourceVersion, "the ConfigMap is not written before the rollout")
			records := readAudit(t, auditLog)
			switch step {
			case kpsync.StepConfigMapWritten:
				// the restart was not decided yet: the pods' config is as
				// it was, and no restart is owed for a change not made
				assert.Equal(t, mountedBefore, cluster.MountedConfigMapName(c.DaemonSet(t)), "the template still mounts what it did")
				assert.Equal(t, adopted, hashConsistent(t, c), "the stamp is as it was")
				cluster.AssertNoneReplaced(t, before, c.PodUIDs(t))
				assert.Equal(t, []string{"plan"}, phases(records, ""), "the plan is on disk before the first write; no restart intent yet")
			default:
				assert.Equal(t, cp.Name, cluster.MountedConfigMapName(c.DaemonSet(t)), "the restart PATCH points the template at the copy")
				assert.True(t, hashConsistent(t, c), "the restart PATCH carries the new hash")
				assert.Equal(t, []string{"plan", "intent"}, phases(records, ""), "the intent is on disk before the restart; the killed run wrote no outcome")
				assert.Equal(t, kpsync.ReasonConfigChanged, records[1].RestartReason)
			}

			rerun := runBinary(t, bin, args, nil)
			require.Equal(t, 0, rerun.code, "rerun: %s\n%s", rerun.stdout, rerun.stderr)
			var res result
			require.NoError(t, json.Unmarshal([]byte(rerun.stdout), &res), rerun.stdout)
			f := res.facts()
			if step == kpsync.StepConfigMapWritten {
				assert.True(t, f.Restarted, "the rerun makes the change")
				assert.Equal(t, kpsync.ReasonConfigChanged, f.RestartReason)
				assert.True(t, f.ConfigMapChanged)
				assert.Equal(t, cp.Name, f.ConfigMapName, "onto the copy the killed run created")
				assert.True(t, f.RecordChanged, "the rerun waited for its rollout, and wrote the ConfigMap then")
			} else {
				assert.False(t, f.Restarted, "the restart was already made: not twice")
				assert.False(t, f.ConfigMapChanged, "the copy was already made")
			}

			c.WaitRolloutComplete(t, 2*time.Minute)
			// a run after the rollout: it writes the ConfigMap if the rerun
			// came too early to (pods still mounted it), else nothing
			final := runSync(t, c, "--server", server, "--probe-path", "none")
			require.Equal(t, 0, final.Code, final.Msg+"\n"+final.Stderr)
			assert.False(t, final.Restarted)
			assert.True(t, f.RecordChanged != final.RecordChanged, "the ConfigMap written exactly once, by the rerun (%t) or the run after the rollout (%t)", f.RecordChanged, final.RecordChanged)
			perNode := history.Stop()
			after := c.PodUIDs(t)
			cluster.AssertAllReplaced(t, before, after)
			assert.Len(t, perNode, len(before))
			for node, uids := range perNode {
				assert.Equal(t, 2, uids, "node %s: its pod replaced exactly once (old and new UID)", node)
			}
			for node, name := range c.PodConfigMaps(t) {
				assert.Equal(t, cp.Name, name, "node %s: its pod reads the copy", node)
			}
			assert.True(t, hashConsistent(t, c), "nothing owed at the end")
			assertRecordFollows(t, c)

			records = readAudit(t, auditLog)
			intents := 0
			for _, r := range records {
				if r.Phase == "intent" {
					intents++
				}
			}
			assert.Equal(t, 1, intents, "one restart, one intent record: %+v", records)
			if step == kpsync.StepConfigMapWritten {
				assert.Equal(t, []string{"plan", "intent", "outcome"}, phases(records, res.facts().AuditID), "the rerun records its plan, then its intent before its outcome")
			}
			summary = append(summary, fmt.Sprintf("%-32s killed, rerun exit %d (restarted %t %s, record written %t), pods per node %v: converged",
				name, rerun.code, f.Restarted, f.RestartReason, f.RecordChanged, perNode))
		})
	}

	// SIGTERM in the middle of the wait: stop waiting, say what was done
	// in a failed JSON result, exit 1; a rerun finishes without another
	// restart, and the ConfigMap is written once no pod mounts it.
	t.Run("SIGTERM during-wait", func(t *testing.T) {
		crashStart(t, c, true)
		before := c.PodUIDs(t)
		recordBefore := c.ConfigMap(t)
		history := watchPods(t, c)
		auditLog := filepath.Join(t.TempDir(), "audit.log")
		server := "https://10.96.2.99:6443"
		args := []string{"--kubeconfig", c.KubeconfigPath, "--server", server, "--probe-path", "none",
			"--audit-log", auditLog, "--output", "json", "--timeout", "2m"}

		stopped := runPaused(t, bin, args, kpsync.StepWaiting, syscall.SIGTERM)
		assert.Equal(t, app.ExitFailed, stopped.code, "stderr: %s", stopped.stderr)
		var res result
		require.NoError(t, json.Unmarshal([]byte(stopped.stdout), &res), "stdout must be a valid JSON result: %q", stopped.stdout)
		assert.True(t, res.Failed)
		assert.NotEmpty(t, res.Msg)
		assert.True(t, res.facts().ConfigMapChanged, "the result says what was done: the config was changed")
		assert.True(t, res.facts().Restarted, "and the restart was made")
		assert.False(t, res.facts().RecordChanged, "the ConfigMap is not written while the rollout runs")
		cp := copyWith(t, c, server)
		require.NotNil(t, cp)
		assert.Equal(t, cp.Name, res.facts().ConfigMapName)
		assert.Equal(t, cp.Name, cluster.MountedConfigMapName(c.DaemonSet(t)))
		assert.Equal(t, recordBefore.ResourceVersion, c.ConfigMap(t).ResourceVersion)
		assert.Equal(t, []string{"plan", "intent", "outcome"}, phases(readAudit(t, auditLog), res.facts().AuditID), "an interrupted run records its outcome")

		rerun := runBinary(t, bin, args, nil)
		require.Equal(t, 0, rerun.code, "rerun: %s\n%s", rerun.stdout, rerun.stderr)
		var again result
		require.NoError(t, json.Unmarshal([]byte(rerun.stdout), &again), rerun.stdout)
		assert.False(t, again.facts().Restarted, "no second restart")

		c.WaitRolloutComplete(t, 2*time.Minute)
		final := runSync(t, c, "--server", server, "--probe-path", "none")
		require.Equal(t, 0, final.Code, final.Msg+"\n"+final.Stderr)
		assert.False(t, final.Restarted)
		assert.True(t, again.facts().RecordChanged != final.RecordChanged, "the ConfigMap written exactly once, by the rerun (%t) or the run after the rollout (%t)", again.facts().RecordChanged, final.RecordChanged)
		perNode := history.Stop()
		cluster.AssertAllReplaced(t, before, c.PodUIDs(t))
		for node, uids := range perNode {
			assert.Equal(t, 2, uids, "node %s: its pod replaced exactly once", node)
		}
		assert.True(t, hashConsistent(t, c))
		assertRecordFollows(t, c)
		summary = append(summary, fmt.Sprintf("%-32s exit %d with a failed JSON result, rerun restarted %t (record written %t), pods per node %v: converged",
			"SIGTERM during-wait", stopped.code, again.facts().Restarted, again.facts().RecordChanged, perNode))
	})
}

// slowRollout gives the DaemonSet a minReadySeconds (not part of the pod
// template, so no pod restarts).
func slowRollout(t *testing.T, c *cluster.Cluster) {
	t.Helper()
	holdRollout(t, c, minReadySeconds)
}

// holdRollout sets the DaemonSet's minReadySeconds: the controller takes a
// new pod as available, and moves on to the next node, only after it has
// been Ready this long without a break.
func holdRollout(t *testing.T, c *cluster.Cluster, seconds int) {
	t.Helper()
	patch := fmt.Sprintf(`{"spec":{"minReadySeconds":%d}}`, seconds)
	_, err := c.Client.AppsV1().DaemonSets(c.Namespace).Patch(context.Background(), cluster.Name, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{})
	require.NoError(t, err)
	c.WaitRolloutComplete(t, time.Minute)
}

// crashStart waits until the last rollout is over and puts the DaemonSet
// in the state a case starts from: never stamped by the tool (fresh), or
// adopted with nothing owed.
func crashStart(t *testing.T, c *cluster.Cluster, adopted bool) {
	t.Helper()
	c.WaitRolloutComplete(t, 2*time.Minute)
	if !adopted {
		unstamp(t, c)
		return
	}
	if !hashConsistent(t, c) {
		r := runSync(t, c, "--probe-path", "none")
		require.Equal(t, 0, r.Code, r.Msg)
		require.True(t, hashConsistent(t, c))
	}
}

type procResult struct {
	code           int
	stdout, stderr string
}

// runBinary runs the binary to its end, with extra environment variables.
func runBinary(t *testing.T, bin string, args, env []string) procResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), env...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	if _, ok := err.(*exec.ExitError); err != nil && !ok {
		t.Fatalf("run %s: %v", bin, err)
	}
	return procResult{cmd.ProcessState.ExitCode(), out.String(), errOut.String()}
}

// runPaused starts the binary with the test hook pausing it at step, and
// sends sig once it says it is paused there.
func runPaused(t *testing.T, bin string, args []string, step string, sig syscall.Signal) procResult {
	t.Helper()
	return runPausedDuring(t, bin, args, step, nil, sig)
}

// runPausedDuring is runPaused that calls during (when not nil) while the
// run is paused, before sending sig.
func runPausedDuring(t *testing.T, bin string, args []string, step string, during func(), sig syscall.Signal) procResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), app.TestPauseEnv+"="+step)
	var out bytes.Buffer
	cmd.Stdout = &out
	stderr, err := cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())

	want := "kube-proxy-sync: test hook: paused at " + step
	var errOut strings.Builder
	paused := false
	sc := bufio.NewScanner(stderr)
	for sc.Scan() {
		errOut.WriteString(sc.Text() + "\n")
		if sc.Text() == want {
			paused = true
			if during != nil {
				func() {
					// the run is killed however during ends (a failed
					// assertion stops this goroutine)
					defer func() { _ = cmd.Process.Signal(sig) }()
					during()
				}()
			}
			require.NoError(t, cmd.Process.Signal(sig))
			break
		}
	}
	rest, _ := io.ReadAll(stderr)
	errOut.Write(rest)
	err = cmd.Wait()
	if _, ok := err.(*exec.ExitError); err != nil && !ok {
		t.Fatalf("run %s: %v", bin, err)
	}
	require.True(t, paused, "the run never paused at %s (exit %d):\n%s\nstdout: %s", step, cmd.ProcessState.ExitCode(), errOut.String(), out.String())
	return procResult{cmd.ProcessState.ExitCode(), out.String(), errOut.String()}
}

// readAudit reads the audit log's records, and checks it is private.
func readAudit(t *testing.T, path string) []audit.Record {
	t.Helper()
	st, err := os.Stat(path)
	if os.IsNotExist(err) {
		return nil
	}
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), st.Mode().Perm(), "the audit log is 0600")
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	var records []audit.Record
	for _, line := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
		if line == "" {
			continue
		}
		var r audit.Record
		require.NoError(t, json.Unmarshal([]byte(line), &r), "audit log line: %s", line)
		records = append(records, r)
	}
	return records
}

// phases lists the records' phases in order, of one run when auditID is set.
func phases(records []audit.Record, auditID string) []string {
	var out []string
	for _, r := range records {
		if auditID == "" || r.AuditID == auditID {
			out = append(out, r.Phase)
		}
	}
	return out
}
