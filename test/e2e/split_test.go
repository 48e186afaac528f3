//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"sort"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/kube-proxy-sync/kube-proxy-sync/internal/rollout"
	"github.com/kube-proxy-sync/kube-proxy-sync/test/e2e/cluster"
)

// nodeWatch follows the kube-proxy pods of kubeadm's DaemonSet and a
// pool's, and records, after every event, the most pods not being deleted
// on one node and the most nodes at once without a Ready one.
type nodeWatch struct {
	mu        sync.Mutex
	pods      map[types.UID]*corev1.Pod
	nodes     []string
	most      int
	mostOn    string
	unready   int
	unreadyAt []string
	stop      func()
}

func watchNodes(t *testing.T, c *cluster.Cluster, pool string, nodes []string) *nodeWatch {
	t.Helper()
	nw := &nodeWatch{pods: map[types.UID]*corev1.Pod{}, nodes: nodes}
	selector := "k8s-app in (" + cluster.Name + "," + pool + ")"
	pods := c.Client.CoreV1().Pods(c.Namespace)
	nw.stop = cluster.Follow(t, func(ctx context.Context) (watch.Interface, error) {
		list, err := pods.List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			return nil, err
		}
		nw.mu.Lock()
		for i := range list.Items {
			nw.pods[list.Items[i].UID] = &list.Items[i]
		}
		nw.mu.Unlock()
		nw.add(watch.Modified, nil) // the list as it is, then every event
		return pods.Watch(ctx, metav1.ListOptions{LabelSelector: selector, ResourceVersion: list.ResourceVersion})
	}, func(_ context.Context, ev watch.EventType, p *corev1.Pod) { nw.add(ev, p) })
	return nw
}

func (nw *nodeWatch) add(ev watch.EventType, p *corev1.Pod) {
	nw.mu.Lock()
	defer nw.mu.Unlock()
	switch {
	case p == nil:
	case ev == watch.Deleted:
		delete(nw.pods, p.UID)
	default:
		nw.pods[p.UID] = p
	}
	running, ready := map[string]int{}, map[string]bool{}
	for _, q := range nw.pods {
		if q.DeletionTimestamp == nil && q.Spec.NodeName != "" {
			running[q.Spec.NodeName]++
			ready[q.Spec.NodeName] = ready[q.Spec.NodeName] || cluster.PodReady(q)
		}
	}
	for n, k := range running {
		if k > nw.most {
			nw.most, nw.mostOn = k, n
		}
	}
	var unready []string
	for _, n := range nw.nodes {
		if !ready[n] {
			unready = append(unready, n)
		}
	}
	if len(unready) > nw.unready {
		nw.unready, nw.unreadyAt = len(unready), unready
	}
}

// Stop ends the watch and returns the most kube-proxy pods on one node and
// the most nodes at once without a Ready one.
func (nw *nodeWatch) Stop() (most int, on string, unready []string) {
	nw.stop()
	nw.mu.Lock()
	defer nw.mu.Unlock()
	return nw.most, nw.mostOn, nw.unreadyAt
}

// A pool split off kubeadm's DaemonSet and merged back, under a watch of
// both DaemonSets' pods: kubeadm's DaemonSet first keeps off the pools'
// nodes (one rollout), then the selected node moves by its label, and back.
// Never two kube-proxy pods on a node, never more than one node without a
// Ready one at once (the base's maxUnavailable); afterwards the pool runs
// the config the node ran, and the merge deletes it.
func TestPoolSplitAndMerge(t *testing.T) {
	c := cluster.Connect(t)
	c.Reset(t)
	t.Cleanup(func() { c.Reset(t) })
	ctx := context.Background()
	pool := cluster.Name + "-split"
	var nodes []string
	for n := range c.PodUIDs(t) {
		nodes = append(nodes, n)
	}
	sort.Strings(nodes)
	node := nodes[0]
	body, _ := json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]any{"e2e-split": "yes"}}})
	_, err := c.Client.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, body, metav1.PatchOptions{})
	require.NoError(t, err)
	t.Cleanup(func() {
		body, _ := json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]any{"e2e-split": nil, rollout.PoolLabel: nil, rollout.MovingLabel: nil}}})
		_, _ = c.Client.CoreV1().Nodes().Patch(context.Background(), node, types.MergePatchType, body, metav1.PatchOptions{})
		bg := metav1.DeletePropagationBackground
		_ = c.Client.AppsV1().DaemonSets(c.Namespace).Delete(context.Background(), pool, metav1.DeleteOptions{PropagationPolicy: &bg})
		_ = c.Client.CoreV1().ConfigMaps(c.Namespace).Delete(context.Background(), pool, metav1.DeleteOptions{})
	})
	ran := c.MountedConfigMap(t)

	nw := watchNodes(t, c, pool, nodes)
	r := runPools(t, c, "--probe-path", "none", "--split", pool, "--split-nodes", "e2e-split=yes")
	require.Equal(t, 0, r.Code, r.Msg+"\n"+r.Stderr)
	most, on, unready := nw.Stop()
	assert.Equal(t, 1, most, "two kube-proxy pods on node %s", on)
	assert.LessOrEqual(t, len(unready), 1, "nodes at once without a Ready kube-proxy: %v", unready)
	assert.True(t, r.Changed, r.Msg)
	assert.True(t, rollout.KeepsOffPools(&c.DaemonSet(t).Spec.Template.Spec), "kubeadm's DaemonSet keeps off the pools' nodes")
	base := poolUIDs(t, c, cluster.Name)
	assert.NotContains(t, base, node)
	assert.Len(t, base, len(nodes)-1)
	assert.Contains(t, poolUIDs(t, c, pool), node)
	assert.Equal(t, ran.Data, c.ConfigMapNamed(t, pool).Data, "the pool runs the config the node ran")
	assert.Contains(t, r.Msg, "split pool "+pool+": moved 1 node(s)")
	t.Logf("split: %s", r.Msg)

	// the same split again moves nothing
	r = runPools(t, c, "--probe-path", "none", "--split", pool, "--split-nodes", "e2e-split=yes")
	require.Equal(t, 0, r.Code, r.Msg+"\n"+r.Stderr)
	assert.False(t, r.Changed, r.Msg)

	nw = watchNodes(t, c, pool, nodes)
	r = runPools(t, c, "--probe-path", "none", "--merge", pool)
	require.Equal(t, 0, r.Code, r.Msg+"\n"+r.Stderr)
	most, on, unready = nw.Stop()
	t.Logf("merge: %s", r.Msg)
	assert.Equal(t, 1, most, "two kube-proxy pods on node %s", on)
	assert.LessOrEqual(t, len(unready), 1, "nodes at once without a Ready kube-proxy: %v", unready)
	assert.Len(t, poolUIDs(t, c, cluster.Name), len(nodes), "every node back on kubeadm's DaemonSet")
	_, err = c.Client.AppsV1().DaemonSets(c.Namespace).Get(ctx, pool, metav1.GetOptions{})
	assert.True(t, apierrors.IsNotFound(err), "the pool's DaemonSet deleted")
	_, err = c.Client.CoreV1().ConfigMaps(c.Namespace).Get(ctx, pool, metav1.GetOptions{})
	assert.True(t, apierrors.IsNotFound(err), "the pool's config deleted")
}
