//go:build e2e

package e2e

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/kube-proxy-sync/kube-proxy-sync/test/e2e/cluster"
)

// crashLoopError is what the kubelet reports as the last termination of a
// kube-proxy that cannot start (measured on a kind node whose
// /proc/sys/net/netfilter is read-only).
const crashLoopError = "open /proc/sys/net/netfilter/nf_conntrack_max: permission denied"

// templateGeneration is the generation the DaemonSet's next pods will be
// labelled with after one more template change.
func templateGeneration(t *testing.T, ds *appsv1.DaemonSet) int64 {
	t.Helper()
	g, err := strconv.ParseInt(ds.Annotations["deprecated.daemonset.template.generation"], 10, 64)
	require.NoError(t, err)
	return g
}

// podBreaker plays a kubelet that cannot run kube-proxy: every pod of one
// template generation gets the status of a container in CrashLoopBackOff
// (kwok's own status, if it gets there first, is overwritten).
type podBreaker struct {
	mu     sync.Mutex
	broken map[string]brokenPod // by node
	stop   func()
}

func breakPodsOfGeneration(t *testing.T, c *cluster.Cluster, gen int64) *podBreaker {
	t.Helper()
	b := &podBreaker{broken: map[string]brokenPod{}}
	pods := c.Client.CoreV1().Pods(c.Namespace)
	label := strconv.FormatInt(gen, 10)
	b.stop = onPodEvents(t, c, false, func(ctx context.Context, p *corev1.Pod) {
		if p.DeletionTimestamp != nil || p.Labels["pod-template-generation"] != label || p.Spec.NodeName == "" || crashLooping(p) {
			return
		}
		setCrashLoop(p)
		if _, err := pods.UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil && !apierrors.IsConflict(err) && !apierrors.IsNotFound(err) && ctx.Err() == nil {
			t.Errorf("break pod %s: %v", p.Name, err)
		}
		b.mu.Lock()
		b.broken[p.Spec.NodeName] = brokenPod{p.UID, p.Name}
		b.mu.Unlock()
	})
	return b
}

type brokenPod struct {
	UID  types.UID
	Name string
}

// Stop ends the breaker and returns the pods it broke, by node.
func (b *podBreaker) Stop() map[string]brokenPod {
	b.stop()
	b.mu.Lock()
	defer b.mu.Unlock()
	out := map[string]brokenPod{}
	for n, uid := range b.broken {
		out[n] = uid
	}
	return out
}

func crashLooping(p *corev1.Pod) bool {
	for _, cs := range p.Status.ContainerStatuses {
		if cs.State.Waiting != nil && cs.State.Waiting.Reason == "CrashLoopBackOff" {
			return !podIsReady(p)
		}
	}
	return false
}

// setCrashLoop writes the status a kubelet reports for a container that
// exits at start-up, again and again.
func setCrashLoop(p *corev1.Pod) {
	now := metav1.Now()
	p.Status.Phase = corev1.PodRunning
	if p.Status.PodIP == "" { // kwok's pod stages only pick up pods without one
		p.Status.PodIP = "127.1.0.1"
		p.Status.PodIPs = []corev1.PodIP{{IP: "127.1.0.1"}}
	}
	p.Status.Conditions = []corev1.PodCondition{
		{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: now},
		{Type: corev1.PodInitialized, Status: corev1.ConditionTrue, LastTransitionTime: now},
		{Type: corev1.ContainersReady, Status: corev1.ConditionFalse, Reason: "ContainersNotReady", LastTransitionTime: now},
		{Type: corev1.PodReady, Status: corev1.ConditionFalse, Reason: "ContainersNotReady", LastTransitionTime: now},
	}
	var statuses []corev1.ContainerStatus
	for _, ct := range p.Spec.Containers {
		statuses = append(statuses, corev1.ContainerStatus{
			Name: ct.Name, Image: ct.Image, RestartCount: 1,
			State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{
				Reason: "CrashLoopBackOff", Message: "back-off 10s restarting failed container=" + ct.Name + " pod=" + p.Name,
			}},
			LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
				ExitCode: 1, Reason: "Error", Message: crashLoopError, StartedAt: now, FinishedAt: now,
			}},
		})
	}
	p.Status.ContainerStatuses = statuses
}

// untouched lists the nodes whose pod is still the one of before.
func untouched(before, after map[string]types.UID) []string {
	var out []string
	for n, uid := range before {
		if after[n] == uid {
			out = append(out, n)
		}
	}
	return out
}

// keepUnready plays a kube-proxy that runs but never passes its readiness
// probe on the given nodes (a node whose network is broken, a node being
// deleted where /healthz fails): every pod there, old or new, is kept not
// Ready, without any sign of crashing. kwok stops managing the nodes, so
// that it never flashes a new pod there Ready first; their Ready condition
// stays True until the node lifecycle controller's grace period (40s)
// runs out, longer than a test here takes.
func keepUnready(t *testing.T, c *cluster.Cluster, nodes ...string) {
	t.Helper()
	for _, n := range nodes {
		unmanage(t, c, n)
	}
	pods := c.Client.CoreV1().Pods(c.Namespace)
	on := map[string]bool{}
	for _, n := range nodes {
		on[n] = true
	}
	unready := func(ctx context.Context, p *corev1.Pod) {
		if !on[p.Spec.NodeName] || p.DeletionTimestamp != nil || (p.Status.PodIP != "" && !podIsReady(p)) {
			return
		}
		if p.Status.PodIP == "" { // kwok's pod stages only pick up pods without one
			p.Status.PodIP, p.Status.PodIPs = "127.1.0.1", []corev1.PodIP{{IP: "127.1.0.1"}}
			p.Status.Phase = corev1.PodRunning
		}
		p.Status.Conditions = []corev1.PodCondition{
			{Type: corev1.PodScheduled, Status: corev1.ConditionTrue},
			{Type: corev1.PodInitialized, Status: corev1.ConditionTrue},
			{Type: corev1.ContainersReady, Status: corev1.ConditionFalse, Reason: "ContainersNotReady"},
			{Type: corev1.PodReady, Status: corev1.ConditionFalse, Reason: "ContainersNotReady"},
		}
		for i := range p.Status.ContainerStatuses {
			p.Status.ContainerStatuses[i].Ready = false
		}
		if _, err := pods.UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil && !apierrors.IsConflict(err) && !apierrors.IsNotFound(err) && ctx.Err() == nil {
			t.Errorf("keep pod %s unready: %v", p.Name, err)
		}
	}
	onPodEvents(t, c, true, unready)
	// wait until the pods read back unready
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.Eventually(t, func() bool {
		l, err := pods.List(ctx, metav1.ListOptions{LabelSelector: cluster.PodSelector})
		if err != nil {
			return false
		}
		for i := range l.Items {
			if on[l.Items[i].Spec.NodeName] && podIsReady(&l.Items[i]) {
				return false
			}
		}
		return true
	}, 30*time.Second, 100*time.Millisecond)
}

// watchMaxUnavailable records every change of the DaemonSet's
// maxUnavailable; the returned func stops and lists them in order.
func watchMaxUnavailable(t *testing.T, c *cluster.Cluster) func() []string {
	t.Helper()
	dss := c.Client.AppsV1().DaemonSets(c.Namespace)
	budget := func(ds *appsv1.DaemonSet) string {
		if ru := ds.Spec.UpdateStrategy.RollingUpdate; ru != nil && ru.MaxUnavailable != nil {
			return ru.MaxUnavailable.String()
		}
		return string(ds.Spec.UpdateStrategy.Type)
	}
	var last string
	var seen []string
	stop := cluster.Follow(t, func(ctx context.Context) (watch.Interface, error) {
		ds, err := dss.Get(ctx, cluster.Name, metav1.GetOptions{})
		if err != nil {
			return nil, err
		}
		last = budget(ds)
		return dss.Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + cluster.Name, ResourceVersion: ds.ResourceVersion})
	}, func(_ context.Context, _ watch.EventType, d *appsv1.DaemonSet) {
		if b := budget(d); b != last {
			last = b
			seen = append(seen, b)
		}
	})
	return func() []string {
		stop()
		return seen
	}
}
