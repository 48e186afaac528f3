//go:build e2e

package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"github.com/kube-proxy-sync/kube-proxy-sync/internal/rollout"
	"github.com/kube-proxy-sync/kube-proxy-sync/test/e2e/cluster"
)

// targets reports whether the pod is made for node by the DaemonSet
// controller: it names the node in its required node affinity.
func targets(p *corev1.Pod, node string) bool {
	a := p.Spec.Affinity
	if a == nil || a.NodeAffinity == nil || a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		return false
	}
	for _, term := range a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
		for _, f := range term.MatchFields {
			if f.Key == metav1.ObjectNameField && len(f.Values) == 1 && f.Values[0] == node {
				return true
			}
		}
	}
	return false
}

// addUnplaceableNode creates a node that registered and went away before
// it could run anything: no kwok manages it, it is tainted
// ToBeDeletedByClusterAutoscaler, NotReady, with room for no pod. It waits
// until the DaemonSet has made its kube-proxy pod for the node, which the
// scheduler cannot place: Pending, with no spec.nodeName. Node and pod go
// when the test ends.
func addUnplaceableNode(t *testing.T, c *cluster.Cluster, name string) {
	t.Helper()
	ctx := context.Background()
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name,
			Labels: map[string]string{"kubernetes.io/os": "linux", "kubernetes.io/hostname": name, "type": "kwok"}},
		Spec: corev1.NodeSpec{Taints: []corev1.Taint{{Key: "ToBeDeletedByClusterAutoscaler", Value: "1700000000", Effect: corev1.TaintEffectNoSchedule}}},
	}
	created, err := c.Client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
	require.NoError(t, err)
	pods := c.Client.CoreV1().Pods(c.Namespace)
	t.Cleanup(func() {
		removeNodes(t, c, []string{name})
		// unbound: removeNodes, which goes by spec.nodeName, does not see it
		list, err := pods.List(ctx, metav1.ListOptions{LabelSelector: cluster.PodSelector})
		if err != nil {
			t.Errorf("list pods: %v", err)
			return
		}
		for i := range list.Items {
			if p := &list.Items[i]; p.Spec.NodeName == "" && targets(p, name) {
				_ = pods.Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To(int64(0))})
			}
		}
	})
	none := corev1.ResourceList{corev1.ResourcePods: resource.MustParse("0")}
	// the node lifecycle controller taints a new node right away: read it
	// again on a conflict
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		now := metav1.Now()
		created.Status = corev1.NodeStatus{Capacity: none, Allocatable: none, Conditions: []corev1.NodeCondition{{
			Type: corev1.NodeReady, Status: corev1.ConditionFalse, Reason: "KubeletNotReady", LastHeartbeatTime: now, LastTransitionTime: now}}}
		_, err := c.Client.CoreV1().Nodes().UpdateStatus(ctx, created, metav1.UpdateOptions{})
		if apierrors.IsConflict(err) {
			if latest, getErr := c.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{}); getErr == nil {
				created = latest
			}
		}
		return err
	})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		list, err := pods.List(ctx, metav1.ListOptions{LabelSelector: cluster.PodSelector})
		if err != nil {
			return false
		}
		for i := range list.Items {
			if p := &list.Items[i]; p.Spec.NodeName == "" && targets(p, name) && p.Status.Phase == corev1.PodPending {
				return true
			}
		}
		return false
	}, time.Minute, 200*time.Millisecond, "the DaemonSet's pod for node %s, Pending and bound to no node", name)
}

// A kube-proxy pod Pending on a node that went away, bound to no node (the
// DaemonSet controller names the node only in the pod's node affinity),
// does not stall the default restart (rolling, maxUnavailable 1): the node
// is skipped, maxUnavailable is raised by one for the pod during the
// rollout and restored after, and every live node gets a new pod
// (issue 20.9; before, "updated 0/3" until the run failed).
func TestRollingDoesNotStallOnAnUnboundPod(t *testing.T) {
	c := cluster.Connect(t)
	c.Reset(t)
	t.Cleanup(func() { c.Reset(t) })
	require.Equal(t, 0, runSync(t, c, "--probe-path", "none").Code) // adopt
	const leaving = "unbound-00"
	addUnplaceableNode(t, c, leaving)
	require.Equal(t, "1", c.DaemonSet(t).Spec.UpdateStrategy.RollingUpdate.MaxUnavailable.String())
	before := c.PodUIDs(t)
	budgets := watchMaxUnavailable(t, c)

	r := runSync(t, c, "--server", "https://10.96.3.9:6443", "--probe-path", "none", "--timeout", "60s")
	assert.Equal(t, []string{"2", "1"}, budgets(), "maxUnavailable raised by one for the unbound pod, then restored")
	require.Equal(t, 0, r.Code, r.Msg+"\n"+r.Stderr)
	f := r.facts()
	require.Len(t, f.Rollout.SkippedNodes, 1)
	assert.Equal(t, leaving, f.Rollout.SkippedNodes[0].Name)
	assert.False(t, f.RolledBack)
	after := c.PodUIDs(t)
	for node, uid := range before {
		assert.NotEqual(t, uid, after[node], "live node %s got a new pod", node)
	}
	ds := c.DaemonSet(t)
	assert.Equal(t, "1", ds.Spec.UpdateStrategy.RollingUpdate.MaxUnavailable.String(), "maxUnavailable back as it was")
	assert.NotContains(t, ds.Annotations, rollout.StrategyAnnotation)
}
