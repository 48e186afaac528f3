//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/kube-proxy-sync/kube-proxy-sync/internal/app"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/configmap"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/kpsync"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/nodes"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/rollout"
	"github.com/kube-proxy-sync/kube-proxy-sync/test/e2e/cluster"
)

// 20 nodes, 2 being removed by the autoscaler with unready pods, 1 whose
// kubelet went silent: a config change completes without waiting for them,
// with the rolling strategy (enough maxUnavailable) and with canary
// batches (maxUnavailable 1, where the DaemonSet controller alone would stall).
// The DaemonSet controller replaces their unready pods on its own (an
// unavailable pod first), so once the run is done no pod mounts the
// ConfigMap kube-proxy any more, and the run writes it.
func TestRolloutSkipsNodesGoingAway(t *testing.T) {
	c := cluster.Connect(t)
	c.Reset(t)
	require.NotEmpty(t, runSync(t, c, "--probe-path", "none").facts().AuditID) // adopt
	extra := addNodes(t, c, "leaving", 20-len(c.PodUIDs(t)))
	for _, n := range extra[:2] {
		unmanage(t, c, n)
		taintToBeDeleted(t, c, n)
		setPodUnready(t, c, n)
	}
	unmanage(t, c, extra[2])
	setNodeReady(t, c, extra[2], corev1.ConditionUnknown)
	setPodUnready(t, c, extra[2])
	want := []nodes.Skipped{{Name: extra[0], Reason: nodes.ToBeDeleted}, {Name: extra[1], Reason: nodes.ToBeDeleted}, {Name: extra[2], Reason: nodes.Unknown}}
	skipped := map[string]bool{extra[0]: true, extra[1]: true, extra[2]: true}

	check := func(t *testing.T, r result, before map[string]string, server string) {
		require.Equal(t, 0, r.Code, r.Msg+"\n"+r.Stderr)
		f := r.facts()
		assert.True(t, f.Restarted)
		cp := assertMountsCopy(t, c)
		assert.Contains(t, cp.Data["kubeconfig.conf"], server)
		assert.Empty(t, c.PodsMounting(t, cluster.Name))
		assert.True(t, f.RecordChanged)
		assertRecordFollows(t, c)
		assert.Equal(t, want, f.Rollout.SkippedNodes)
		assert.Empty(t, f.Rollout.UnreadyBefore, "the unready pods were all on nodes going away")
		// exit 0 is the proof nothing waited for the skipped nodes: their pods
		// never come back, so waiting for them could only end in the timeout error
		after := c.PodUIDs(t)
		for node, uid := range before {
			if !skipped[node] {
				assert.NotEqual(t, uid, string(after[node]), "live node %s got a new pod", node)
			}
		}
	}
	uids := func() map[string]string {
		out := map[string]string{}
		for n, u := range c.PodUIDs(t) {
			out[n] = string(u)
		}
		return out
	}

	t.Run("rolling", func(t *testing.T) {
		// the controller counts the 3 stuck pods against maxUnavailable: give it room
		setMaxUnavailable(t, c, "25%")
		before := uids()
		check(t, runSync(t, c, "--server", "https://10.96.0.1:6443", "--probe-path", "none", "--timeout", "2m"), before, "https://10.96.0.1:6443")
	})
	t.Run("canary", func(t *testing.T) {
		setMaxUnavailable(t, c, "1")
		before := uids()
		r := runSync(t, c, "--server", "https://10.96.0.2:6443", "--probe-path", "none", "--timeout", "2m", "--strategy", "canary", "--canary-nodes", "2", "--batch-size", "2", "--verify")
		check(t, r, before, "https://10.96.0.2:6443")
		assert.LessOrEqual(t, r.facts().Rollout.MaxUnavailable, 2)
	})
}

// Canary on 50 nodes: the canary nodes first, never more than the batch
// size unavailable, and the DaemonSet's updateStrategy as it was.
func TestCanaryBatchesStayWithinBudget(t *testing.T) {
	c := cluster.Connect(t)
	c.Reset(t)
	require.Equal(t, 0, runSync(t, c, "--probe-path", "none").Code) // adopt
	extra := addNodes(t, c, "canary", 50-len(c.PodUIDs(t)))         // sort before node-*
	canaries := map[string]bool{extra[0]: true, extra[1]: true}
	original := c.DaemonSet(t).Spec.UpdateStrategy

	s := sampleRollout(t, c)
	r := runSync(t, c, "--server", "https://10.96.0.3:6443", "--probe-path", "none", "--timeout", "3m",
		"--strategy", "canary", "--canary-nodes", "2", "--batch-size", "5")
	samples := s.stop()
	require.Equal(t, 0, r.Code, r.Msg+"\n"+r.Stderr)
	assert.Equal(t, []string{extra[0], extra[1]}, r.facts().Rollout.CanaryNodes)
	assert.Equal(t, int32(50), r.facts().Rollout.Available)

	assert.LessOrEqual(t, samples.maxUnavailable, 5, "never more than the batch size unavailable (sampled by a watch)")
	assert.Greater(t, samples.maxUnavailable, 0, "the sampler saw the rollout")
	require.Len(t, samples.replacedOrder, 50, "every node's pod replaced")
	firstOther := -1
	for i, n := range samples.replacedOrder {
		if !canaries[n] {
			firstOther = i
			break
		}
	}
	assert.Equal(t, 2, firstOther, "the canary nodes' pods are replaced before any other: %v", samples.replacedOrder[:5])

	ds := c.DaemonSet(t)
	assert.Equal(t, original, ds.Spec.UpdateStrategy, "updateStrategy restored")
	assert.NotContains(t, ds.Annotations, rollout.StrategyAnnotation)
	assert.Contains(t, assertMountsCopy(t, c).Data["kubeconfig.conf"], "https://10.96.0.3:6443")
	assertRecordFollows(t, c)
}

// A canary that never gets Ready, with --rollback-on-failure: the pod
// template points back at the ConfigMap it mounted (never written: the new
// config is in a copy), and the run fails saying so.
func TestFailedCanaryRollsBack(t *testing.T) {
	c := cluster.Connect(t)
	c.Reset(t)
	require.Equal(t, 0, runSync(t, c, "--probe-path", "none").Code) // adopt
	extra := addNodes(t, c, "broken", 4)                            // sort before node-*
	// the canary nodes (sorted first) can't get their pod back
	denyKubeProxyPodsOn(t, c, extra[0], extra[1])
	before := c.ConfigMap(t)
	dsBefore := c.DaemonSet(t)
	original := dsBefore.Spec.UpdateStrategy
	podsBefore := c.PodUIDs(t)

	// a batch of 2: both canary nodes at once (the canary never takes more
	// than the batch size, which defaults to maxUnavailable, 1 here)
	r := runSync(t, c, "--server", "https://10.96.0.4:6443", "--probe-path", "none", "--progress-deadline", "15s",
		"--strategy", "canary", "--canary-nodes", "2", "--batch-size", "2", "--rollback-on-failure")
	assert.Equal(t, 1, r.Code)
	assert.True(t, r.Failed)
	f := r.facts()
	assert.True(t, f.RolledBack)
	assert.Contains(t, f.RollbackReason, extra[0])
	assert.Contains(t, r.Msg, "rolled back")

	after := c.ConfigMap(t)
	assert.Equal(t, before.ResourceVersion, after.ResourceVersion, "configmap never written")
	cp := copyWith(t, c, "https://10.96.0.4:6443")
	require.NotNil(t, cp, "the failed config's copy")
	assert.Equal(t, cluster.Name, f.ConfigMapName)
	assert.Equal(t, cp.Name, f.PreviousConfigMap)
	assert.Empty(t, c.PodsMounting(t, cp.Name), "no pod on the failed config")
	ds := c.DaemonSet(t)
	assert.Equal(t, original, ds.Spec.UpdateStrategy, "updateStrategy restored")
	assert.Equal(t, configmap.Hash(before.Data, before.BinaryData), ds.Annotations[rollout.HashAnnotation])
	// the controller got the DaemonSet back with its previous template, not
	// the unverified one: the nodes past the canaries keep their pods
	assert.Equal(t, dsBefore.Spec.Template, ds.Spec.Template, "pod template restored, on the ConfigMap it mounted")
	kept := untouched(podsBefore, c.PodUIDs(t))
	assert.Len(t, kept, len(podsBefore)-2, "only the two canary nodes lost their pod: %v", kept)
}

// Five runs at once on the same change: one rollout, every pod replaced
// once, one copy of the new config, the ConfigMap written once.
func TestConcurrentRunsRestartOnce(t *testing.T) {
	c := cluster.Connect(t)
	c.Reset(t)
	require.Equal(t, 0, runSync(t, c, "--probe-path", "none").Code) // adopt
	history := watchPods(t, c)
	results := make([]result, 5)
	var wg sync.WaitGroup
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = runSync(t, c, "--server", "https://10.96.0.5:6443", "--probe-path", "none", "--lock-timeout", "2m")
		}()
	}
	wg.Wait()
	perNode := history.Stop()
	restarted, written := 0, 0
	for i, r := range results {
		if r.Code != 0 {
			assert.Contains(t, r.Msg, "locked", "run %d: only a clear lock timeout may fail", i)
			continue
		}
		if r.facts().Restarted {
			restarted++
		}
		if r.facts().RecordChanged {
			written++
		}
	}
	assert.Equal(t, 1, restarted, "exactly one run restarts")
	assert.Equal(t, 1, written, "exactly one run writes the ConfigMap")
	// one copy of the new config, and (kubeadm's layout) one of the data
	// before, which --undo restores
	ds := c.DaemonSet(t)
	var copies []string
	for name := range c.Copies(t) {
		copies = append(copies, name)
	}
	assert.ElementsMatch(t, []string{cluster.MountedConfigMapName(ds), ds.Annotations["kube-proxy-sync.io/previous-config"]}, copies,
		"one copy of the change, one of the data before it (kubeadm's layout), which --undo restores")
	assert.Contains(t, assertMountsCopy(t, c).Data["kubeconfig.conf"], "https://10.96.0.5:6443")
	assertRecordFollows(t, c)
	for node, n := range perNode {
		assert.Equal(t, 2, n, "node %s: its pod replaced exactly once", node)
	}
}

// The Lease itself keeps a second run out: run A holds it, paused right
// after it created the copy of its config; run B, with another change (so
// no data-hash or resourceVersion check can make it a no-op), must wait for
// the Lease and fail with "locked", writing nothing. Without the Lease, B
// would make its own copy and restart onto it. TestConcurrentRunsRestartOnce alone
// cannot show this: five runs of one change give one rollout even unlocked.
func TestLeaseKeepsASecondRunOut(t *testing.T) {
	c := cluster.Connect(t)
	bin := kubeProxySyncBinary(t)
	c.Reset(t)
	t.Cleanup(func() { c.Reset(t) })
	require.Equal(t, 0, runSync(t, c, "--probe-path", "none").Code) // adopt
	const serverA, serverB = "https://10.96.3.1:6443", "https://10.96.3.2:6443"
	args := func(server string, extra ...string) []string {
		return append([]string{"--kubeconfig", c.KubeconfigPath, "--server", server, "--probe-path", "none", "--output", "json", "--timeout", "2m"}, extra...)
	}
	var b procResult
	a := runPausedDuring(t, bin, args(serverA), kpsync.StepConfigMapWritten, func() {
		require.NotNil(t, copyWith(t, c, serverA), "run A made the copy of its change before pausing")
		before, pods := stateOf(t, c), c.PodUIDs(t)
		b = runBinary(t, bin, args(serverB, "--lock-timeout", "3s"), nil)
		assertUntouched(t, c, before)
		assert.Equal(t, pods, c.PodUIDs(t), "no pod replaced while A holds the Lease")
	}, syscall.SIGTERM)
	assert.Equal(t, app.ExitFailed, b.code, "run B fails while A holds the Lease:\n%s", b.stderr)
	var res result
	require.NoError(t, json.Unmarshal([]byte(b.stdout), &res), b.stdout)
	assert.Contains(t, res.Msg, "locked", "run B says why")
	assert.False(t, res.Changed)
	assert.NotNil(t, copyWith(t, c, serverA), "A's copy stands")
	assert.Nil(t, copyWith(t, c, serverB), "B made no copy")
	assert.NotContains(t, c.ConfigMap(t).Data["kubeconfig.conf"], serverB, "B wrote nothing")
	assert.NotContains(t, c.MountedConfigMap(t).Data["kubeconfig.conf"], serverB, "B restarted onto nothing")
	assert.Equal(t, app.ExitFailed, a.code, "A was interrupted:\n%s", a.stderr)
}

type rolloutSamples struct {
	maxUnavailable int
	replacedOrder  []string // nodes, in the order their old pod went away
}

type sampler struct {
	stop func() rolloutSamples
}

// sampleRollout watches kube-proxy pods and, at every event, counts nodes
// without a Ready, non-terminating pod.
func sampleRollout(t *testing.T, c *cluster.Cluster) sampler {
	t.Helper()
	var out rolloutSamples
	nodes := c.PodUIDs(t)
	follow := followPods(t, c, func(ready map[string]bool) {
		out.maxUnavailable = max(out.maxUnavailable, len(nodes)-len(ready))
	})
	return sampler{stop: func() rolloutSamples {
		out.replacedOrder, _ = follow.Stop()
		return out
	}}
}

func podIsReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// A lease left by a run that crashed is taken over once it expires; a live
// one makes the run fail with "locked" after --lock-timeout, cluster untouched.
// Expiry is by local observation, as client-go's leader election does: an
// old renewTime may be another host's clock running behind, so the lease is
// taken only after it was seen unchanged for its duration.
func TestLeaseOfACrashedRunIsTakenOver(t *testing.T) {
	c := cluster.Connect(t)
	c.Reset(t)
	require.Equal(t, 0, runSync(t, c, "--probe-path", "none").Code) // adopt
	leases := c.Client.CoordinationV1().Leases(c.Namespace)
	hold := func(renewed time.Time) {
		_ = leases.Delete(context.Background(), "kube-proxy-sync", metav1.DeleteOptions{})
		at := metav1.NewMicroTime(renewed)
		_, err := leases.Create(context.Background(), &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: "kube-proxy-sync", Namespace: c.Namespace},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("crashed-host/1/x"), LeaseDurationSeconds: ptr.To(int32(30)),
				AcquireTime: &at, RenewTime: &at},
		}, metav1.CreateOptions{})
		require.NoError(t, err)
	}

	hold(time.Now()) // alive
	state := stateOf(t, c)
	r := runSync(t, c, "--server", "https://10.96.0.6:6443", "--probe-path", "none", "--lock-timeout", "2s")
	assert.Equal(t, 1, r.Code)
	assert.Contains(t, r.Msg, "locked")
	assert.Contains(t, r.Msg, "crashed-host/1/x")
	assertUntouched(t, c, state)

	hold(time.Now().Add(-2 * time.Minute)) // a holder that died long ago, or whose clock is behind
	r = runSync(t, c, "--server", "https://10.96.0.6:6443", "--probe-path", "none", "--lock-timeout", "2s")
	assert.Equal(t, 1, r.Code)
	assert.Contains(t, r.Msg, "locked", "taken on the word of another host's clock")
	assertUntouched(t, c, state)
	r = runSync(t, c, "--server", "https://10.96.0.6:6443", "--probe-path", "none", "--lock-timeout", "45s")
	require.Equal(t, 0, r.Code, r.Msg+"\n"+r.Stderr)
	assert.True(t, r.facts().Restarted)
	l, err := leases.Get(context.Background(), "kube-proxy-sync", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Nil(t, l.Spec.HolderIdentity, "released at the end")
}
