//go:build e2e

package realnode

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/kube-proxy-sync/kube-proxy-sync/internal/rollout"
	"github.com/kube-proxy-sync/kube-proxy-sync/test/e2e/cluster"
)

// splitLabel selects the node the pools test splits off.
const splitLabel = "kube-proxy-sync.io/e2e-split"

// One worker split off kubeadm's DaemonSet into a pool of its own, that
// pool moved to nftables while the rest of the cluster stays in iptables,
// then back and merged, on real kubelets and kube-proxies. After each step
// every node's kube-proxy says which mode it runs (its own /configz), and
// traffic passes on every node: to a ClusterIP from the node, and to the
// NodePort of the next node, so each mode's rules are crossed both ways.
// Under a watch of both DaemonSets' pods, no node ever holds pods of both
// (counting a pod being deleted, whose kube-proxy may still run), and at
// most one node at once is without a Ready kube-proxy.
func TestPoolSplitIntoAnotherModeAndMergeBack(t *testing.T) {
	e := connect(t)
	d := e.dockerOrSkip(t)
	cp, workers := e.nodeNames(t)
	all := append([]string{cp}, workers...)
	node := workers[len(workers)-1]
	const pool = "kube-proxy-e2e-pool"
	e.removePoolAtEnd(t, pool, node)
	for _, n := range all {
		require.False(t, d.proxyRules(t, n).hasNFTable(), "node %s: this test starts from kube-proxy in iptables mode", n)
	}
	svc := e.nodePortService(t)
	modes := func(want map[string]string, step string) {
		t.Helper()
		for _, n := range all {
			mode, _ := runningValue(d.configz(t, n), "mode")
			assert.Equal(t, want[n], mode, "%s: node %s's kube-proxy runs this mode (its /configz)", step, n)
		}
		e.trafficOnEveryNode(t, d, svc, all)
	}
	inMode := func(poolMode string) map[string]string {
		want := map[string]string{}
		for _, n := range all {
			want[n] = "iptables"
		}
		want[node] = poolMode
		return want
	}
	watch := func() *cluster.ProxyWatch {
		return cluster.WatchProxies(t, e.client, namespace, "k8s-app in ("+name+","+pool+")", all)
	}
	handover := func(seen cluster.ProxySeen, step string, r run) {
		t.Helper()
		t.Logf("%s: moved %v; at most %d node(s) at once without a Ready kube-proxy %v", step, r.field("pool_move.moved"), len(seen.Unready), seen.Unready)
		assert.Empty(t, seen.TwoOwners, "%s: a node held kube-proxy pods of both DaemonSets at once", step)
		assert.LessOrEqual(t, len(seen.Unready), 1, "%s: nodes at once without a Ready kube-proxy: %v", step, seen.Unready)
	}

	// the split: kubeadm's DaemonSet rolls to keep off the pools' nodes,
	// then the node moves to the pool, which runs the config it ran
	e.labelNode(t, node, splitLabel, "yes")
	mounted := mountedConfigMap(t, e)
	nw := watch()
	r := e.sync(t, "--split", pool, "--split-nodes", splitLabel+"=yes", "--timeout", "8m")
	require.Equal(t, 0, r.code, "split: %s", r)
	handover(nw.Stop(), "split", r)
	assert.Equal(t, []any{node}, r.field("pool_move.nodes"), "%s", r)
	poolPods := e.podsOf(t, pool)
	require.Contains(t, poolPods, node, "the node runs the pool's kube-proxy: %s", e.describePods(t))
	assert.Len(t, poolPods, 1)
	assert.NotContains(t, e.podUIDs(t), node, "kubeadm's DaemonSet left the node")
	assert.True(t, rollout.KeepsOffPools(&e.daemonSet(t).Spec.Template.Spec), "kubeadm's DaemonSet keeps off the pools' nodes")
	src, err := e.client.CoreV1().ConfigMaps(namespace).Get(ctxFor(t, 30*time.Second), mounted, metav1.GetOptions{})
	require.NoError(t, err)
	rec, err := e.client.CoreV1().ConfigMaps(namespace).Get(ctxFor(t, 30*time.Second), pool, metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, src.Data, rec.Data, "the pool's config is the one the node ran")
	modes(inMode("iptables"), "after the split")

	// the pool alone moves to nftables, with a migration's canary and
	// checks; kubeadm's DaemonSet's pods are not touched
	basePods := e.podUIDs(t)
	r = e.sync(t, "--pool", pool, "--pool-set", pool+":mode=nftables", "--timeout", "8m")
	require.Equal(t, 0, r.code, "pool to nftables: %s", r)
	assert.Equal(t, false, r.field("pools.0.changed"), "kubeadm's DaemonSet's config is as it was: %s", r)
	assert.Equal(t, true, r.field("pools.1.changed"), "%s", r)
	assert.Equal(t, true, r.field("pools.1.restarted"), "%s", r)
	// the pool's own migration: its one node the canary, kubeadm's none
	assert.Nil(t, r.field("pools.0.migration"), "%s", r)
	assert.Equal(t, "nftables", r.field("pools.1.migration.to"), "%s", r)
	assert.Equal(t, []any{node}, r.field("pools.1.migration.canary_nodes"), "%s", r)
	assert.Equal(t, basePods, e.podUIDs(t), "kubeadm's DaemonSet's pods kept")
	assert.NotEqual(t, poolPods[node], e.podsOf(t, pool)[node], "the pool's kube-proxy restarted")
	t.Logf("pool to nftables: restarted for %v, kubeadm's DaemonSet's pods kept", r.field("pools.1.restart_reason"))
	modes(inMode("nftables"), "the pool in nftables")
	rules := d.settledRules(t, node, func(r rules) bool { return slices.Contains(r.nftTables, "ip kube-proxy") })
	assert.Contains(t, rules.nftTables, "ip kube-proxy", "node %s: kube-proxy's nftables table", node)
	for _, n := range all {
		if n != node {
			rules := d.proxyRules(t, n)
			assert.False(t, rules.hasNFTable(), "node %s stays in iptables mode: %v", n, rules.nftTables)
			assert.Contains(t, rules.kubeProxyChains(), "KUBE-SERVICES", "node %s", n)
		}
	}

	// the same run again changes nothing; a merge across modes is refused
	poolPods = e.podsOf(t, pool)
	r = e.sync(t, "--pool", pool, "--pool-set", pool+":mode=nftables")
	require.Equal(t, 0, r.code, "%s", r)
	assert.Equal(t, false, r.field("changed"), "%s", r)
	r = e.sync(t, "--merge", pool)
	assert.NotEqual(t, 0, r.code, "a merge of an nftables pool into an iptables DaemonSet: %s", r)
	assert.Contains(t, fmt.Sprint(r.field("msg")), "mode", "%s", r)
	assert.Equal(t, poolPods, e.podsOf(t, pool), "the refused merge moved nothing")
	assert.Equal(t, basePods, e.podUIDs(t))

	// back to iptables, then merged: the node runs kubeadm's DaemonSet
	// again, and the pool's objects are gone
	r = e.sync(t, "--pool", pool, "--pool-set", pool+":mode=iptables", "--timeout", "8m")
	require.Equal(t, 0, r.code, "pool back to iptables: %s", r)
	modes(inMode("iptables"), "the pool back in iptables")
	nw = watch()
	r = e.sync(t, "--merge", pool, "--timeout", "8m")
	require.Equal(t, 0, r.code, "merge: %s", r)
	handover(nw.Stop(), "merge", r)
	assert.Contains(t, e.podUIDs(t), node, "the node runs kubeadm's DaemonSet's kube-proxy again")
	assert.Empty(t, e.podsOf(t, pool))
	_, err = e.client.AppsV1().DaemonSets(namespace).Get(ctxFor(t, 30*time.Second), pool, metav1.GetOptions{})
	assert.True(t, apierrors.IsNotFound(err), "the pool's DaemonSet is deleted: %v", err)
	_, err = e.client.CoreV1().ConfigMaps(namespace).Get(ctxFor(t, 30*time.Second), pool, metav1.GetOptions{})
	assert.True(t, apierrors.IsNotFound(err), "the pool's ConfigMap is deleted: %v", err)
	modes(inMode("iptables"), "after the merge")
}

// configz reads the running kube-proxy's configuration on node from
// inside it (its own /configz on the metrics port, which kubeadm binds to
// the node's loopback), as configz does through the API server.
func (d docker) configz(t *testing.T, node string) map[string]any {
	t.Helper()
	var body []byte
	err := wait.PollUntilContextTimeout(context.Background(), time.Second, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		out, err := exec.CommandContext(ctx, "docker", "exec", node, "curl", "-sf", "--max-time", "5", "http://127.0.0.1:10249/configz").Output()
		body = out
		return err == nil, nil
	})
	require.NoError(t, err, "node %s: kube-proxy's /configz on 127.0.0.1:10249 (last answer %q)", node, body)
	var out struct {
		Config map[string]any `json:"kubeproxy.config.k8s.io"`
	}
	require.NoError(t, json.Unmarshal(body, &out), "node %s /configz: %s", node, body)
	require.NotNil(t, out.Config, "node %s /configz: %s", node, body)
	return out.Config
}

// podsOf is the kube-proxy pods of the DaemonSet whose pods carry
// k8s-app=app, not being deleted, by node.
func (e *env) podsOf(t *testing.T, app string) map[string]types.UID {
	t.Helper()
	list, err := e.client.CoreV1().Pods(namespace).List(ctxFor(t, 30*time.Second), metav1.ListOptions{LabelSelector: "k8s-app=" + app})
	require.NoError(t, err)
	out := map[string]types.UID{}
	for _, p := range list.Items {
		if p.DeletionTimestamp == nil && p.Spec.NodeName != "" {
			out[p.Spec.NodeName] = p.UID
		}
	}
	return out
}

// trafficOnEveryNode connects from every node to svc's ClusterIP and to
// svc's NodePort on the next node (in order, the last to the first).
func (e *env) trafficOnEveryNode(t *testing.T, d docker, svc *corev1.Service, nodes []string) {
	t.Helper()
	port := int(svc.Spec.Ports[0].NodePort)
	for i, n := range nodes {
		next := nodes[(i+1)%len(nodes)]
		d.connect(t, n, svc.Spec.ClusterIP, int(svc.Spec.Ports[0].Port))
		d.connect(t, n, e.internalIP(t, next), port)
	}
}

// removePoolAtEnd deletes a pool the test may have left (its DaemonSet,
// then, once its pods are gone, its ConfigMap and the node's labels), at
// the test's end, before connect's restore puts kubeadm's DaemonSet back
// on every node: never two kube-proxies on one node.
func (e *env) removePoolAtEnd(t *testing.T, pool, node string) {
	t.Helper()
	t.Cleanup(func() {
		ctx := ctxFor(t, 3*time.Minute)
		bg := metav1.DeletePropagationBackground
		if err := e.client.AppsV1().DaemonSets(namespace).Delete(ctx, pool, metav1.DeleteOptions{PropagationPolicy: &bg}); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("cleanup: delete daemonset %s: %v", pool, err)
		}
		err := wait.PollUntilContextCancel(ctx, 500*time.Millisecond, true, func(ctx context.Context) (bool, error) {
			list, err := e.client.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{LabelSelector: "k8s-app=" + pool})
			return err == nil && len(list.Items) == 0, nil
		})
		assert.NoError(t, err, "cleanup: the pool's pods are gone")
		if err := e.client.CoreV1().ConfigMaps(namespace).Delete(ctx, pool, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("cleanup: delete configmap %s: %v", pool, err)
		}
		for _, key := range []string{splitLabel, rollout.PoolLabel, rollout.MovingLabel} {
			e.labelNode(t, node, key, "")
		}
	})
}
