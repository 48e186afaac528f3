//go:build e2e

package e2e

import (
	"context"
	"strconv"
	"sync"
	"testing"

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
	stop   context.CancelFunc
	done   chan struct{}
}

func breakPodsOfGeneration(t *testing.T, c *cluster.Cluster, gen int64) *podBreaker {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	b := &podBreaker{broken: map[string]brokenPod{}, stop: cancel, done: make(chan struct{})}
	pods := c.Client.CoreV1().Pods(c.Namespace)
	list, err := pods.List(ctx, metav1.ListOptions{LabelSelector: cluster.PodSelector})
	require.NoError(t, err)
	w, err := pods.Watch(ctx, metav1.ListOptions{LabelSelector: cluster.PodSelector, ResourceVersion: list.ResourceVersion})
	require.NoError(t, err)
	label := strconv.FormatInt(gen, 10)
	go func() {
		defer close(b.done)
		defer w.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case ev, ok := <-w.ResultChan():
				if !ok {
					return
				}
				p, isPod := ev.Object.(*corev1.Pod)
				if !isPod || ev.Type == watch.Deleted || p.DeletionTimestamp != nil || p.Labels["pod-template-generation"] != label || p.Spec.NodeName == "" {
					continue
				}
				if crashLooping(p) {
					continue
				}
				setCrashLoop(p)
				if _, err := pods.UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil && !apierrors.IsConflict(err) && !apierrors.IsNotFound(err) && ctx.Err() == nil {
					t.Errorf("break pod %s: %v", p.Name, err)
				}
				b.mu.Lock()
				b.broken[p.Spec.NodeName] = brokenPod{p.UID, p.Name}
				b.mu.Unlock()
			}
		}
	}()
	t.Cleanup(func() { b.Stop() })
	return b
}

type brokenPod struct {
	UID  types.UID
	Name string
}

// Stop ends the breaker and returns the pods it broke, by node.
func (b *podBreaker) Stop() map[string]brokenPod {
	b.stop()
	<-b.done
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
