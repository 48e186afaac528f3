//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kube-proxy-sync/kube-proxy-sync/internal/nodes"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/rollout"
	"github.com/kube-proxy-sync/kube-proxy-sync/test/e2e/cluster"
)

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

	selector := "k8s-app in (" + cluster.Name + "," + pool + ")"
	nw := cluster.WatchProxies(t, c.Client, c.Namespace, selector, nodes)
	r := runPools(t, c, "--probe-path", "none", "--split", pool, "--split-nodes", "e2e-split=yes")
	require.Equal(t, 0, r.Code, r.Msg+"\n"+r.Stderr)
	seen := nw.Stop()
	assert.Equal(t, 1, seen.Most, "two kube-proxy pods on node %s", seen.MostOn)
	assert.Empty(t, seen.TwoOwners, "a node with pods of both DaemonSets")
	assert.LessOrEqual(t, len(seen.Unready), 1, "nodes at once without a Ready kube-proxy: %v", seen.Unready)
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

	nw = cluster.WatchProxies(t, c.Client, c.Namespace, selector, nodes)
	r = runPools(t, c, "--probe-path", "none", "--merge", pool)
	require.Equal(t, 0, r.Code, r.Msg+"\n"+r.Stderr)
	seen = nw.Stop()
	t.Logf("merge: %s", r.Msg)
	assert.Equal(t, 1, seen.Most, "two kube-proxy pods on node %s", seen.MostOn)
	assert.Empty(t, seen.TwoOwners, "a node with pods of both DaemonSets")
	assert.LessOrEqual(t, len(seen.Unready), 1, "nodes at once without a Ready kube-proxy: %v", seen.Unready)
	assert.Len(t, poolUIDs(t, c, cluster.Name), len(nodes), "every node back on kubeadm's DaemonSet")
	_, err = c.Client.AppsV1().DaemonSets(c.Namespace).Get(ctx, pool, metav1.GetOptions{})
	assert.True(t, apierrors.IsNotFound(err), "the pool's DaemonSet deleted")
	_, err = c.Client.CoreV1().ConfigMaps(c.Namespace).Get(ctx, pool, metav1.GetOptions{})
	assert.True(t, apierrors.IsNotFound(err), "the pool's config deleted")
}

// A node labelled for a pool whose DaemonSet is gone (deleted by hand, its
// namespace deleted) runs no kube-proxy, and kubeadm's DaemonSet, once it
// keeps off the pools' nodes, never puts one back there. The split's
// rollout of that affinity does not wait for it: the node is skipped as
// off the new template, the run warns of it, and the split moves its own
// node.
func TestSplitSkipsANodeLabelledForAGonePool(t *testing.T) {
	c := cluster.Connect(t)
	c.Reset(t)
	t.Cleanup(func() { c.Reset(t) })
	ctx := context.Background()
	pool := cluster.Name + "-split"
	var names []string
	for n := range c.PodUIDs(t) {
		names = append(names, n)
	}
	sort.Strings(names)
	require.GreaterOrEqual(t, len(names), 3)
	node, orphan := names[0], names[1]
	label := func(node string, labels map[string]any) {
		body, _ := json.Marshal(map[string]any{"metadata": map[string]any{"labels": labels}})
		_, err := c.Client.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, body, metav1.PatchOptions{})
		require.NoError(t, err)
	}
	label(node, map[string]any{"e2e-split": "yes"})
	label(orphan, map[string]any{rollout.PoolLabel: cluster.Name + "-gone"})
	t.Cleanup(func() {
		for _, n := range []string{node, orphan} {
			label(n, map[string]any{"e2e-split": nil, rollout.PoolLabel: nil, rollout.MovingLabel: nil})
		}
		bg := metav1.DeletePropagationBackground
		_ = c.Client.AppsV1().DaemonSets(c.Namespace).Delete(context.Background(), pool, metav1.DeleteOptions{PropagationPolicy: &bg})
		_ = c.Client.CoreV1().ConfigMaps(c.Namespace).Delete(context.Background(), pool, metav1.DeleteOptions{})
	})

	r := runPools(t, c, "--probe-path", "none", "--split", pool, "--split-nodes", "e2e-split=yes")
	require.Equal(t, 0, r.Code, r.Msg+"\n"+r.Stderr)
	assert.Contains(t, r.Rollout.SkippedNodes, nodes.Skipped{Name: orphan, Reason: nodes.OffTemplate}, "the orphan node is no node to wait for")
	assert.Contains(t, strings.Join(r.Warnings, "\n"), orphan, "the run warns of the node left without a kube-proxy")
	assert.Contains(t, poolUIDs(t, c, pool), node)
	base := poolUIDs(t, c, cluster.Name)
	assert.NotContains(t, base, orphan)
	assert.NotContains(t, base, node)
	assert.Len(t, base, len(names)-2)
}
