package verify

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
)

// kubelet plays the node: once the probe pod exists it sets the status
// given, as the kubelet would after running the TCP probe.
func kubelet(status corev1.PodStatus) (*fake.Clientset, *Traffic) {
	cs := fake.NewClientset()
	cs.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		p := a.(k8stesting.CreateAction).GetObject().(*corev1.Pod)
		if p.Name == "" {
			p.Name = p.GenerateName + "x1"
		}
		return false, nil, nil
	})
	w := watch.NewFake()
	cs.PrependWatchReactor("pods", func(k8stesting.Action) (bool, watch.Interface, error) {
		go func() {
			p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "kube-proxy-sync-verify-x1", Namespace: "kube-system"}, Status: status}
			w.Modify(p)
		}()
		return true, w, nil
	})
	tr := &Traffic{Pods: cs.CoreV1().Pods("kube-system"), Namespace: "kube-system", Image: "registry.k8s.io/pause:3.10.1",
		Service: "default/web", Target: "10.96.0.10:80", Timeout: 200 * time.Millisecond}
	return cs, tr
}

func runningStatus() corev1.ContainerStatus {
	return corev1.ContainerStatus{Name: "connect", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}
}

func TestTrafficPasses(t *testing.T) {
	cs, tr := kubelet(corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{runningStatus()},
		Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}})
	require.NoError(t, tr.Check(context.Background(), "node-1"))

	var created *corev1.Pod
	deleted := 0
	for _, a := range cs.Actions() {
		switch a.GetVerb() {
		case "create":
			created = a.(k8stesting.CreateAction).GetObject().(*corev1.Pod)
		case "delete":
			deleted++
		}
	}
	require.NotNil(t, created)
	assert.Equal(t, "node-1", created.Spec.NodeName, "bound to the node, no scheduler")
	assert.True(t, created.Spec.HostNetwork)
	probe := created.Spec.Containers[0].ReadinessProbe.TCPSocket
	assert.Equal(t, "10.96.0.10", probe.Host, "the kubelet connects to the ClusterIP from the node")
	assert.Equal(t, int32(80), probe.Port.IntVal)
	assert.Equal(t, 1, deleted, "the probe pod is removed")
	assert.Equal(t, int64(3), tr.Requests.Load(), "create, watch, delete")
}

func TestTrafficFails(t *testing.T) {
	_, tr := kubelet(corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{runningStatus()},
		Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse}}})
	err := tr.Check(context.Background(), "node-1")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "no TCP connection to Service default/web (10.96.0.10:80) from node node-1")

	_, tr = kubelet(corev1.PodStatus{Phase: corev1.PodPending, ContainerStatuses: []corev1.ContainerStatus{{Name: "connect",
		State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ErrImageNeverPull", Message: "image not present"}}}}})
	err = tr.Check(context.Background(), "node-1")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "cannot run")
	assert.Contains(t, err.Error(), "--verify-traffic-image")
}

// A probe pod an earlier, killed run left behind is removed; other pods stay.
func TestTrafficCleanup(t *testing.T) {
	left := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "kube-proxy-sync-verify-old", Namespace: "kube-system",
		Labels: map[string]string{ProbeLabel: ProbeLabelValue}}}
	other := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "kube-proxy-abc", Namespace: "kube-system",
		Labels: map[string]string{"k8s-app": "kube-proxy"}}}
	cs := fake.NewClientset(left, other)
	tr := &Traffic{Pods: cs.CoreV1().Pods("kube-system"), Namespace: "kube-system"}
	warning, err := tr.Cleanup(context.Background(), clock.RealClock{})
	require.NoError(t, err)
	assert.Empty(t, warning, "the fake's delete is immediate: nothing forced")
	pods, err := cs.CoreV1().Pods("kube-system").List(context.Background(), metav1.ListOptions{})
	require.NoError(t, err)
	require.Len(t, pods.Items, 1)
	assert.Equal(t, "kube-proxy-abc", pods.Items[0].Name)
}

func created(cs *fake.Clientset) *corev1.Pod {
	for _, a := range cs.Actions() {
		if a.GetVerb() == "create" {
			return a.(k8stesting.CreateAction).GetObject().(*corev1.Pod)
		}
	}
	return nil
}

// The pod path: a pod in the pod network that connects itself and exits 0.
func TestTrafficPodPath(t *testing.T) {
	cs, tr := kubelet(corev1.PodStatus{Phase: corev1.PodSucceeded})
	tr.Paths, tr.PodImage = []string{PathPod}, "example.test/agent:1"
	require.NoError(t, tr.Check(context.Background(), "node-1"))
	p := created(cs)
	require.NotNil(t, p)
	assert.False(t, p.Spec.HostNetwork, "in the pod network: its packets enter the node through PREROUTING")
	assert.Equal(t, "node-1", p.Spec.NodeName)
	assert.Equal(t, PathPod, p.Labels[PathLabel])
	assert.Equal(t, ProbeLabelValue, p.Labels[ProbeLabel])
	c := p.Spec.Containers[0]
	assert.Equal(t, "example.test/agent:1", c.Image)
	assert.Equal(t, []string{"connect", "10.96.0.10", "80"}, c.Command[len(c.Command)-3:], "the ClusterIP, as the script's arguments")
	assert.Nil(t, c.ReadinessProbe, "the kubelet's probes start in the node's namespace: not used here")
	assert.Equal(t, int64(3), tr.Requests.Load(), "create, watch, delete")
}

// An image without bash or nc is the image's fault, said with the flag to change.
func TestTrafficPodPathWithoutClient(t *testing.T) {
	_, tr := kubelet(corev1.PodStatus{Phase: corev1.PodFailed, ContainerStatuses: []corev1.ContainerStatus{{Name: "connect",
		State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 3, Reason: "Error",
			Message: "the image has neither bash nor nc to connect with"}}}}})
	tr.Paths, tr.PodImage = []string{PathPod}, "registry.k8s.io/pause:3.10.1"
	err := tr.Check(context.Background(), "node-1")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "path pod: ")
	assert.Contains(t, err.Error(), "neither bash nor nc")
	assert.Contains(t, err.Error(), "--verify-traffic-pod-image")
}

// A pod that never connects: the path and the node are named.
func TestTrafficPodPathFails(t *testing.T) {
	_, tr := kubelet(corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{runningStatus()}})
	tr.Paths, tr.PodImage = []string{PathPod}, "example.test/agent:1"
	err := tr.Check(context.Background(), "node-1")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "path pod: no TCP connection to Service default/web (10.96.0.10:80) from a pod on node node-1")
}

// The nodeport path: the kubelet connects to the node's address and the node port.
func TestTrafficNodePortPath(t *testing.T) {
	cs, tr := kubelet(corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{runningStatus()},
		Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}})
	tr.Paths, tr.NodePort = []string{PathNodePort}, 30080
	tr.NodeIP = func(_ context.Context, node string) (string, error) {
		assert.Equal(t, "node-1", node)
		return "192.0.2.7", nil
	}
	require.NoError(t, tr.Check(context.Background(), "node-1"))
	p := created(cs)
	require.NotNil(t, p)
	assert.True(t, p.Spec.HostNetwork)
	probe := p.Spec.Containers[0].ReadinessProbe.TCPSocket
	assert.Equal(t, "192.0.2.7", probe.Host)
	assert.Equal(t, int32(30080), probe.Port.IntVal)
	assert.Equal(t, int64(4), tr.Requests.Load(), "the node's address, create, watch, delete")

	tr.NodePort = 0
	err := tr.Check(context.Background(), "node-1")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "path nodeport: service default/web has no node port")
}

// The pod path is tried once before any restart: the image's fault is an
// error then, a path that fails already only a warning; without the pod
// path nothing is created.
func TestTrafficPreflight(t *testing.T) {
	cs, tr := kubelet(corev1.PodStatus{})
	warning, err := tr.Preflight(context.Background(), "node-1")
	require.NoError(t, err)
	assert.Empty(t, warning)
	assert.Empty(t, cs.Actions(), "node path only: no preflight")

	_, tr = kubelet(corev1.PodStatus{Phase: corev1.PodPending, ContainerStatuses: []corev1.ContainerStatus{{Name: "connect",
		State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ErrImageNeverPull", Message: "image not present"}}}}})
	tr.Paths, tr.PodImage = []string{PathNode, PathPod}, "example.test/agent:1"
	_, err = tr.Preflight(context.Background(), "node-1")
	require.ErrorIs(t, err, ErrCannotRun)
	assert.Contains(t, err.Error(), "--verify-traffic-pod-image")

	_, tr = kubelet(corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{runningStatus()}})
	tr.Paths, tr.PodImage = []string{PathPod}, "example.test/agent:1"
	warning, err = tr.Preflight(context.Background(), "node-1")
	require.NoError(t, err)
	assert.Contains(t, warning, "no TCP connection to Service default/web (10.96.0.10:80) from a pod on node node-1")
}

// Probe pods are deleted gracefully, and RemoveProbePods returns only once
// their kubelet has stopped them and the objects are gone: until then a
// probe may still go to the Service's ClusterIP, which must keep its
// rules. One whose kubelet never confirms (a NotReady node) is
// force-deleted ProbePodsGone after its grace period ended and named,
// never an error: it must not block every later run that checks traffic.
func TestRemoveProbePodsWaitsForTheKubelet(t *testing.T) {
	probe := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "kube-proxy-sync-verify-node-1", Namespace: "kube-system", UID: "u1",
		Labels: map[string]string{ProbeLabel: ProbeLabelValue}}}
	for _, kubeletStops := range []bool{true, false} {
		clk := clocktesting.NewFakeClock(time.Now())
		cs := fake.NewClientset(probe.DeepCopy())
		var graces []int64
		// the API server: a graceful delete marks the pod, the kubelet
		// removes it; one with no grace period goes at once
		cs.PrependReactor("delete", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
			grace := a.(k8stesting.DeleteActionImpl).DeleteOptions.GracePeriodSeconds
			require.NotNil(t, grace)
			graces = append(graces, *grace)
			if *grace == 0 {
				return false, nil, nil
			}
			p := probe.DeepCopy()
			p.DeletionTimestamp = &metav1.Time{Time: clk.Now().Add(time.Duration(*grace) * time.Second)}
			p.DeletionGracePeriodSeconds = grace
			return true, nil, cs.Tracker().Update(corev1.SchemeGroupVersion.WithResource("pods"), p, "kube-system")
		})
		watching := make(chan struct{})
		cs.PrependWatchReactor("pods", func(a k8stesting.Action) (bool, watch.Interface, error) {
			w, err := cs.Tracker().Watch(corev1.SchemeGroupVersion.WithResource("pods"), "kube-system")
			close(watching)
			return true, w, err
		})
		stopped := make(chan struct{})
		go func() {
			defer close(stopped)
			<-watching
			if kubeletStops {
				assert.NoError(t, cs.Tracker().Delete(corev1.SchemeGroupVersion.WithResource("pods"), "kube-system", probe.Name))
				return
			}
			// the kubelet never answers: the wait ends on its clock
			assert.Eventually(t, clk.HasWaiters, 10*time.Second, time.Millisecond, "RemoveProbePods waits on its clock")
			clk.Step(time.Second + ProbePodsGone - time.Millisecond)
			assert.False(t, probeGone(t, cs), "not forced before the wait ends")
			clk.Step(time.Millisecond)
		}()
		r, err := RemoveProbePods(context.Background(), clk, cs.CoreV1().Pods("kube-system"), "kube-system")
		<-stopped
		require.NoError(t, err)
		assert.True(t, probeGone(t, cs))
		if kubeletStops {
			assert.Equal(t, []int64{1}, graces, "graceful: the kubelet stops the pod before it goes")
			assert.Equal(t, 4, r.Requests, "list, delete, list, watch")
			assert.Empty(t, r.Forced)
			assert.Empty(t, r.Warning("kube-system"))
			continue
		}
		assert.Equal(t, []int64{1, 0}, graces, "graceful first, forced once the wait ended")
		assert.Equal(t, 5, r.Requests, "list, delete, list, watch, delete")
		assert.Equal(t, []string{probe.Name}, r.Forced)
		assert.Contains(t, r.Warning("kube-system"), "kube-proxy-sync-verify-node-1 in kube-system force-deleted: not gone 30s after their grace period ended")
	}
}

// A probe pod whose grace period ended long ago (a killed run's, on a
// node gone since) is forced at once, with no wait; one forced already and
// held by a finalizer is not waited for again.
func TestRemoveProbePodsForcesALongTerminatingPodAtOnce(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	long := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "kube-proxy-sync-verify-node-1", Namespace: "kube-system", UID: "u1",
		Labels:            map[string]string{ProbeLabel: ProbeLabelValue},
		DeletionTimestamp: &metav1.Time{Time: clk.Now().Add(-time.Hour)}, DeletionGracePeriodSeconds: ptr.To(int64(1))}}
	held := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "kube-proxy-sync-verify-node-2", Namespace: "kube-system", UID: "u2",
		Labels:            map[string]string{ProbeLabel: ProbeLabelValue},
		DeletionTimestamp: &metav1.Time{Time: clk.Now()}, DeletionGracePeriodSeconds: ptr.To(int64(0)), Finalizers: []string{"example.com/hold"}}}
	cs := fake.NewClientset(long, held)
	cs.PrependReactor("delete", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		d := a.(k8stesting.DeleteActionImpl)
		assert.Equal(t, long.Name, d.Name, "only the pod not forced yet")
		assert.EqualValues(t, 0, *d.DeleteOptions.GracePeriodSeconds)
		return false, nil, nil
	})
	cs.PrependWatchReactor("pods", func(a k8stesting.Action) (bool, watch.Interface, error) {
		return true, nil, errors.New("no wait: its grace period ended more than ProbePodsGone ago")
	})
	r, err := RemoveProbePods(context.Background(), clk, cs.CoreV1().Pods("kube-system"), "kube-system")
	require.NoError(t, err)
	assert.Equal(t, []string{long.Name}, r.Forced)
	assert.Equal(t, 3, r.Requests, "list, list, delete")
	_, err = cs.CoreV1().Pods("kube-system").Get(context.Background(), long.Name, metav1.GetOptions{})
	assert.True(t, apierrors.IsNotFound(err))
}

func probeGone(t *testing.T, cs *fake.Clientset) bool {
	_, err := cs.CoreV1().Pods("kube-system").Get(context.Background(), "kube-proxy-sync-verify-node-1", metav1.GetOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		t.Errorf("get the probe pod: %v", err)
	}
	return apierrors.IsNotFound(err)
}

// The wait is on the tool's clock from its own delete: an API server whose
// clock is an hour behind (the pod's deletionTimestamp long past) does not
// get a pod forced that its kubelet is still stopping. A watch that ends
// early is no error either: the wait runs out on the clock, then what is
// left is forced.
func TestRemoveProbePodsWaitsOnItsOwnClock(t *testing.T) {
	probe := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "kube-proxy-sync-verify-node-1", Namespace: "kube-system", UID: "u1",
		Labels: map[string]string{ProbeLabel: ProbeLabelValue}}}
	for _, watchCloses := range []bool{false, true} {
		clk := clocktesting.NewFakeClock(time.Now())
		cs := fake.NewClientset(probe.DeepCopy())
		var graces []int64
		cs.PrependReactor("delete", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
			grace := a.(k8stesting.DeleteActionImpl).DeleteOptions.GracePeriodSeconds
			graces = append(graces, *grace)
			if *grace == 0 {
				return false, nil, nil
			}
			p := probe.DeepCopy()
			// the API server's clock, an hour behind the tool's
			p.DeletionTimestamp = &metav1.Time{Time: clk.Now().Add(-time.Hour)}
			p.DeletionGracePeriodSeconds = grace
			return true, nil, cs.Tracker().Update(corev1.SchemeGroupVersion.WithResource("pods"), p, "kube-system")
		})
		watching := make(chan struct{})
		cs.PrependWatchReactor("pods", func(a k8stesting.Action) (bool, watch.Interface, error) {
			defer close(watching)
			if watchCloses {
				w := watch.NewFake()
				w.Stop()
				return true, w, nil
			}
			w, err := cs.Tracker().Watch(corev1.SchemeGroupVersion.WithResource("pods"), "kube-system")
			return true, w, err
		})
		stopped := make(chan struct{})
		go func() {
			defer close(stopped)
			<-watching
			if !watchCloses {
				assert.NoError(t, cs.Tracker().Delete(corev1.SchemeGroupVersion.WithResource("pods"), "kube-system", probe.Name))
				return
			}
			assert.Eventually(t, clk.HasWaiters, 10*time.Second, time.Millisecond, "the wait goes on on the clock")
			clk.Step(time.Second + ProbePodsGone)
		}()
		r, err := RemoveProbePods(context.Background(), clk, cs.CoreV1().Pods("kube-system"), "kube-system")
		<-stopped
		require.NoError(t, err)
		assert.True(t, probeGone(t, cs))
		if !watchCloses {
			assert.Equal(t, []int64{1}, graces, "waited for the kubelet: not forced")
			assert.Empty(t, r.Forced)
			continue
		}
		assert.Equal(t, []int64{1, 0}, graces, "forced once the wait ran out")
		assert.Equal(t, []string{probe.Name}, r.Forced)
	}
}

// perPath plays the kubelets of a run whose paths fare differently: each
// probe pod, once watched, gets the status of its path (connected or
// not). It returns the paths of the pods in the order they were created.
func perPath(connects map[string]bool) (*Traffic, func() []string) {
	cs := fake.NewClientset()
	var mu sync.Mutex
	var order []string
	pathOf := map[string]string{}
	cs.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		p := a.(k8stesting.CreateAction).GetObject().(*corev1.Pod)
		mu.Lock()
		defer mu.Unlock()
		p.Name = p.GenerateName + fmt.Sprint(len(order))
		order = append(order, p.Labels[PathLabel])
		pathOf[p.Name] = p.Labels[PathLabel]
		return false, nil, nil
	})
	cs.PrependWatchReactor("pods", func(a k8stesting.Action) (bool, watch.Interface, error) {
		name, _ := a.(k8stesting.WatchAction).GetWatchRestrictions().Fields.RequiresExactMatch("metadata.name")
		mu.Lock()
		path := pathOf[name]
		mu.Unlock()
		st := corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{runningStatus()},
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse}}}
		switch {
		case connects[path] && path == PathPod:
			st = corev1.PodStatus{Phase: corev1.PodSucceeded}
		case connects[path]:
			st.Conditions[0].Status = corev1.ConditionTrue
		}
		w := watch.NewFake()
		go w.Modify(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "kube-system"}, Status: st})
		return true, w, nil
	})
	tr := &Traffic{Pods: cs.CoreV1().Pods("kube-system"), Namespace: "kube-system", Image: "registry.k8s.io/pause:3.10.1",
		PodImage: "example.test/agent:1", Service: "kube-system/kube-proxy-sync-probe", Target: "10.96.0.20:10256",
		Paths: AllPaths, NodePort: 30256, Timeout: 200 * time.Millisecond,
		NodeIP: func(context.Context, string) (string, error) { return "192.0.2.7", nil }}
	return tr, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(order)
	}
}

// The run's own Service is proven in a node's rules by the nodeport path,
// which never leaves the node, before anything connects to its ClusterIP:
// nothing else is tried while the NodePort does not connect. A Service
// that was there before the run, or a check without the nodeport path,
// tries nothing here.
func TestTrafficInRulesConnectsToTheNodePortFirst(t *testing.T) {
	tr, order := perPath(map[string]bool{PathNodePort: true})
	tr.Made = time.Now()
	require.NoError(t, tr.InRules(context.Background(), "node-1"))
	assert.Equal(t, []string{PathNodePort}, order())

	tr, order = perPath(map[string]bool{PathNode: true, PathPod: true})
	tr.Made = time.Now()
	err := tr.InRules(context.Background(), "node-1")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "path nodeport, tried first so that no connection to the ClusterIP leaves the node")
	assert.Contains(t, err.Error(), "no TCP connection to Service kube-system/kube-proxy-sync-probe (192.0.2.7:30256) from node node-1")
	assert.Equal(t, []string{PathNodePort}, order(), "the ClusterIP paths are not tried")

	tr, order = perPath(nil)
	require.NoError(t, tr.InRules(context.Background(), "node-1"), "a Service that was there before the run")
	tr.Made, tr.Paths = time.Now(), []string{PathNode, PathPod}
	require.NoError(t, tr.InRules(context.Background(), "node-1"), "no nodeport path: /healthz alone (WaitSync)")
	assert.Empty(t, order())
}
