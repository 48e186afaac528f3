//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/clock"

	"github.com/kube-proxy-sync/kube-proxy-sync/internal/app"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/configmap"
	"github.com/kube-proxy-sync/kube-proxy-sync/test/e2e/cluster"
)

// poolsResult is the result of a run with pools.
type poolsResult struct {
	result
	Pools []struct {
		DaemonSet     string   `json:"daemonset"`
		Changed       bool     `json:"changed"`
		Failed        bool     `json:"failed"`
		Restarted     bool     `json:"restarted"`
		ChangedKeys   []string `json:"changed_keys"`
		ConfigMapName string   `json:"configmap_name"`
		APIRequests   int64    `json:"api_requests"`
	} `json:"pools"`
}

func runPools(t *testing.T, c *cluster.Cluster, args ...string) poolsResult {
	t.Helper()
	var out, errOut bytes.Buffer
	args = append([]string{"--kubeconfig", c.KubeconfigPath, "--output", "json", "--timeout", "3m"}, args...)
	code := app.Run(context.Background(), app.Streams{Out: &out, ErrOut: &errOut}, args, app.Deps{Clock: clock.RealClock{}})
	var r poolsResult
	require.NoError(t, json.Unmarshal(out.Bytes(), &r), "stdout: %s\nstderr: %s", out.String(), errOut.String())
	r.Code, r.Stderr = code, errOut.String()
	return r
}

// poolUIDs is the pods of a DaemonSet (by its pod label), by node.
func poolUIDs(t *testing.T, c *cluster.Cluster, app string) map[string]types.UID {
	t.Helper()
	pods, err := c.Client.CoreV1().Pods(c.Namespace).List(context.Background(), metav1.ListOptions{LabelSelector: "k8s-app=" + app})
	require.NoError(t, err)
	out := map[string]types.UID{}
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil {
			out[p.Spec.NodeName] = p.UID
		}
	}
	return out
}

// Two pools with different values: each runs a config of its own, owned
// by its own DaemonSet, the second identical run changes nothing, and
// deleting one pool leaves the other's pods and config as they were.
func TestPoolsConvergeAndOutliveEachOther(t *testing.T) {
	c := cluster.Connect(t)
	c.Reset(t)
	t.Cleanup(func() { c.Reset(t) })
	name := cluster.Name + "-pool"
	node := c.DaemonSetPods(t)[0].Spec.NodeName
	// a pool on one node, mounting its own config
	poolKubeProxy(t, c, name, node)
	args := []string{"--probe-path", "none", "--set", "clusterCIDR=10.93.0.0/16",
		"--pool", name, "--pool-set", name + ":iptables.minSyncPeriod=3s"}

	r := runPools(t, c, args...)
	require.Equal(t, 0, r.Code, r.Msg+"\n"+r.Stderr)
	require.Len(t, r.Pools, 2)
	assert.True(t, r.Pools[0].Changed && r.Pools[1].Changed, r.Msg)
	base, pool := c.DaemonSet(t), daemonSetNamed(t, c, name)
	baseCopy, poolCopy := mountedConfig(base.Spec.Template.Spec), mountedConfig(pool.Spec.Template.Spec)
	require.True(t, configmap.IsCopyName(cluster.Name, baseCopy), baseCopy)
	require.True(t, configmap.IsCopyName(name, poolCopy), poolCopy)
	bc, pc := c.ConfigMapNamed(t, baseCopy), c.ConfigMapNamed(t, poolCopy)
	assert.Contains(t, bc.Data["config.conf"], "10.93.0.0/16")
	assert.NotContains(t, bc.Data["config.conf"], "minSyncPeriod: 3s")
	assert.Contains(t, pc.Data["config.conf"], "10.93.0.0/16")
	assert.Contains(t, pc.Data["config.conf"], "minSyncPeriod: 3s")
	require.Len(t, pc.OwnerReferences, 1)
	assert.Equal(t, pool.UID, pc.OwnerReferences[0].UID, "the pool's copy belongs to the pool")
	assert.NotContains(t, c.ConfigMap(t).Data["config.conf"], "minSyncPeriod: 3s", "no pool writes kubeadm's record")

	// the second identical run changes nothing and replaces no pod
	basePods, poolPods := poolUIDs(t, c, cluster.Name), poolUIDs(t, c, name)
	require.NotEmpty(t, poolPods)
	r = runPools(t, c, args...)
	require.Equal(t, 0, r.Code, r.Msg+"\n"+r.Stderr)
	assert.False(t, r.Changed, r.Msg)
	assert.False(t, r.Pools[0].Changed || r.Pools[1].Changed, r.Msg)
	assert.Equal(t, basePods, poolUIDs(t, c, cluster.Name))
	assert.Equal(t, poolPods, poolUIDs(t, c, name))

	// the pool deleted: the garbage collector takes its copies, and only its
	bg := metav1.DeletePropagationBackground
	require.NoError(t, c.Client.AppsV1().DaemonSets(c.Namespace).Delete(context.Background(), name, metav1.DeleteOptions{PropagationPolicy: &bg}))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	require.NoError(t, wait.PollUntilContextCancel(ctx, 250*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		_, err := c.Client.CoreV1().ConfigMaps(c.Namespace).Get(ctx, poolCopy, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	}), "the pool's copy is collected with it")
	assert.Equal(t, bc.UID, c.ConfigMapNamed(t, baseCopy).UID, "the base's copy is untouched")
	assert.Equal(t, baseCopy, mountedConfig(c.DaemonSet(t).Spec.Template.Spec))
	assert.Equal(t, basePods, poolUIDs(t, c, cluster.Name))
	again := runSync(t, c, "--probe-path", "none", "--set", "clusterCIDR=10.93.0.0/16")
	require.Equal(t, 0, again.Code, again.Msg+"\n"+again.Stderr)
	assert.False(t, again.Changed, again.Msg)
}

// poolKubeProxy creates a second kube-proxy DaemonSet of the namespace, a
// pool on node only, whose template mounts a ConfigMap of its own name
// (made first, with the seed's data); the DaemonSet, its config and its
// copies go when the test ends.
func poolKubeProxy(t *testing.T, c *cluster.Cluster, name, node string) {
	t.Helper()
	ds := c.SeedDaemonSet(t)
	ds.Name = name
	ds.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"k8s-app": name}}
	ds.Spec.Template.Labels = map[string]string{"k8s-app": name}
	ds.Spec.Template.Spec.NodeSelector = map[string]string{"kubernetes.io/hostname": node}
	for i := range ds.Spec.Template.Spec.Volumes {
		if v := &ds.Spec.Template.Spec.Volumes[i]; v.ConfigMap != nil && v.ConfigMap.Name == cluster.Name {
			v.ConfigMap.Name = name
		}
	}
	// its config first, kubeadm's as the seed has it: a kube-proxy starts
	// only once the ConfigMap it mounts is there
	own := c.SeedConfigMap(t)
	own.Name = name
	_, err := c.Client.CoreV1().ConfigMaps(c.Namespace).Create(context.Background(), own, metav1.CreateOptions{})
	require.NoError(t, err)
	dss := c.Client.AppsV1().DaemonSets(c.Namespace)
	_, err = dss.Create(context.Background(), ds, metav1.CreateOptions{})
	require.NoError(t, err)
	t.Cleanup(func() {
		bg := metav1.DeletePropagationBackground
		if err := dss.Delete(context.Background(), name, metav1.DeleteOptions{PropagationPolicy: &bg}); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("delete daemonset %s: %v", name, err)
		}
		if err := c.Client.CoreV1().ConfigMaps(c.Namespace).Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("delete configmap %s: %v", name, err)
		}
	})
}

func daemonSetNamed(t *testing.T, c *cluster.Cluster, name string) *appsv1.DaemonSet {
	t.Helper()
	ds, err := c.Client.AppsV1().DaemonSets(c.Namespace).Get(context.Background(), name, metav1.GetOptions{})
	require.NoError(t, err)
	return ds
}

// mountedConfig is the ConfigMap the kube-proxy container's config volume names.
func mountedConfig(spec corev1.PodSpec) string {
	for _, v := range spec.Volumes {
		if v.ConfigMap != nil && v.Name == "kube-proxy" {
			return v.ConfigMap.Name
		}
	}
	return ""
}

// A move to nftables on a fleet with a pool whose node's kernel cannot run
// it: every pool is planned before the first write, so the run is refused
// naming the pool and the node, nothing changed; the same move with that
// pool held at its mode (--pool-set) moves kubeadm's DaemonSet, canary
// first with its checks, and leaves the pool's pods as they were.
func TestPoolsMigrationRefusedForOnePoolMovesTheOthers(t *testing.T) {
	c := cluster.Connect(t)
	c.Reset(t)
	t.Cleanup(func() { c.Reset(t) })
	name := cluster.Name + "-rhel8"
	node := c.DaemonSetPods(t)[0].Spec.NodeName
	splitOff(t, c, node, name)
	setKernel(t, c, node, "4.18.0-553.el8_10.x86_64")
	basePods, poolPods := poolUIDs(t, c, cluster.Name), poolUIDs(t, c, name)
	require.NotContains(t, basePods, node, "kubeadm's DaemonSet is off the pool's node")
	require.Contains(t, poolPods, node)
	before := stateOf(t, c)

	move := []string{"--probe-path", "none", "--set", "mode=nftables", "--verify-health", "auto", "--pool", name}
	r := runPools(t, c, move...)
	assert.Equal(t, 1, r.Code, r.Msg)
	for _, s := range []string{"pool " + name, node + " (kernel 4.18.0-553.el8_10.x86_64)", "no pool was changed", "--pool-set " + name + ":"} {
		assert.Contains(t, r.Msg, s)
	}
	assertUntouched(t, c, before)
	assert.Equal(t, basePods, poolUIDs(t, c, cluster.Name))
	assert.Equal(t, poolPods, poolUIDs(t, c, name))

	// pool by pool: the pool held at iptables, the rest moves
	r = runPools(t, c, append(move, "--pool-set", name+":mode=iptables")...)
	require.Equal(t, 0, r.Code, r.Msg+"\n"+r.Stderr)
	require.NotNil(t, r.Migration, r.Msg)
	assert.Equal(t, "nftables", r.Migration.To)
	assert.Equal(t, "canary", r.Migration.Strategy)
	assert.NotContains(t, r.Migration.CanaryNodes, node)
	assert.Empty(t, untouched(basePods, poolUIDs(t, c, cluster.Name)), "every pod of kubeadm's DaemonSet replaced")
	assert.Contains(t, assertMountsCopy(t, c).Data["config.conf"], "mode: nftables")
	assert.False(t, r.Pools[1].Restarted, r.Pools[1].ChangedKeys)
	assert.Equal(t, poolPods, poolUIDs(t, c, name), "the pool's pods as they were")
	pool := daemonSetNamed(t, c, name)
	assert.Contains(t, c.ConfigMapNamed(t, mountedConfig(pool.Spec.Template.Spec)).Data["config.conf"], "mode: iptables")
}

// splitOff puts node in a pool of its own, name (poolKubeProxy), and takes
// kubeadm's DaemonSet off it (a required node affinity on a label the
// node gets), waiting for both rollouts; the test's cluster reset puts
// kubeadm's DaemonSet back.
func splitOff(t *testing.T, c *cluster.Cluster, node, name string) {
	t.Helper()
	ctx := context.Background()
	const label = "kube-proxy-sync.io/e2e-pool"
	setLabel := func(v *string) error {
		body, _ := json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]any{label: v}}})
		_, err := c.Client.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, body, metav1.PatchOptions{})
		return err
	}
	require.NoError(t, setLabel(&name))
	t.Cleanup(func() { assert.NoError(t, setLabel(nil)) })
	affinity, _ := json.Marshal(map[string]any{"spec": map[string]any{"template": map[string]any{"spec": map[string]any{
		"affinity": corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
			NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: label, Operator: corev1.NodeSelectorOpDoesNotExist}}}},
		}}},
	}}}})
	_, err := c.Client.AppsV1().DaemonSets(c.Namespace).Patch(ctx, cluster.Name, types.StrategicMergePatchType, affinity, metav1.PatchOptions{})
	require.NoError(t, err)
	c.WaitRolloutComplete(t, 2*time.Minute)
	poolKubeProxy(t, c, name, node)
	wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	require.NoError(t, wait.PollUntilContextCancel(wctx, 250*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		pods, err := c.Client.CoreV1().Pods(c.Namespace).List(ctx, metav1.ListOptions{LabelSelector: "k8s-app in (" + cluster.Name + "," + name + ")"})
		if err != nil {
			return false, nil
		}
		onNode := 0
		for i := range pods.Items {
			p := &pods.Items[i]
			if p.Spec.NodeName != node {
				continue
			}
			if p.Labels["k8s-app"] != name || p.DeletionTimestamp != nil || !cluster.PodReady(p) {
				return false, nil
			}
			onNode++
		}
		return onNode == 1, nil
	}), "node %s runs the pool's kube-proxy only", node)
}

// A Windows node with kubeadm's Windows kube-proxy DaemonSet on the same
// record: left alone unless named. A move to nftables judges the Linux
// nodes only (the Windows node's kernel version would be refused), the
// Windows pod is never replaced, and the record it mounts is not written
// under it. Named as a pool, it is refused before any write: it runs the
// base's config, not one of its own.
func TestPoolsWindowsDaemonSetLeftAloneUnlessNamed(t *testing.T) {
	c := cluster.Connect(t)
	c.Reset(t)
	t.Cleanup(func() { c.Reset(t) })
	ctx := context.Background()
	const node, name = "win-00", cluster.Name + "-windows"
	_, err := c.Client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{
		Name: node, Annotations: map[string]string{kwokNodeAnnotation: "fake"},
		Labels: map[string]string{"kubernetes.io/os": "windows", "kubernetes.io/hostname": node, "type": "kwok"},
	}}, metav1.CreateOptions{})
	require.NoError(t, err)
	t.Cleanup(func() { removeNodes(t, c, []string{node}) })
	ds := c.SeedDaemonSet(t)
	ds.Name = name
	ds.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"k8s-app": name}}
	ds.Spec.Template.Labels = map[string]string{"k8s-app": name}
	ds.Spec.Template.Spec.NodeSelector = map[string]string{"kubernetes.io/os": "windows"}
	_, err = c.Client.AppsV1().DaemonSets(c.Namespace).Create(ctx, ds, metav1.CreateOptions{})
	require.NoError(t, err)
	t.Cleanup(func() {
		bg := metav1.DeletePropagationBackground
		_ = c.Client.AppsV1().DaemonSets(c.Namespace).Delete(context.Background(), name, metav1.DeleteOptions{PropagationPolicy: &bg})
	})
	require.Eventually(t, func() bool { _, ok := poolUIDs(t, c, name)[node]; return ok }, 2*time.Minute, 200*time.Millisecond, "the Windows pod runs")
	setKernel(t, c, node, "10.0.20348.2700")
	windowsPods, basePods := poolUIDs(t, c, name), poolUIDs(t, c, cluster.Name)
	require.NotContains(t, basePods, node)
	record := c.ConfigMap(t)

	r := runSync(t, c, "--probe-path", "none", "--set", "mode=nftables", "--verify-health", "auto")
	require.Equal(t, 0, r.Code, r.Msg+"\n"+r.Stderr)
	require.NotNil(t, r.Migration, r.Msg)
	assert.NotContains(t, r.Migration.CanaryNodes, node)
	assert.Empty(t, untouched(basePods, poolUIDs(t, c, cluster.Name)), "every Linux kube-proxy replaced")
	assert.Equal(t, windowsPods, poolUIDs(t, c, name), "the Windows kube-proxy never replaced")
	assert.False(t, r.RecordChanged, r.Msg)
	assert.Equal(t, record.ResourceVersion, c.ConfigMap(t).ResourceVersion, "the record the Windows pod mounts is not written")

	before := stateOf(t, c)
	p := runPools(t, c, "--probe-path", "none", "--pool", name)
	assert.Equal(t, 1, p.Code, p.Msg)
	assert.Contains(t, p.Msg, "mounts configmap "+cluster.Name+", the config of daemonset "+cluster.Name)
	assertUntouched(t, c, before)
	assert.Equal(t, windowsPods, poolUIDs(t, c, name))
}

// The API requests of a run that changes nothing grow with the pools, not
// with the nodes: each pool's own run makes the same few requests however
// many nodes there are.
func TestPoolsNoChangeRequestsGrowWithPoolsNotNodes(t *testing.T) {
	c := cluster.Connect(t)
	c.Reset(t)
	t.Cleanup(func() { c.Reset(t) })
	node := c.DaemonSetPods(t)[0].Spec.NodeName
	a, b := cluster.Name+"-a", cluster.Name+"-b"
	poolKubeProxy(t, c, a, node)
	poolKubeProxy(t, c, b, node)
	one := []string{"--probe-path", "none", "--pool", a}
	two := append(slices.Clone(one), "--pool", b)
	converged := func(args []string) poolsResult {
		t.Helper()
		r := runPools(t, c, args...)
		require.Equal(t, 0, r.Code, r.Msg+"\n"+r.Stderr)
		require.False(t, r.Changed, r.Msg)
		return r
	}
	require.Equal(t, 0, runPools(t, c, two...).Code) // adopt the pools
	r1, r2 := converged(one), converged(two)
	addNodes(t, c, "reqs", 12)
	r1more, r2more := converged(one), converged(two)
	t.Logf("no-change run: 1 pool %d requests (each DaemonSet: %d, %d), 2 pools %d (%d, %d, %d); with 12 more nodes: %d and %d",
		r1.APIRequests, r1.Pools[0].APIRequests, r1.Pools[1].APIRequests, r2.APIRequests,
		r2.Pools[0].APIRequests, r2.Pools[1].APIRequests, r2.Pools[2].APIRequests, r1more.APIRequests, r2more.APIRequests)
	assert.Equal(t, r1.APIRequests, r1more.APIRequests, "not with nodes")
	assert.Equal(t, r2.APIRequests, r2more.APIRequests, "not with nodes")
	assert.Equal(t, r2.Pools[1].APIRequests, r2.Pools[2].APIRequests, "the same for each pool")
	assert.Greater(t, r2.APIRequests, r1.APIRequests, "with pools")
	for _, p := range r2.Pools {
		assert.LessOrEqual(t, p.APIRequests, int64(6), p.DaemonSet)
	}
}
