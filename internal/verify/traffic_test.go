package verify

import (
	"context"
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
	require.NoError(t, tr.Cleanup(context.Background()))
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
// rules. One that outlives the wait is named.
func TestRemoveProbePodsWaitsForTheKubelet(t *testing.T) {
	probe := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "kube-proxy-sync-verify-node-1", Namespace: "kube-system", UID: "u1",
		Labels: map[string]string{ProbeLabel: ProbeLabelValue}}}
	for _, kubeletStops := range []bool{true, false} {
		cs := fake.NewClientset(probe.DeepCopy())
		var grace *int64
		// the API server: a graceful delete marks the pod, the kubelet removes it
		cs.PrependReactor("delete", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
			grace = a.(k8stesting.DeleteActionImpl).DeleteOptions.GracePeriodSeconds
			p := probe.DeepCopy()
			p.DeletionTimestamp = &metav1.Time{Time: time.Now()}
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
			}
		}()
		n, err := RemoveProbePods(context.Background(), cs.CoreV1().Pods("kube-system"), "kube-system", 100*time.Millisecond)
		<-stopped
		require.NotNil(t, grace)
		assert.EqualValues(t, 1, *grace, "graceful: the kubelet stops the pod before it goes")
		assert.Equal(t, 4, n, "list, delete, list, watch")
		if kubeletStops {
			require.NoError(t, err)
			_, err := cs.CoreV1().Pods("kube-system").Get(context.Background(), probe.Name, metav1.GetOptions{})
			assert.True(t, apierrors.IsNotFound(err))
			continue
		}
		require.Error(t, err)
		assert.Contains(t, err.Error(), "kube-proxy-sync-verify-node-1 in kube-system not gone within 100ms")
	}
}
