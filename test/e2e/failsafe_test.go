//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/kube-proxy-sync/kube-proxy-sync/internal/app"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/configmap"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/kpsync"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/rollout"
	"github.com/kube-proxy-sync/kube-proxy-sync/test/e2e/cluster"
)

// The first restarted pod crash-loops on the new config: the run stops at
// once (well before its progress deadline), puts back the pod template it
// found, which mounts the ConfigMap it mounted (the new config is in a
// copy, and the ConfigMap was never written), so the pods it never
// restarted are left alone and the broken one is replaced by one reading
// the old data: no pod is left on the broken config. It fails naming the
// node, the pod and the container's last error.
func TestCrashLoopingPodRollsBackAtOnce(t *testing.T) {
	c := cluster.Connect(t)
	c.Reset(t)
	t.Cleanup(func() { c.Reset(t) })
	// kwok marks a new pod Ready the moment it is bound, before the breaker
	// turns it into a crash loop: without a hold, the DaemonSet controller
	// can take that instant as "available" and replace the next node's pod
	// too, which is kwok's doing, not the run's
	holdRollout(t, c, 15)
	require.Equal(t, 0, runSync(t, c, "--probe-path", "none").Code) // adopt
	cmBefore, dsBefore := c.ConfigMap(t), c.DaemonSet(t)
	podsBefore := c.PodUIDs(t)
	breaker := breakPodsOfGeneration(t, c, templateGeneration(t, dsBefore)+1)

	// the default progress deadline (2m here) and runSync's --timeout (3m)
	// are far away: only the crash loop can end the wait this early
	start := time.Now()
	r := runSync(t, c, "--server", "https://10.96.3.1:6443", "--probe-path", "none")
	t.Logf("failed after %s", time.Since(start))
	broken := breaker.Stop()
	t.Logf("run: exit %d: %s", r.Code, r.Msg)
	require.Equal(t, 1, r.Code, "stdout msg: %s\nstderr: %s", r.Msg, r.Stderr)
	require.NotEmpty(t, broken, "the breaker saw a pod of the new template")
	assert.True(t, r.facts().Restarted)
	assert.True(t, r.facts().RolledBack, "rolled back by default")
	assert.Contains(t, r.Msg, "CrashLoopBackOff")
	assert.Contains(t, r.Msg, crashLoopError, "the container's last error")
	named := false
	for node, pod := range broken {
		named = named || strings.Contains(r.Msg, "node "+node+", pod "+pod.Name)
	}
	assert.True(t, named, "the message names a broken node and its pod: %s", r.Msg)

	cmAfter, dsAfter := c.ConfigMap(t), c.DaemonSet(t)
	assert.Equal(t, cmBefore.ResourceVersion, cmAfter.ResourceVersion, "configmap never written")
	assert.Equal(t, dsBefore.Spec.Template, dsAfter.Spec.Template, "pod template restored exactly (restartedAt, probe, the ConfigMap it mounts)")
	broke := copyWith(t, c, "https://10.96.3.1:6443")
	require.NotNil(t, broke, "the broken config's copy (kept as history)")
	assert.Equal(t, cluster.Name, r.facts().ConfigMapName, "the template mounts the ConfigMap again")
	assert.Equal(t, broke.Name, r.facts().PreviousConfigMap)
	assert.Equal(t, dsBefore.Spec.UpdateStrategy, dsAfter.Spec.UpdateStrategy)
	assert.Equal(t, configmap.Hash(cmBefore.Data, cmBefore.BinaryData), dsAfter.Annotations[rollout.HashAnnotation], "nothing owed: the data and the stamp agree")

	// the controller replaces the broken pods with ones of the restored template
	c.WaitRolloutComplete(t, 2*time.Minute)
	podsAfter := c.PodUIDs(t)
	for node, pod := range broken {
		assert.NotEqual(t, pod.UID, podsAfter[node], "node %s: its broken pod was replaced", node)
	}
	kept := untouched(podsBefore, podsAfter)
	sort.Strings(kept)
	assert.Len(t, kept, len(podsBefore)-len(broken), "every node without a broken pod keeps the pod it had: %v", kept)
	assert.NotEmpty(t, kept, "the rollout stopped at the first broken node")
	for node, name := range c.PodConfigMaps(t) {
		assert.Equal(t, cluster.Name, name, "node %s: its pod reads the config it did, not the broken one", node)
	}
}

// The progress deadline, not a wall-clock timeout, is what fails a rollout:
// a slow healthy rollout that takes longer than the deadline in total
// succeeds (each node finishes within it), and one that stops making
// progress fails at the deadline and is rolled back.
func TestProgressDeadline(t *testing.T) {
	c := cluster.Connect(t)
	c.Reset(t)
	t.Cleanup(func() { c.Reset(t) })
	require.Equal(t, 0, runSync(t, c, "--probe-path", "none").Code) // adopt
	extra := addNodes(t, c, "slow", 3)                              // 6 nodes, maxUnavailable 1

	t.Run("slow healthy rollout", func(t *testing.T) {
		slowRollout(t, c) // minReadySeconds: every node takes a few seconds, one at a time
		before := c.PodUIDs(t)
		deadline := 12 * time.Second
		r := runSync(t, c, "--server", "https://10.96.3.2:6443", "--probe-path", "none", "--progress-deadline", deadline.String(), "--timeout", "0")
		require.Equal(t, 0, r.Code, r.Msg+"\n"+r.Stderr)
		assert.Greater(t, r.facts().Rollout.Duration, deadline.Seconds(), "the rollout as a whole took longer than the deadline (else this proves nothing)")
		assert.False(t, r.facts().RolledBack)
		cluster.AssertAllReplaced(t, before, c.PodUIDs(t))
		assert.Contains(t, assertMountsCopy(t, c).Data["kubeconfig.conf"], "https://10.96.3.2:6443")
		assertRecordFollows(t, c)
	})

	t.Run("no progress", func(t *testing.T) {
		c.WaitRolloutComplete(t, 2*time.Minute)
		cmBefore, dsBefore := c.ConfigMap(t), c.DaemonSet(t)
		// no node's pod ever comes back
		all := append([]string{}, extra...)
		for n := range c.PodUIDs(t) {
			all = append(all, n)
		}
		denyKubeProxyPodsOn(t, c, all...)
		r := runSync(t, c, "--server", "https://10.96.3.3:6443", "--probe-path", "none", "--progress-deadline", "10s", "--timeout", "0")
		require.Equal(t, 1, r.Code, r.Msg+"\n"+r.Stderr)
		assert.Contains(t, r.Msg, "progress deadline")
		assert.True(t, r.facts().RolledBack, "rolled back by default")
		assert.Equal(t, cmBefore.ResourceVersion, c.ConfigMap(t).ResourceVersion, "configmap never written")
		assert.Equal(t, dsBefore.Spec.Template, c.DaemonSet(t).Spec.Template, "pod template restored, on the copy it mounted")
		assert.Contains(t, c.MountedConfigMap(t).Data["kubeconfig.conf"], "https://10.96.3.2:6443", "the config before the failed change")
	})
}

// An interrupt (Ansible's timeout sends SIGTERM) never rolls back, even
// with --rollback-on-failure: the DaemonSet keeps the new template, which
// mounts the copy of the new data, and the matching stamp, and the message
// says what the next run does. The ConfigMap (the record) is not written
// while the rollout runs: a run after the rollout writes it.
func TestInterruptNeverRollsBack(t *testing.T) {
	c := cluster.Connect(t)
	bin := kubeProxySyncBinary(t)
	c.Reset(t)
	t.Cleanup(func() { c.Reset(t) })
	slowRollout(t, c)
	crashStart(t, c, true)
	recordBefore := c.ConfigMap(t)
	server := "https://10.96.3.4:6443"
	args := []string{"--kubeconfig", c.KubeconfigPath, "--server", server, "--probe-path", "none",
		"--output", "json", "--rollback-on-failure"}

	stopped := runPaused(t, bin, args, kpsync.StepWaiting, syscall.SIGTERM)
	assert.Equal(t, app.ExitFailed, stopped.code, "stderr: %s", stopped.stderr)
	var res result
	require.NoError(t, json.Unmarshal([]byte(stopped.stdout), &res), stopped.stdout)
	assert.False(t, res.facts().RolledBack)
	assert.Contains(t, res.Msg, "next run")

	cm, ds := assertMountsCopy(t, c), c.DaemonSet(t)
	assert.Contains(t, cm.Data["kubeconfig.conf"], server, "the new data stays")
	assert.Equal(t, configmap.Hash(cm.Data, cm.BinaryData), ds.Annotations[rollout.HashAnnotation], "consistent: nothing owed")
	assert.NotEmpty(t, ds.Spec.Template.Annotations[rollout.RestartedAtAnnotation], "the new template stays")
	assert.Equal(t, recordBefore.ResourceVersion, c.ConfigMap(t).ResourceVersion, "the record is not written during the rollout")

	c.WaitRolloutComplete(t, 2*time.Minute)
	r := runSync(t, c, "--server", server, "--probe-path", "none")
	require.Equal(t, 0, r.Code, r.Msg+"\n"+r.Stderr)
	assert.False(t, r.facts().Restarted)
	assert.True(t, r.facts().RecordChanged, "the run after the rollout writes the record")
	assertRecordFollows(t, c)
}

// A canary interrupted half-way leaves the DaemonSet on OnDelete with the
// pods it did not reach untouched (the controller never rolls a template
// the canary has not verified), and still mounting the config they ran
// (whatever restarts their kube-proxy, it reads the old config); the next
// run with the same values resumes it: every pod replaced exactly once,
// the strategy back as it was, the ConfigMap written once no pod mounts it.
func TestInterruptedCanaryResumes(t *testing.T) {
	c := cluster.Connect(t)
	bin := kubeProxySyncBinary(t)
	c.Reset(t)
	t.Cleanup(func() { c.Reset(t) })
	extra := addNodes(t, c, "resume", 3) // after node-*: the canary is node-000000
	crashStart(t, c, true)
	// the batches stop at extra[0], whose new pod never comes: the run is
	// interrupted there, before extra[1] and extra[2]
	allow := denyKubeProxyPodsOn(t, c, extra[0])
	original := c.DaemonSet(t).Spec.UpdateStrategy
	before := c.PodUIDs(t)
	history := watchPods(t, c)
	args := []string{"--kubeconfig", c.KubeconfigPath, "--server", "https://10.96.3.5:6443", "--probe-path", "none",
		"--output", "json", "--strategy", "canary", "--canary-nodes", "1", "--batch-size", "1"}

	stopped := runPaused(t, bin, args, kpsync.StepWaiting, syscall.SIGTERM)
	assert.Equal(t, app.ExitFailed, stopped.code, "stderr: %s", stopped.stderr)
	var res result
	require.NoError(t, json.Unmarshal([]byte(stopped.stdout), &res), stopped.stdout)
	assert.Contains(t, res.Msg, "resumes")
	ds := c.DaemonSet(t)
	assert.Equal(t, appsv1.OnDeleteDaemonSetStrategyType, ds.Spec.UpdateStrategy.Type, "still OnDelete: the controller must not roll the rest")
	assert.Contains(t, ds.Annotations, rollout.StrategyAnnotation)
	mid := c.PodUIDs(t)
	assert.Equal(t, before[extra[1]], mid[extra[1]], "a node the canary did not reach keeps its pod")
	assert.Equal(t, before[extra[2]], mid[extra[2]], "a node the canary did not reach keeps its pod")
	cp := assertMountsCopy(t, c)
	mounts := c.PodConfigMaps(t)
	for _, n := range extra[1:] {
		assert.Equal(t, cluster.Name, mounts[n], "node %s, not reached: its pod reads the old config", n)
	}
	assert.NotContains(t, c.ConfigMap(t).Data["kubeconfig.conf"], "https://10.96.3.5:6443", "the ConfigMap the old pods read is not written")

	allow()
	rerun := runBinary(t, bin, args, nil)
	require.Equal(t, 0, rerun.code, "rerun: %s\n%s", rerun.stdout, rerun.stderr)
	// extra[0] had no pod when the rerun began: it waited for the one the
	// controller made there, and counts it
	var resumed result
	require.NoError(t, json.Unmarshal([]byte(rerun.stdout), &resumed), rerun.stdout)
	assert.EqualValues(t, len(before), resumed.Rollout.Updated, "rerun: %s", rerun.stderr)
	assert.NotEmpty(t, c.PodUIDs(t)[extra[0]], "the rerun ended with a pod on %s", extra[0])
	c.WaitRolloutComplete(t, 2*time.Minute)
	perNode := history.Stop()
	cluster.AssertAllReplaced(t, before, c.PodUIDs(t))
	for node, n := range perNode {
		assert.Equal(t, 2, n, "node %s: its pod replaced exactly once", node)
	}
	ds = c.DaemonSet(t)
	assert.Equal(t, original, ds.Spec.UpdateStrategy, "strategy restored once the canary finished")
	assert.NotContains(t, ds.Annotations, rollout.StrategyAnnotation)
	assert.True(t, hashConsistent(t, c))
	for node, name := range c.PodConfigMaps(t) {
		assert.Equal(t, cp.Name, name, "node %s: its pod reads the new config", node)
	}
	assertRecordFollows(t, c)
}

// The default (rolling) strategy with maxUnavailable 1 completes although
// one node is going away with a stuck pod and another live node's pod was
// unready before the run and never comes back: neither holds the wait nor
// fails it, the DaemonSet controller's budget is raised by those two for
// the duration, and the DaemonSet's own maxUnavailable is back afterwards.
func TestRollingDoesNotStallOnStuckPods(t *testing.T) {
	c := cluster.Connect(t)
	c.Reset(t)
	t.Cleanup(func() { c.Reset(t) })
	require.Equal(t, 0, runSync(t, c, "--probe-path", "none").Code) // adopt
	extra := addNodes(t, c, "stall", 3)
	leaving, unready := extra[0], extra[1]
	taintToBeDeleted(t, c, leaving)
	// kube-proxy runs on both but is never Ready there, before and after the
	// restart; the second node stays live and Ready
	keepUnready(t, c, leaving, unready)
	original := c.DaemonSet(t).Spec.UpdateStrategy
	require.Equal(t, "1", original.RollingUpdate.MaxUnavailable.String())
	before := c.PodUIDs(t)
	budgets := watchMaxUnavailable(t, c)

	r := runSync(t, c, "--server", "https://10.96.3.6:6443", "--probe-path", "none", "--timeout", "45s")
	assert.Equal(t, []string{"3", "1"}, budgets(), "maxUnavailable raised by the two stuck pods for the rollout, then restored")
	require.Equal(t, 0, r.Code, r.Msg+"\n"+r.Stderr)
	f := r.facts()
	assert.Equal(t, []string{unready}, f.Rollout.UnreadyBefore)
	require.Len(t, f.Rollout.SkippedNodes, 1)
	assert.Equal(t, leaving, f.Rollout.SkippedNodes[0].Name)
	assert.False(t, f.RolledBack)

	after := c.PodUIDs(t)
	for node, uid := range before {
		if node != leaving && node != unready {
			assert.NotEqual(t, uid, after[node], "live node %s got a new pod", node)
		}
	}
	ds := c.DaemonSet(t)
	assert.Equal(t, original, ds.Spec.UpdateStrategy, "maxUnavailable back as it was")
	assert.NotContains(t, ds.Annotations, rollout.StrategyAnnotation)
	assert.Contains(t, assertMountsCopy(t, c).Data["kubeconfig.conf"], "https://10.96.3.6:6443")
	// the stuck pods were replaced too (not waited for: the controller
	// replaces an unavailable pod first), so no pod mounts the ConfigMap
	// any more and the run wrote it
	assert.Empty(t, c.PodsMounting(t, cluster.Name))
	assert.True(t, f.RecordChanged)
	assertRecordFollows(t, c)
}

// An audit log that cannot be written fails the run before its first
// write, not between the ConfigMap write and the restart.
func TestUnwritableAuditLogFailsBeforeAnyWrite(t *testing.T) {
	c := cluster.Connect(t)
	c.Reset(t)
	require.Equal(t, 0, runSync(t, c, "--probe-path", "none").Code) // adopt
	before := stateOf(t, c)
	pods := c.PodUIDs(t)
	r := runSync(t, c, "--server", "https://10.96.3.7:6443", "--probe-path", "none", "--audit-log", t.TempDir()) // a directory
	assert.Equal(t, 1, r.Code)
	assert.Contains(t, r.Msg, "audit log")
	assertUntouched(t, c, before)
	cluster.AssertNoneReplaced(t, pods, c.PodUIDs(t))
}

// An existing readiness probe of another shape (here with host 127.0.0.1,
// which a strategic merge cannot remove) is replaced whole once; the next
// run finds nothing to do instead of reporting probe-changed forever. A
// liveness probe on /healthz moves to /livez with it (1.33 image).
func TestProbeOfAnyShapeConverges(t *testing.T) {
	c := cluster.Connect(t)
	c.Reset(t)
	t.Cleanup(func() { c.Reset(t) })
	patch := fmt.Sprintf(`{"spec":{"template":{"spec":{"containers":[{"name":%q,
		"readinessProbe":{"httpGet":{"path":"/livez","port":10256,"host":"127.0.0.1"},"periodSeconds":7},
		"livenessProbe":{"httpGet":{"path":"/healthz","port":10256,"host":"127.0.0.1"},"failureThreshold":8}}]}}}}`, cluster.Name)
	_, err := c.Client.AppsV1().DaemonSets(c.Namespace).Patch(context.Background(), cluster.Name, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{})
	require.NoError(t, err)
	c.WaitRolloutComplete(t, 2*time.Minute)

	r := runSync(t, c, "--probe-path", "auto")
	require.Equal(t, 0, r.Code, r.Msg+"\n"+r.Stderr)
	assert.True(t, r.facts().ProbeChanged)
	ctr := c.DaemonSet(t).Spec.Template.Spec.Containers[0]
	assert.Equal(t, &corev1.HTTPGetAction{Path: "/livez", Port: intstr.FromInt32(10256), Scheme: corev1.URISchemeHTTP}, ctr.ReadinessProbe.HTTPGet, "handler replaced, host gone")
	assert.Equal(t, int32(7), ctr.ReadinessProbe.PeriodSeconds, "timing kept")
	assert.Equal(t, &corev1.HTTPGetAction{Path: "/livez", Port: intstr.FromInt32(10256), Scheme: corev1.URISchemeHTTP}, ctr.LivenessProbe.HTTPGet, "liveness on /livez")
	assert.Equal(t, int32(8), ctr.LivenessProbe.FailureThreshold)

	c.WaitRolloutComplete(t, 2*time.Minute)
	pods := c.PodUIDs(t)
	r = runSync(t, c, "--probe-path", "auto")
	require.Equal(t, 0, r.Code, r.Msg+"\n"+r.Stderr)
	assert.False(t, r.facts().ProbeChanged, "converged")
	assert.False(t, r.Changed)
	cluster.AssertNoneReplaced(t, pods, c.PodUIDs(t))
}
