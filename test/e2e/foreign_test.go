//go:build e2e

package e2e

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/kube-proxy-sync/kube-proxy-sync/test/e2e/cluster"
)

// foreignPod creates on node a pod with the labels of the kube-proxy
// DaemonSet's pods, pod-template-generation gen among them, that the
// DaemonSet does not control: like a static kube-proxy's mirror pod, its
// controller is its Node (a pod with no controller at all, the DaemonSet
// controller would adopt). It waits until kwok runs it Ready and deletes it
// at the end of the test.
func foreignPod(t *testing.T, c *cluster.Cluster, node string, gen int64) *corev1.Pod {
	t.Helper()
	ctx := context.Background()
	n, err := c.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	require.NoError(t, err)
	ds := c.DaemonSet(t)
	labels := map[string]string{"pod-template-generation": strconv.FormatInt(gen, 10)}
	for k, v := range ds.Spec.Template.Labels {
		labels[k] = v
	}
	pods := c.Client.CoreV1().Pods(c.Namespace)
	p, err := pods.Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: cluster.Name + "-" + node, Namespace: c.Namespace, Labels: labels,
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(n, corev1.SchemeGroupVersion.WithKind("Node"))}},
		Spec: corev1.PodSpec{
			NodeName:                      node,
			Containers:                    []corev1.Container{{Name: cluster.Name, Image: ds.Spec.Template.Spec.Containers[0].Image}},
			TerminationGracePeriodSeconds: ptr.To(int64(0)),
		},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	t.Cleanup(func() {
		err := pods.Delete(context.Background(), p.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To(int64(0)), Preconditions: &metav1.Preconditions{UID: &p.UID}})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			t.Errorf("delete pod %s: %v", p.Name, err)
		}
	})
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		got, err := pods.Get(ctx, p.Name, metav1.GetOptions{})
		return err == nil && podIsReady(got), err
	})
	require.NoError(t, err, "pod %s on node %s never got Ready", p.Name, node)
	return p
}

// assertForeignKept asserts that each pod is still there, the same pod
// (its UID) and not being deleted.
func assertForeignKept(t *testing.T, c *cluster.Cluster, pods ...*corev1.Pod) {
	t.Helper()
	for _, p := range pods {
		got, err := c.Client.CoreV1().Pods(c.Namespace).Get(context.Background(), p.Name, metav1.GetOptions{})
		if !assert.NoError(t, err, "pod %s on node %s, which the DaemonSet does not control, was deleted", p.Name, p.Spec.NodeName) {
			continue
		}
		assert.Equal(t, p.UID, got.UID, "pod %s on node %s was deleted and another made in its place", p.Name, p.Spec.NodeName)
		assert.Nil(t, got.DeletionTimestamp, "pod %s on node %s is being deleted", p.Name, p.Spec.NodeName)
	}
}

// A pod with kube-proxy's labels that its DaemonSet does not control (here
// static pods' mirrors, on the canary node and on a node of a later batch,
// labelled with the template generation the run makes and Ready) is not
// the node's kube-proxy: a canary rollout deletes neither and replaces
// each node's own pod, never more than the batch size of the DaemonSet's
// pods missing or not Ready at once (seen by a watch on the pods).
func TestCanaryLeavesForeignPodsAlone(t *testing.T) {
	c := cluster.Connect(t)
	c.Reset(t)
	require.Equal(t, 0, runSync(t, c, "--probe-path", "none").Code) // adopt
	extra := addNodes(t, c, "foreign", 5)                           // sort before node-*: extra[0] is the canary
	gen := templateGeneration(t, c.DaemonSet(t)) + 1
	foreign := []*corev1.Pod{foreignPod(t, c, extra[0], gen), foreignPod(t, c, extra[3], gen)}
	before := c.PodUIDs(t)

	s := sampleRollout(t, c)
	server := "https://10.96.5.1:6443"
	r := runSync(t, c, "--server", server, "--probe-path", "none",
		"--strategy", "canary", "--canary-nodes", "1", "--batch-size", "2")
	samples := s.stop()
	assertForeignKept(t, c, foreign...)
	require.Equal(t, 0, r.Code, r.Msg+"\n"+r.Stderr)
	f := r.facts()
	assert.Equal(t, []string{extra[0]}, f.Rollout.CanaryNodes)
	assert.EqualValues(t, len(before), f.Rollout.Desired, "the nodes with a pod of the DaemonSet")
	assert.EqualValues(t, len(before), f.Rollout.Updated)

	assert.LessOrEqual(t, samples.maxUnavailable, 2, "never more than the batch size of the DaemonSet's pods unavailable (sampled by a watch)")
	assert.Greater(t, samples.maxUnavailable, 0, "the sampler saw the rollout")
	assert.Len(t, samples.replacedOrder, len(before), "each node's own pod replaced once: %v", samples.replacedOrder)
	if assert.NotEmpty(t, samples.replacedOrder) {
		assert.Equal(t, extra[0], samples.replacedOrder[0], "the canary's own pod first")
	}

	cluster.AssertAllReplaced(t, before, c.PodUIDs(t))
	want := strconv.FormatInt(gen, 10)
	for _, p := range c.DaemonSetPods(t) {
		assert.Equal(t, want, p.Labels["pod-template-generation"], "node %s: the DaemonSet's pod %s is of the new template", p.Spec.NodeName, p.Name)
	}
	assert.Contains(t, assertMountsCopy(t, c).Data["kubeconfig.conf"], server)
	assertRecordFollows(t, c)
}

// The canary node's own kube-proxy never comes back, while a Ready pod
// with its labels and the new template generation, which the DaemonSet
// does not control, runs there: the canary fails on that node instead of
// taking the foreign pod for its kube-proxy, and no other node's pod is
// replaced; the foreign pod stays.
func TestCanaryDoesNotTakeAForeignPodForTheNodesKubeProxy(t *testing.T) {
	c := cluster.Connect(t)
	c.Reset(t)
	require.Equal(t, 0, runSync(t, c, "--probe-path", "none").Code) // adopt
	extra := addNodes(t, c, "fcanary", 3)                           // sort before node-*: extra[0] is the canary
	canary := extra[0]
	foreign := foreignPod(t, c, canary, templateGeneration(t, c.DaemonSet(t))+1)
	denyKubeProxyPodsOn(t, c, canary)
	before := c.PodUIDs(t)

	r := runSync(t, c, "--server", "https://10.96.5.2:6443", "--probe-path", "none", "--progress-deadline", "15s",
		"--strategy", "canary", "--canary-nodes", "1", "--batch-size", "1")
	assertForeignKept(t, c, foreign)
	require.Equal(t, 1, r.Code, "the canary's own pod never came back: %s\n%s", r.Msg, r.Stderr)
	f := r.facts()
	assert.Equal(t, []string{canary}, f.Rollout.CanaryNodes)
	assert.Contains(t, r.Msg, canary, "the message names the node")

	after := c.PodUIDs(t)
	assert.NotEqual(t, before[canary], after[canary], "the canary's own pod was deleted")
	kept := untouched(before, after)
	assert.Len(t, kept, len(before)-1, "only the canary node lost its pod: %v", kept)
}
