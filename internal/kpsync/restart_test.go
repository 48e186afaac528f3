package kpsync

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kube-proxy-sync/kube-proxy-sync/internal/configmap"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/kube/kubefake"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/probe"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/rollout"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/verify"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/watch"
	k8stesting "k8s.io/client-go/testing"
)

const templateGeneration = "deprecated.daemonset.template.generation"

// Two runs in the same second, as an Ansible loop or an upgrade's two
// calls make them (the fake clock stands still): each restart gives the
// template a new restartedAt, so the second replaces the pods as well, and
// the stamp is the second data's.
func TestRestartInTheSameSecondIsNotLost(t *testing.T) {
	f := newFixture(t, seedConfigMap(), seedDaemonSet("registry.k8s.io/kube-proxy:v1.33.6"))
	res, err := f.run(t, Options{Spec: configmap.Spec{Server: "https://10.0.0.1:6443"}})
	require.NoError(t, err)
	require.True(t, res.Facts.Restarted)
	first := f.daemonSet(t)
	require.Equal(t, "2", first.Annotations[templateGeneration])

	res, err = f.run(t, Options{Spec: configmap.Spec{Server: "https://10.0.0.2:6443"}})
	require.NoError(t, err)
	assert.True(t, res.Facts.Restarted)
	ds := f.daemonSet(t)
	assert.Equal(t, "3", ds.Annotations[templateGeneration], "the second restart moved the template too")
	assert.NotEqual(t, first.Spec.Template.Annotations[rollout.RestartedAtAnnotation], ds.Spec.Template.Annotations[rollout.RestartedAtAnnotation])
	assert.Equal(t, configmap.Hash(f.configMap(t).Data, nil), ds.Annotations[rollout.HashAnnotation])
	assert.Equal(t, "3", ds.Annotations[rollout.RestartGenerationAnnotation])

	res, err = f.run(t, Options{Spec: configmap.Spec{Server: "https://10.0.0.2:6443"}})
	require.NoError(t, err)
	assert.False(t, res.Changed, "the next run finds nothing owed")
}

// A restart PATCH that leaves the template as it was (here something drops
// restartedAt from it, as an admission webhook could) replaces no pod: the
// run fails saying so, and the restart stays owed for the next run.
func TestRestartThatDoesNotMoveTheTemplateStaysOwed(t *testing.T) {
	f := newFixture(t, seedConfigMap(), seedDaemonSet("registry.k8s.io/kube-proxy:v1.33.6"))
	f.client.PrependReactor("patch", "daemonsets", func(a k8stesting.Action) (bool, runtime.Object, error) {
		pa := a.(k8stesting.PatchAction)
		var patch map[string]any
		require.NoError(t, json.Unmarshal(pa.GetPatch(), &patch))
		spec, ok := patch["spec"].(map[string]any)
		if !ok {
			return false, nil, nil
		}
		delete(spec, "template")
		body, err := json.Marshal(patch)
		require.NoError(t, err)
		stripped := k8stesting.NewPatchSubresourceAction(a.GetResource(), a.GetNamespace(), pa.GetName(), pa.GetPatchType(), body)
		return kubefake.DaemonSetReaction(f.client.Tracker())(stripped)
	})
	res, err := f.run(t, Options{Spec: configmap.Spec{Server: "https://10.0.0.1:6443"}})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "left its pod template as it was")
	assert.False(t, res.Facts.Restarted)
	assert.True(t, res.Facts.RestartRequired)
	ds := f.daemonSet(t)
	assert.Empty(t, ds.Spec.Template.Annotations[rollout.RestartedAtAnnotation])
	assert.False(t, rollout.Runs(ds, configmap.Hash(f.configMap(t).Data, nil)), "the stamp does not hold")

	f.client.ReactionChain = f.client.ReactionChain[1:] // the webhook is gone
	res, err = f.run(t, Options{Spec: configmap.Spec{Server: "https://10.0.0.1:6443"}})
	require.NoError(t, err)
	assert.True(t, res.Facts.Restarted)
	// no pod mounts the new config yet, nor does the record hold it: the
	// rerun makes the change again, onto the copy the first run made
	assert.Equal(t, ReasonConfigChanged, res.Facts.RestartReason)
	assert.Equal(t, "2", f.daemonSet(t).Annotations[templateGeneration])
}

// A restart the run owed rather than caused (restart_reason: pending: the
// ConfigMap holds D2, the pods were restarted for D1) fails on the new
// template and is rolled back: the pods not reached still run D1, so the
// DaemonSet keeps saying D1 and the restart stays owed.
func TestRollbackOfAnOwedRestartKeepsItOwed(t *testing.T) {
	f := newRollingFixture(t, 5)
	d1 := map[string]string{"config.conf": seedConfig + "# d1\n", "kubeconfig.conf": seedKubeconfig}
	owed := f.daemonSet(t)
	owed.Annotations[rollout.HashAnnotation] = configmap.Hash(d1, nil)
	require.NoError(t, f.client.Tracker().Update(appsv1.SchemeGroupVersion.WithResource("daemonsets"), owed, "kube-system"))
	go f.crashLoopNode0(t)
	res, err := f.run(t, Options{RollbackOnFailure: true})
	require.Error(t, err)
	assert.Equal(t, ReasonPending, res.Facts.RestartReason)
	assert.True(t, res.Facts.RolledBack)
	ds := f.daemonSet(t)
	assert.Equal(t, configmap.Hash(d1, nil), ds.Annotations[rollout.HashAnnotation], "the stamp before the run, not the ConfigMap's data")
	assert.Empty(t, ds.Spec.Template.Annotations[rollout.RestartedAtAnnotation], "template restored")
	assert.Equal(t, seedConfigMap().Data, f.configMap(t).Data)

	res, err = f.run(t, Options{Check: true})
	require.NoError(t, err)
	assert.True(t, res.Facts.RestartRequired)
	assert.Equal(t, ReasonPending, res.Facts.RestartReason)
}

// The same when the stamp before the run named the data but did not hold:
// its restart left the template as it was (the template-generation
// annotation is ahead of the template). The rollback's own template
// changes move the template past that annotation, so putting the stamp
// back as it was would make it hold; it is put back so that it never does.
func TestRollbackOfAStampThatDidNotHoldKeepsItOwed(t *testing.T) {
	f := newRollingFixture(t, 5)
	owed := f.daemonSet(t)
	owed.Annotations[rollout.HashAnnotation] = configmap.Hash(seedConfigMap().Data, nil)
	owed.Annotations[rollout.RestartGenerationAnnotation] = fmt.Sprint(rollout.TemplateGeneration(owed) + 1)
	require.NoError(t, f.client.Tracker().Update(appsv1.SchemeGroupVersion.WithResource("daemonsets"), owed, "kube-system"))
	require.False(t, rollout.Runs(owed, configmap.Hash(seedConfigMap().Data, nil)), "the stamp does not hold before the run")
	go f.crashLoopNode0(t)
	res, err := f.run(t, Options{RollbackOnFailure: true})
	require.Error(t, err)
	assert.Equal(t, ReasonPending, res.Facts.RestartReason)
	assert.True(t, res.Facts.RolledBack)

	res, err = f.run(t, Options{Check: true})
	require.NoError(t, err)
	assert.True(t, res.Facts.RestartRequired, "the restart is still owed after the rollback")
	assert.Equal(t, ReasonPending, res.Facts.RestartReason)
}

// crashLoopNode0 is the controller and kubelet of a restart whose new
// template crash-loops on node-0, with the status stalled (run it as the
// test's driver goroutine).
func (f *rollingFixture) crashLoopNode0(t *testing.T) {
	w := <-f.watches
	f.replace(t, crashLoopingPod("node-0", "2"))
	w.Modify(f.status("301", 1, 4))
	w.Modify(f.status("302", 1, 4))
	w.Modify(f.status("303", 1, 4))
	f.clock.Step(statusStall)
}

// --canary-nodes larger than the budget (maxUnavailable 1): the canary
// nodes go first, but never more than the budget without kube-proxy at
// once. The delete reactor counts the nodes whose pod is deleted and not
// replaced yet; the driver replaces them one by one, as the controller
// would, once the run watches the pods.
func TestCanaryLargerThanTheBudgetKeepsTheBudget(t *testing.T) {
	f := newRollingFixture(t, 5)
	withResourceVersions(t, f.fixture)
	var mu sync.Mutex
	down, most := 0, 0
	deleted := make(chan string, 10)
	f.client.PrependReactor("delete", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		obj, err := f.client.Tracker().Get(a.GetResource(), a.GetNamespace(), a.(k8stesting.DeleteAction).GetName())
		if err != nil {
			return false, nil, nil
		}
		mu.Lock()
		down++
		most = max(most, down)
		mu.Unlock()
		deleted <- obj.(*corev1.Pod).Spec.NodeName
		return false, nil, nil
	})
	replayDeletions(f.fixture, f.podWatches)
	go func() {
		<-f.podWatches
		for i := range f.n {
			node := <-deleted
			mu.Lock()
			down--
			mu.Unlock()
			p := kubeProxyPod(node, "2", true)
			p.ResourceVersion = fmt.Sprint(100 + i)
			assert.NoError(t, f.client.Tracker().Create(corev1.SchemeGroupVersion.WithResource("pods"), p, "kube-system"))
		}
	}()
	// at the canary step, the canary nodes' pods are the only ones deleted
	at := podsAtCanaryStep(t, f.fixture, func() {
		mu.Lock()
		assert.Zero(t, down, "no other pod deleted before the canary step")
		mu.Unlock()
	})
	res, err := f.run(t, Options{Spec: configmap.Spec{Server: "https://10.0.0.1:6443"}, Strategy: StrategyCanary, CanaryNodes: 3, RollbackOnFailure: true})
	require.NoError(t, err)
	assert.Len(t, res.Facts.Rollout.CanaryNodes, 3)
	assert.ElementsMatch(t, res.Facts.Rollout.CanaryNodes, at.updated, "the step comes once the canary nodes run the new template, before any other node")
	assert.Equal(t, 1, most, "at most maxUnavailable nodes without kube-proxy at once")
	pods, err := f.client.CoreV1().Pods("kube-system").List(context.Background(), metav1.ListOptions{})
	require.NoError(t, err)
	for _, p := range pods.Items {
		assert.Equal(t, "2", p.Labels["pod-template-generation"], p.Name)
	}
	assert.Len(t, pods.Items, f.n)
	assert.Equal(t, appsv1.RollingUpdateDaemonSetStrategyType, f.daemonSet(t).Spec.UpdateStrategy.Type, "strategy restored")
}

// The zonal strategy passes the same step once the run's canary (the
// first zone's) runs the new template, before any other node's pod is
// deleted, its own zone's included.
func TestZonalCanaryStepComesBeforeAnyOtherNode(t *testing.T) {
	f := newRollingFixture(t, 4)
	gvr := corev1.SchemeGroupVersion.WithResource("nodes")
	for i, zone := range []string{"zone-b", "zone-b", "zone-a", "zone-a"} {
		obj, err := f.client.Tracker().Get(gvr, "", fmt.Sprintf("node-%d", i))
		require.NoError(t, err)
		n := obj.(*corev1.Node)
		n.Labels = map[string]string{rollout.DefaultZoneLabel: zone}
		require.NoError(t, f.client.Tracker().Update(gvr, n, ""))
	}
	f.podController(t, func(node, gen string) *corev1.Pod { return kubeProxyPod(node, gen, true) })
	at := podsAtCanaryStep(t, f.fixture, nil)
	res, err := f.run(t, Options{Spec: configmap.Spec{Server: "https://10.0.0.1:6443"}, Strategy: StrategyCanary, ZoneLabel: rollout.DefaultZoneLabel, CanaryNodes: 1, RollbackOnFailure: true})
	require.NoError(t, err)
	assert.Equal(t, StrategyZonal, res.Facts.Rollout.Strategy)
	assert.Equal(t, []string{"node-2"}, res.Facts.Rollout.CanaryNodes, "the first node of the first zone by name")
	require.Len(t, res.Facts.Rollout.Zones, 2)
	assert.Equal(t, "zone-a", res.Facts.Rollout.Zones[0].Name)
	assert.True(t, res.Facts.Rollout.Zones[1].Done)
	assert.Equal(t, []string{"node-2"}, at.updated, "the step comes once the canary runs the new template")
	assert.ElementsMatch(t, []string{"node-0", "node-1", "node-3"}, at.old, "no other pod deleted before the step")
	assert.Equal(t, appsv1.RollingUpdateDaemonSetStrategyType, f.daemonSet(t).Spec.UpdateStrategy.Type, "strategy restored")
}

// canaryStepPods are the nodes whose pod runs the new template (template
// generation 2) and those whose pod runs an old one, at StepCanaryDone.
type canaryStepPods struct{ updated, old []string }

// podsAtCanaryStep records the fixture's pods when the run passes
// StepCanaryDone, and calls then (nil: nothing) there too.
func podsAtCanaryStep(t *testing.T, f *fixture, then func()) *canaryStepPods {
	at := &canaryStepPods{}
	f.step = func(_ context.Context, step string) {
		if step != StepCanaryDone {
			return
		}
		pods, err := f.client.Tracker().List(corev1.SchemeGroupVersion.WithResource("pods"), corev1.SchemeGroupVersion.WithKind("Pod"), "kube-system")
		if !assert.NoError(t, err) {
			return
		}
		for _, p := range pods.(*corev1.PodList).Items {
			if p.Labels["pod-template-generation"] == "2" {
				at.updated = append(at.updated, p.Spec.NodeName)
			} else {
				at.old = append(at.old, p.Spec.NodeName)
			}
		}
		if then != nil {
			then()
		}
	}
	return at
}

// withResourceVersions gives the fixture's pods a resourceVersion, which
// the pod watch (a RetryWatcher) needs on every event, deletions included.
func withResourceVersions(t *testing.T, f *fixture) {
	t.Helper()
	gvr := corev1.SchemeGroupVersion.WithResource("pods")
	pods, err := f.client.CoreV1().Pods("kube-system").List(context.Background(), metav1.ListOptions{})
	require.NoError(t, err)
	for i := range pods.Items {
		p := &pods.Items[i]
		p.ResourceVersion = fmt.Sprint(2 + i)
		require.NoError(t, f.client.Tracker().Update(gvr, p, "kube-system"))
	}
}

// replayDeletions makes the pod watch replay the pods deleted since the
// list, as the API server's watch from a resourceVersion does (the fake
// tracker's starts empty): the run deletes its first pods before it opens
// the watch. announce is told once the watch is open.
func replayDeletions(f *fixture, announce chan<- struct{}) {
	var mu sync.Mutex
	var gone []runtime.Object
	f.client.PrependReactor("delete", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if obj, err := f.client.Tracker().Get(a.GetResource(), a.GetNamespace(), a.(k8stesting.DeleteAction).GetName()); err == nil {
			mu.Lock()
			gone = append(gone, obj)
			mu.Unlock()
		}
		return false, nil, nil
	})
	f.client.PrependWatchReactor("pods", func(a k8stesting.Action) (bool, watch.Interface, error) {
		tw, err := f.client.Tracker().Watch(a.GetResource(), a.GetNamespace())
		if err != nil {
			return true, nil, err
		}
		mu.Lock()
		replay := append([]runtime.Object{}, gone...)
		mu.Unlock()
		w := &replayWatch{ch: make(chan watch.Event, len(replay)), tw: tw, done: make(chan struct{})}
		for _, obj := range replay {
			w.ch <- watch.Event{Type: watch.Deleted, Object: obj}
		}
		go w.forward()
		announce <- struct{}{}
		return true, w, nil
	})
}

// replayWatch is a pod watch that starts with replayed events, then
// forwards the tracker's.
type replayWatch struct {
	ch   chan watch.Event
	tw   watch.Interface
	done chan struct{}
	once sync.Once
}

func (w *replayWatch) ResultChan() <-chan watch.Event { return w.ch }

func (w *replayWatch) Stop() {
	w.once.Do(func() {
		close(w.done)
		w.tw.Stop()
	})
}

func (w *replayWatch) forward() {
	defer close(w.ch)
	for ev := range w.tw.ResultChan() {
		select {
		case w.ch <- ev:
		case <-w.done:
			return
		}
	}
}

// leftoverCanary makes f's DaemonSet one an earlier canary run left
// half-way: on OnDelete with its own strategy saved, its template at
// generation 2, node-0 on it and the other nodes still on generation 1.
func leftoverCanary(t *testing.T, f *rollingFixture) {
	t.Helper()
	ds := f.daemonSet(t)
	ds.Annotations[rollout.StrategyAnnotation] = `{"type":"RollingUpdate"}`
	ds.Annotations[templateGeneration] = "2"
	ds.Generation = 2
	ds.Spec.UpdateStrategy = appsv1.DaemonSetUpdateStrategy{Type: appsv1.OnDeleteDaemonSetStrategyType}
	ds.Spec.Template.Annotations = map[string]string{rollout.RestartedAtAnnotation: "2026-11-22T11:00:00Z"}
	require.NoError(t, f.client.Tracker().Update(appsv1.SchemeGroupVersion.WithResource("daemonsets"), ds, "kube-system"))
	gvr := corev1.SchemeGroupVersion.WithResource("pods")
	require.NoError(t, f.client.Tracker().Delete(gvr, "kube-system", "kube-proxy-node-0-1"))
	require.NoError(t, f.client.Tracker().Create(gvr, kubeProxyPod("node-0", "2", true), "kube-system"))
	withResourceVersions(t, f.fixture)
}

func (f *fixture) podUIDs(t *testing.T) []string {
	t.Helper()
	pods, err := f.client.CoreV1().Pods("kube-system").List(context.Background(), metav1.ListOptions{})
	require.NoError(t, err)
	var out []string
	for _, p := range pods.Items {
		out = append(out, string(p.UID))
	}
	sort.Strings(out)
	return out
}

// Under --restart never an earlier canary left half-way is not resumed: no
// pod is deleted, the DaemonSet stays as it is (on OnDelete), and the
// result says a restart is owed.
func TestRestartNeverDoesNotResumeALeftoverCanary(t *testing.T) {
	f := newRollingFixture(t, 3)
	leftoverCanary(t, f)
	before, uids := f.daemonSet(t), f.podUIDs(t)
	res, err := f.run(t, Options{Restart: RestartNever})
	require.NoError(t, err)
	assert.Equal(t, uids, f.podUIDs(t), "no pod replaced")
	assert.Equal(t, before, f.daemonSet(t), "the DaemonSet untouched")
	assert.NotContains(t, f.writes(), "delete pods")
	assert.False(t, res.Facts.Restarted)
	assert.True(t, res.Facts.RestartRequired)
	assert.Equal(t, ReasonPending, res.Facts.RestartReason)
	assert.False(t, res.Changed)
	assert.Contains(t, res.Msg, "owed")

	// check mode (with --restart auto) deletes nothing either, and says the
	// real run would change something: it resumes the canary
	res, err = f.run(t, Options{Check: true})
	require.NoError(t, err)
	assert.Equal(t, uids, f.podUIDs(t), "no pod replaced in check mode")
	assert.True(t, res.Changed, "a real run resumes the canary")
}

// A resumed canary replaces pods: the run says so (changed, restarted) and
// writes its intent and outcome to the audit log.
func TestResumedCanaryIsReportedAndAudited(t *testing.T) {
	f := newRollingFixture(t, 3)
	leftoverCanary(t, f)
	uids := f.podUIDs(t)
	f.podController(t, func(node, gen string) *corev1.Pod { return kubeProxyPod(node, gen, true) })
	res, err := f.run(t, Options{})
	require.NoError(t, err)
	assert.True(t, res.Changed)
	assert.True(t, res.Facts.Restarted)
	assert.Equal(t, ReasonPending, res.Facts.RestartReason)
	assert.NotEqual(t, uids, f.podUIDs(t))
	ds := f.daemonSet(t)
	assert.Equal(t, appsv1.RollingUpdateDaemonSetStrategyType, ds.Spec.UpdateStrategy.Type, "strategy restored")
	assert.NotContains(t, ds.Annotations, rollout.StrategyAnnotation)
	lines := readAudit(t, f.audit)
	require.Len(t, lines, 3)
	assert.Equal(t, "plan", lines[0].Phase)
	assert.Equal(t, "intent", lines[1].Phase)
	assert.True(t, lines[1].Restart)
	assert.Equal(t, "outcome", lines[2].Phase)
	assert.Equal(t, "succeeded", lines[2].Outcome)
	assert.NotNil(t, lines[2].Rollout)
}

// A resumed canary waits for a node whose pod the earlier run deleted and
// whose successor the controller had not created (an admission webhook
// refused it, say): the rollout is done only once that node runs a pod of
// the new template too, and the result counts it.
func TestResumedCanaryWaitsForANodeLeftWithoutAPod(t *testing.T) {
	f := newRollingFixture(t, 4)
	leftoverCanary(t, f)
	require.NoError(t, f.client.Tracker().Delete(podsGVR, "kube-system", "kube-proxy-node-1-1"))
	f.podController(t, func(node, gen string) *corev1.Pod {
		// the controller's next sync creates every missing pod, node-1's too
		if _, err := f.client.Tracker().Get(podsGVR, "kube-system", "kube-proxy-node-1-"+gen); err != nil {
			assert.NoError(t, f.client.Tracker().Create(podsGVR, kubeProxyPod("node-1", gen, true), "kube-system"))
		}
		return kubeProxyPod(node, gen, true)
	})
	res, err := f.run(t, Options{Timeout: 10 * time.Second})
	require.NoError(t, err)
	r := res.Facts.Rollout
	assert.Equal(t, [2]int32{4, 4}, [2]int32{r.Desired, r.Updated}, "node-1 is one of the nodes the rollout reached")
	assert.Equal(t, types.UID("node-1-2"), f.podUID(t, "kube-proxy-node-1-2"), "node-1 runs a pod of the new template")
	assert.Equal(t, appsv1.RollingUpdateDaemonSetStrategyType, f.daemonSet(t).Spec.UpdateStrategy.Type, "strategy restored")
}

// A resumed canary whose node without a pod never gets one (something
// other than the config refuses it: an admission webhook, a quota) fails
// at the progress deadline, naming that node, and rolls nothing back: the
// template is an earlier run's, and no rollback would give the node a pod.
func TestResumedCanaryWhoseMissingPodNeverComesFailsWithoutRollback(t *testing.T) {
	f := newRollingFixture(t, 4)
	leftoverCanary(t, f)
	require.NoError(t, f.client.Tracker().Delete(podsGVR, "kube-system", "kube-proxy-node-1-1"))
	f.podController(t, func(node, gen string) *corev1.Pod { return kubeProxyPod(node, gen, true) })
	const deadline = 30 * time.Second
	// the wait's ticker: a deadline at a time
	f.stepWhileWaiting(t, deadline)
	res, err := f.run(t, Options{RollbackOnFailure: true, ProgressDeadline: deadline, Timeout: 10 * time.Second})
	require.Error(t, err)
	require.ErrorIs(t, err, rollout.ErrNoProgress)
	assert.Contains(t, err.Error(), "node-1 (no pod)")
	assert.Contains(t, err.Error(), "the DaemonSet's events explain")
	assert.Contains(t, err.Error(), "nothing rolled back")
	assert.False(t, res.Facts.RolledBack)
	ds := f.daemonSet(t)
	assert.Equal(t, "2", ds.Annotations[templateGeneration], "the earlier run's template stays")
	assert.Equal(t, "2026-11-22T11:00:00Z", ds.Spec.Template.Annotations[rollout.RestartedAtAnnotation])
	_, err = f.client.Tracker().Get(podsGVR, "kube-system", "kube-proxy-node-0-2")
	assert.NoError(t, err, "the earlier run's canary pod is not deleted")
}

// A fresh restart neither waits for nor counts a live node that had no
// pod of the DaemonSet before it (not this run's doing), and says so.
func TestRestartWarnsOfANodeWithoutAPod(t *testing.T) {
	f := newRollingFixture(t, 3)
	require.NoError(t, f.client.Tracker().Delete(podsGVR, "kube-system", "kube-proxy-node-1-1"))
	f.podController(t, func(node, gen string) *corev1.Pod { return kubeProxyPod(node, gen, true) })
	res, err := f.run(t, Options{Spec: configmap.Spec{Server: "https://10.0.0.1:6443"}, Strategy: StrategyCanary, CanaryNodes: 1, Timeout: 10 * time.Second})
	require.NoError(t, err)
	assert.True(t, res.Facts.Restarted)
	r := res.Facts.Rollout
	assert.Equal(t, [2]int32{2, 2}, [2]int32{r.Desired, r.Updated}, "the two nodes with a pod")
	assert.Contains(t, strings.Join(res.Warnings, "\n"), "1 live node(s) have no kube-proxy pod of daemonset kube-system/kube-proxy before the restart: [node-1]")
}

// A raised maxUnavailable an earlier run saved and did not put back (it
// was killed) is restored by the next run, even one with nothing else to
// do: that is a write, reported as a change, saying what it restored.
func TestStaleSavedStrategyRestoredIsAChange(t *testing.T) {
	ds := seedDaemonSet("registry.k8s.io/kube-proxy:v1.33.6")
	ds.Annotations[rollout.StrategyAnnotation] = `{"type":"RollingUpdate","rollingUpdate":{"maxUnavailable":1}}`
	three := intstr.FromInt32(3)
	ds.Spec.UpdateStrategy.RollingUpdate = &appsv1.RollingUpdateDaemonSet{MaxUnavailable: &three}
	f := newFixture(t, seedConfigMap(), ds)
	res, err := f.run(t, Options{Check: true})
	require.NoError(t, err)
	assert.True(t, res.Changed, "check mode says the real run changes something")
	assert.Equal(t, "3", f.daemonSet(t).Spec.UpdateStrategy.RollingUpdate.MaxUnavailable.String(), "check mode writes nothing")
	res, err = f.run(t, Options{})
	require.NoError(t, err)
	got := f.daemonSet(t)
	assert.Equal(t, "1", got.Spec.UpdateStrategy.RollingUpdate.MaxUnavailable.String(), "restored")
	assert.NotContains(t, got.Annotations, rollout.StrategyAnnotation)
	assert.True(t, res.Changed)
	assert.False(t, res.Facts.Restarted)
	assert.Contains(t, res.Msg, "restored the updateStrategy")
	phases := func() []string {
		var out []string
		for _, r := range readAudit(t, f.audit) {
			out = append(out, r.Phase)
		}
		return out
	}
	assert.Equal(t, []string{"plan", "outcome"}, phases(), "a run that writes leaves its plan and its outcome")

	res, err = f.run(t, Options{})
	require.NoError(t, err)
	assert.False(t, res.Changed, "nothing left to restore")
	assert.Equal(t, []string{"plan", "outcome"}, phases(), "a run with nothing to write writes no record")
}

const (
	imageBefore = "registry.k8s.io/kube-proxy:v1.33.6"
	imageAfter  = "registry.k8s.io/kube-proxy:v1.34.4"
)

// An image change (kubeadm's rendering of an upgrade) is rolled like a
// config change: canary first, each node's new pod followed, the config
// left as it was, and the result says which image runs.
func TestImageChangeRollsLikeAConfigChange(t *testing.T) {
	f := newRollingFixture(t, 3)
	var replaced []string
	f.podController(t, func(node, gen string) *corev1.Pod {
		replaced = append(replaced, node)
		return kubeProxyPod(node, gen, true)
	})
	data := f.configMap(t).Data
	res, err := f.run(t, Options{Image: imageAfter, Strategy: StrategyCanary, CanaryNodes: 1, RollbackOnFailure: true, Timeout: 10 * time.Second})
	require.NoError(t, err)
	fa := res.Facts
	assert.True(t, fa.Restarted)
	assert.Equal(t, ReasonImageChanged, fa.RestartReason)
	assert.True(t, fa.ImageChanged)
	assert.Equal(t, imageBefore, fa.ImageBefore)
	assert.Equal(t, imageAfter, fa.Image)
	assert.Equal(t, "v1.34.4", fa.KubeProxyVersion, "the new pods' version")
	assert.Empty(t, fa.ChangedKeys)
	assert.Equal(t, imageAfter, rollout.ContainerImage(f.daemonSet(t), "kube-proxy"))
	assert.Equal(t, []string{"node-0", "node-1", "node-2"}, replaced, "the canary first, then the others")
	assert.Equal(t, data, f.configMap(t).Data, "the config as it was")

	// the rerun finds the image in place: nothing to do
	res, err = f.run(t, Options{Image: imageAfter, Strategy: StrategyCanary, RollbackOnFailure: true, Timeout: 10 * time.Second})
	require.NoError(t, err)
	assert.False(t, res.Changed)
	assert.False(t, res.Facts.ImageChanged)
	assert.Equal(t, imageAfter, res.Facts.Image)
}

// An upgrade whose new image crash-loops kube-proxy stops at the canary
// and is rolled back: the template runs the image before it again, and
// every other node kept its pod.
func TestImageChangeCrashLoopingCanaryIsRolledBack(t *testing.T) {
	f := newRollingFixture(t, 3)
	f.podController(t, func(node, gen string) *corev1.Pod {
		p := kubeProxyPod(node, gen, true)
		if rollout.ContainerImage(f.daemonSet(t), "kube-proxy") == imageAfter {
			p = crashLoopingPod(node, gen)
		}
		return p
	})
	res, err := f.run(t, Options{Image: imageAfter, Strategy: StrategyCanary, CanaryNodes: 1, RollbackOnFailure: true, Timeout: 10 * time.Second})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "CrashLoopBackOff")
	assert.True(t, res.Facts.RolledBack)
	assert.Equal(t, imageBefore, res.Facts.Image, "the image that runs after the rollback")
	assert.Equal(t, imageBefore, rollout.ContainerImage(f.daemonSet(t), "kube-proxy"), "the template runs the image before the upgrade again")
	for _, n := range []string{"node-1", "node-2"} {
		assert.Equal(t, types.UID(n+"-1"), f.podUID(t, "kube-proxy-"+n+"-1"), "node %s never upgraded", n)
	}
}

// Under --restart never an image change is refused: the PATCH would
// restart every pod. Nothing is written.
func TestImageChangeUnderRestartNeverIsRefused(t *testing.T) {
	f := newFixture(t, seedConfigMap(), seedDaemonSet(imageBefore))
	_, err := f.run(t, Options{Image: imageAfter, Restart: RestartNever})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "--restart never")
	assert.Empty(t, f.writes())
}

// The new image's version chooses the probe: from 1.27 to 1.28 the
// readiness probe moves to /livez in the same PATCH as the image, one
// template change, one rollout.
func TestImageChangeTakesTheProbeOfTheNewVersion(t *testing.T) {
	ds := seedDaemonSet("registry.k8s.io/kube-proxy:v1.27.16")
	ds.Spec.Template.Spec.Containers[0].ReadinessProbe.HTTPGet.Path = probe.Healthz
	f := newFixture(t, seedConfigMap(), ds)
	res, err := f.run(t, Options{Image: "registry.k8s.io/kube-proxy:v1.28.15"})
	require.NoError(t, err)
	assert.True(t, res.Facts.Restarted)
	assert.True(t, res.Facts.ProbeChanged)
	assert.Equal(t, "v1.28.15", res.Facts.KubeProxyVersion)
	after := f.daemonSet(t)
	assert.Equal(t, probe.Livez, after.Spec.Template.Spec.Containers[0].ReadinessProbe.HTTPGet.Path)
	assert.Equal(t, "registry.k8s.io/kube-proxy:v1.28.15", rollout.ContainerImage(after, "kube-proxy"))
	assert.Equal(t, rollout.TemplateGeneration(ds)+1, rollout.TemplateGeneration(after), "one template change")
}

func TestDecide(t *testing.T) {
	stamped := func(h string, noEffect ...string) *appsv1.DaemonSet {
		d := &appsv1.DaemonSet{}
		if h != "" {
			d.Annotations = map[string]string{"kube-proxy-sync.io/config-hash": h}
		}
		for _, v := range noEffect {
			d.Annotations["kube-proxy-sync.io/no-effect-hash"] = v
		}
		return d
	}
	cases := []struct {
		name     string
		policy   string
		changed  bool
		noEffect bool
		ds       *appsv1.DaemonSet
		reason   string
		adopt    bool
	}{
		{"in sync", RestartAuto, false, false, stamped("h"), "", false},
		{"changed now", RestartAuto, true, false, stamped("old"), ReasonConfigChanged, false},
		{"owed by an earlier run", RestartAuto, false, false, stamped("old"), ReasonPending, false},
		{"another run already restarted for this data", RestartAuto, true, false, stamped("h"), "", false},
		{"first run adopts", RestartAuto, false, false, stamped(""), "", true},
		{"always", RestartAlways, false, false, stamped("h"), ReasonForced, false},
		{"a change with no effect", RestartAuto, true, true, stamped("old"), "", false},
		{"a change with no effect, always", RestartAlways, true, true, stamped("old"), ReasonForced, false},
		{"pods run it as well (no-effect earlier)", RestartAuto, false, false, stamped("old", "h@old"), "", false},
		{"a record for another stamp is stale", RestartAuto, false, false, stamped("old", "h@older"), ReasonPending, false},
		{"a record for other data", RestartAuto, true, false, stamped("old", "x@old"), ReasonConfigChanged, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, isStamped := tc.ds.Annotations[rollout.HashAnnotation]
			reason, adopt := decide(tc.policy, tc.changed, rollout.Runs(tc.ds, "h"), isStamped, tc.noEffect, false)
			assert.Equal(t, tc.reason, reason)
			assert.Equal(t, tc.adopt, adopt)
		})
	}
}

// A canary the run resumes sends no PATCH to count a restart from: each
// node whose old pod it deletes must show a sync since that delete. A
// kube-proxy that answers healthy with only an older sync (rules not
// synced since the new pod started) fails its node, where a zero restart
// time passed it at once. The earlier run's canary node, restarted before
// this run, is checked as before.
func TestResumedCanaryChecksASyncSinceItsOwnDelete(t *testing.T) {
	f := newRollingFixture(t, 3)
	leftoverCanary(t, f)
	f.podController(t, func(node, gen string) *corev1.Pod { return kubeProxyPod(node, gen, true) })
	start := f.clock.Now()
	var mu sync.Mutex
	asked := map[string]int{}
	f.prober = proberFunc(func(node string) (verify.Health, error) {
		mu.Lock()
		defer mu.Unlock()
		asked[node]++
		// every kube-proxy last synced a minute before the run
		return verify.Health{Code: 200, PerFamily: true, LastSync: start.Add(-time.Minute), NewestSync: start.Add(-time.Minute), CurrentTime: f.clock.Now()}, nil
	})
	// the health poll's ticker, a second at a time
	f.stepWhileWaiting(t, time.Second)
	// the rollout's own deadline far beyond the health check's, which the
	// stepping clock reaches first
	res, err := f.run(t, Options{Connectivity: ConnectivityOptions{Health: verify.Required, HealthTimeout: 5 * time.Second}, ProgressDeadline: 24 * time.Hour, Timeout: time.Minute})
	require.Error(t, err)
	assert.True(t, verify.IsFailure(err), "a node's check failed: %v", err)
	assert.Contains(t, err.Error(), "node node-1")
	assert.Contains(t, err.Error(), "since the restart")
	require.NotNil(t, res.Facts.Connectivity)
	assert.Equal(t, 2, res.Facts.Connectivity.Checked, "node-0, then node-1, the first this run restarted")
	assert.Equal(t, 1, res.Facts.Connectivity.Passed, "node-0: restarted by the earlier run")
}

// The traffic check's target: the ClusterIP and the first TCP port, its
// node port for the nodeport path (refused, before any write, on a Service
// that has none), and the node's InternalIP of the ClusterIP's family.
func TestTrafficTargetPaths(t *testing.T) {
	web := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort, ClusterIP: "10.96.0.10",
			Ports: []corev1.ServicePort{{Port: 80, NodePort: 30080, Protocol: corev1.ProtocolTCP}}}}
	plain := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "plain", Namespace: "default"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, ClusterIP: "10.96.0.11",
			Ports: []corev1.ServicePort{{Port: 443, Protocol: corev1.ProtocolTCP}}}}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}, Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{
		{Type: corev1.NodeHostName, Address: "node-1"}, {Type: corev1.NodeInternalIP, Address: "fd00::7"},
		{Type: corev1.NodeInternalIP, Address: "192.0.2.7"}}}}
	_, kc := kubefake.New(web, plain, node)
	o := ConnectivityOptions{Traffic: "default/web", TrafficPaths: []string{verify.PathNode, verify.PathNodePort}}
	e := &env{o: Options{Namespace: "kube-system", Connectivity: o}, d: Deps{Kube: kc}}

	tr, err := trafficTarget(context.Background(), e, o)
	require.NoError(t, err)
	assert.Equal(t, "10.96.0.10:80", tr.Target)
	assert.Equal(t, int32(30080), tr.NodePort)
	assert.Equal(t, []string{verify.PathNode, verify.PathNodePort}, tr.PathsChecked())
	ip, err := tr.NodeIP(context.Background(), "node-1")
	require.NoError(t, err)
	assert.Equal(t, "192.0.2.7", ip, "the InternalIP of the ClusterIP's family")

	o.Traffic = "default/plain"
	_, err = trafficTarget(context.Background(), e, o)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "--verify-traffic-paths nodeport: service default/plain (type ClusterIP) has no node port on its TCP port 443")

	o.TrafficPaths = []string{verify.PathNode}
	_, err = trafficTarget(context.Background(), e, o)
	assert.NoError(t, err, "no nodeport path: any Service with a ClusterIP")
}
