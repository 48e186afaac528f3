package verify

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
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
