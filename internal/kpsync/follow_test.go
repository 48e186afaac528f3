package kpsync

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	k8stesting "k8s.io/client-go/testing"

	"github.com/kube-proxy-sync/kube-proxy-sync/internal/configmap"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/rollout"
)

// kubeProxyPod is the DaemonSet's pod on node, of template generation gen:
// its controller ownerReference names the seed DaemonSet (dsUID). It has a
// resourceVersion, which a pod watch (RetryWatcher) needs in every event.
func kubeProxyPod(node, gen string, ready bool) *corev1.Pod {
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "kube-proxy-" + node + "-" + gen, Namespace: "kube-system", UID: types.UID(node + "-" + gen), ResourceVersion: "1",
			Labels:          map[string]string{"k8s-app": "kube-proxy", "pod-template-generation": gen},
			OwnerReferences: []metav1.OwnerReference{controlledBy(dsUID)}},
		Spec:   corev1.PodSpec{NodeName: node},
		Status: corev1.PodStatus{Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: status}}},
	}
}

// crashLoopingPod is kubeProxyPod on node, of template generation gen,
// whose container waits in CrashLoopBackOff after 3 restarts: a new
// template that cannot run.
func crashLoopingPod(node, gen string) *corev1.Pod {
	p := kubeProxyPod(node, gen, false)
	p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "kube-proxy", RestartCount: 3,
		State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}}}}
	return p
}

// controlledBy is the controller ownerReference of a pod of the DaemonSet
// kube-system/kube-proxy with this UID.
func controlledBy(uid types.UID) metav1.OwnerReference {
	return *metav1.NewControllerRef(&appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: "kube-proxy", UID: uid}}, appsv1.SchemeGroupVersion.WithKind("DaemonSet"))
}

// liveFleet is the seed ConfigMap, ds, and n live nodes node-0... each
// running a Ready pod of template generation 1.
func liveFleet(ds *appsv1.DaemonSet, n int) []runtime.Object {
	objs := []runtime.Object{seedConfigMap(), ds}
	for i := range n {
		node := fmt.Sprintf("node-%d", i)
		objs = append(objs,
			&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}, Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}}},
			kubeProxyPod(node, "1", true))
	}
	return objs
}

// rollingFixture is a rolled-out DaemonSet on n live nodes, each with a
// Ready pod of template generation 1. Its restart PATCH moves the template
// generation to 2 (newFixture's fake does as the API server does), and its
// DaemonSet watch is a fake watcher the test drives, standing in for the
// controller's status writes. pods and watches record the watches opened.
type rollingFixture struct {
	*fixture
	watches    chan *watch.FakeWatcher
	podWatches chan struct{}
	n          int
}

func newRollingFixture(t *testing.T, n int) *rollingFixture {
	t.Helper()
	ds := seedDaemonSet("registry.k8s.io/kube-proxy:v1.33.6")
	ds.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"k8s-app": "kube-proxy"}}
	ds.Annotations["deprecated.daemonset.template.generation"] = "1"
	ds.Status = appsv1.DaemonSetStatus{ObservedGeneration: 1, DesiredNumberScheduled: int32(n), UpdatedNumberScheduled: int32(n), NumberAvailable: int32(n), NumberReady: int32(n)}
	f := &rollingFixture{fixture: newFixture(t, liveFleet(ds, n)...), watches: make(chan *watch.FakeWatcher, 1), podWatches: make(chan struct{}, 10), n: n}
	// a pod list at a resourceVersion, which a pod watch (RetryWatcher) needs
	f.client.PrependReactor("list", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		handled, obj, err := k8stesting.ObjectReaction(f.client.Tracker())(a)
		if list, ok := obj.(*corev1.PodList); ok {
			list.ResourceVersion = "1"
		}
		return handled, obj, err
	})
	f.client.PrependWatchReactor("daemonsets", func(k8stesting.Action) (bool, watch.Interface, error) {
		w := watch.NewFake()
		f.watches <- w
		return true, w, nil
	})
	// the tracker's own pod watch, announced once it is registered, so
	// that a test changes pods only when the change is seen
	f.client.PrependWatchReactor("pods", func(a k8stesting.Action) (bool, watch.Interface, error) {
		w, err := f.client.Tracker().Watch(a.GetResource(), a.GetNamespace())
		if err == nil {
			f.podWatches <- struct{}{}
		}
		return true, w, err
	})
	return f
}

// status is the DaemonSet's status write for generation 2.
func (f *rollingFixture) status(rv string, updated, available int) *appsv1.DaemonSet {
	return &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: "kube-proxy", Namespace: "kube-system", ResourceVersion: rv, Generation: 2},
		Status: appsv1.DaemonSetStatus{ObservedGeneration: 2, DesiredNumberScheduled: int32(f.n),
			UpdatedNumberScheduled: int32(updated), NumberAvailable: int32(available), NumberReady: int32(available)},
	}
}

// replace puts a pod of generation 2 on node in place of generation 1's
// (from the test's driver goroutine: assert, not require).
func (f *rollingFixture) replace(t *testing.T, p *corev1.Pod) {
	t.Helper()
	gvr := corev1.SchemeGroupVersion.WithResource("pods")
	assert.NoError(t, f.client.Tracker().Delete(gvr, "kube-system", "kube-proxy-"+p.Spec.NodeName+"-1"))
	assert.NoError(t, f.client.Tracker().Create(gvr, p, "kube-system"))
}

func (f *fixture) count(verb, resource string) int {
	n := 0
	for _, a := range f.client.Actions() {
		if a.GetVerb() == verb && a.GetResource().Resource == resource {
			n++
		}
	}
	return n
}

// A healthy rolling restart is followed through the DaemonSet's status,
// like `kubectl rollout status`, and confirmed by one list of the pods: no
// pod watch, whose thousands of events cost a large cluster's control plane.
func TestRollingRestartFollowsTheDaemonSetNotThePods(t *testing.T) {
	f := newRollingFixture(t, 5)
	go func() {
		w := <-f.watches
		w.Modify(f.status("301", 2, 4))
		for i := range f.n {
			f.replace(t, kubeProxyPod(fmt.Sprintf("node-%d", i), "2", true))
		}
		w.Modify(f.status("302", 5, 5))
	}()
	res, err := f.run(t, Options{Spec: configmap.Spec{Server: "https://10.0.0.1:6443"}, RollbackOnFailure: true})
	require.NoError(t, err)
	assert.True(t, res.Facts.Restarted)
	r := res.Facts.Rollout
	assert.Equal(t, [3]int32{5, 5, 5}, [3]int32{r.Desired, r.Updated, r.Available}, "from the pods")
	assert.Equal(t, 1, r.MaxUnavailable, "from the status: 5 desired, 4 ready")
	assert.Equal(t, 1, f.count("watch", "daemonsets"))
	assert.Zero(t, f.count("watch", "pods"), "no pod watch")
	assert.Equal(t, 2, f.count("list", "pods"), "before the restart, and once complete (that list also says which pods still mount the record)")
}

// The progress deadline is one clock over the whole wait: the time spent
// following the status counts when the pods are followed after it, and
// the wait ends at the deadline, rolled back.
func TestProgressDeadlineSpansTheStatusAndThePods(t *testing.T) {
	f := newRollingFixture(t, 5)
	go func() {
		<-f.watches               // the status is followed; it never moves
		f.clock.Step(statusStall) // so it stalls: the pods are followed
		<-f.podWatches
		f.clock.Step(30*time.Second - statusStall) // 30s without progress
	}()
	res, err := f.run(t, Options{Spec: configmap.Spec{Server: "https://10.0.0.1:6443"}, RollbackOnFailure: true,
		ProgressDeadline: 30 * time.Second, Timeout: 10 * time.Second})
	require.Error(t, err)
	require.ErrorIs(t, err, rollout.ErrNoProgress, "the deadline, not the --timeout")
	assert.Contains(t, err.Error(), "no node finished for 30s (progress deadline")
	assert.True(t, res.Facts.RolledBack)
}

// When the status stops moving, the pods say why: here a pod of the new
// template in CrashLoopBackOff, which fails the rollout and rolls it back,
// as when the pods are followed from the start.
func TestRollingRestartLooksAtThePodsWhenTheStatusStalls(t *testing.T) {
	f := newRollingFixture(t, 5)
	go func() {
		w := <-f.watches
		f.replace(t, crashLoopingPod("node-0", "2"))
		// once the third is taken, the follower has handled the first
		// (the watch hands on one event at a time), its last progress
		w.Modify(f.status("301", 1, 4))
		w.Modify(f.status("302", 1, 4))
		w.Modify(f.status("303", 1, 4))
		assert.Equal(t, 1, f.count("list", "pods"), "still following the status, the pods not listed again")
		f.clock.Step(statusStall)
	}()
	res, err := f.run(t, Options{Spec: configmap.Spec{Server: "https://10.0.0.1:6443"}, RollbackOnFailure: true})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "rolled back")
	assert.Contains(t, err.Error(), "node node-0, pod kube-proxy-node-0-2: container kube-proxy is waiting in CrashLoopBackOff")
	assert.True(t, res.Facts.RolledBack)
	assert.Equal(t, 2, f.count("list", "pods"), "before the restart, and once the status stalled")
	assert.Equal(t, seedConfigMap().Data, f.configMap(t).Data, "rolled back")
}

// A status that says complete is not trusted alone: a node whose new pod
// is not Ready in the list that confirms it is waited for through the pods.
func TestRollingRestartCompleteStatusIsCheckedAgainstThePods(t *testing.T) {
	f := newRollingFixture(t, 5)
	go func() {
		w := <-f.watches
		for i := 1; i < f.n; i++ {
			f.replace(t, kubeProxyPod(fmt.Sprintf("node-%d", i), "2", true))
		}
		late := kubeProxyPod("node-0", "2", false)
		late.ResourceVersion = "10"
		f.replace(t, late)
		w.Modify(f.status("302", 5, 5)) // the controller's status runs ahead
		<-f.podWatches
		ready := kubeProxyPod("node-0", "2", true)
		ready.ResourceVersion = "11"
		assert.NoError(t, f.client.Tracker().Update(corev1.SchemeGroupVersion.WithResource("pods"), ready, "kube-system"))
	}()
	res, err := f.run(t, Options{Spec: configmap.Spec{Server: "https://10.0.0.1:6443"}, RollbackOnFailure: true})
	require.NoError(t, err)
	r := res.Facts.Rollout
	assert.Equal(t, [3]int32{5, 5, 5}, [3]int32{r.Desired, r.Updated, r.Available})
	assert.Equal(t, 1, f.count("watch", "pods"), "node-0 waited for through the pods")
	assert.Equal(t, 2, f.count("list", "pods"), "before the restart, and once complete (the pods then followed say which still mount the record)")
}
