package pools

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/clock"

	"github.com/kube-proxy-sync/kube-proxy-sync/internal/kube"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/kube/kubefake"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/lock"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/pools/poolstest"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/rollout"
)

func baseDaemonSet() *appsv1.DaemonSet {
	ds := &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: "kube-proxy", Namespace: "kube-system", UID: "base"},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"k8s-app": "kube-proxy"}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"k8s-app": "kube-proxy"}},
				Spec: corev1.PodSpec{
					NodeSelector: map[string]string{"kubernetes.io/os": "linux"},
					Containers:   []corev1.Container{{Name: "kube-proxy", VolumeMounts: []corev1.VolumeMount{{Name: "kube-proxy", MountPath: "/var/lib/kube-proxy"}}}},
					Volumes: []corev1.Volume{{Name: "kube-proxy", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
						LocalObjectReference: corev1.LocalObjectReference{Name: "kube-proxy-0123456789"}}}}},
				},
			},
		},
	}
	rollout.KeepOffPools(&ds.Spec.Template.Spec)
	return ds
}

func TestPoolDaemonSetRunsOnItsNodesWithItsOwnConfig(t *testing.T) {
	base := baseDaemonSet()
	ds := PoolDaemonSet(base, "rhel8", "kube-proxy")
	assert.Equal(t, map[string]string{"k8s-app": "rhel8"}, ds.Spec.Selector.MatchLabels)
	assert.Equal(t, "rhel8", ds.Spec.Template.Labels["k8s-app"])
	assert.Equal(t, "rhel8", ds.Spec.Template.Spec.Volumes[0].ConfigMap.Name)
	assert.Equal(t, "kube-proxy", ds.Labels[PoolOfLabel])
	assert.False(t, rollout.KeepsOffPools(&ds.Spec.Template.Spec), "on its own pool's nodes")
	assert.True(t, rollout.KeepsOffPools(&base.Spec.Template.Spec), "the base untouched")
	assert.Equal(t, "kube-proxy-0123456789", base.Spec.Template.Spec.Volumes[0].ConfigMap.Name)
}

// splitCluster is kubeadm's DaemonSet with its pod on node n1, which the
// selector rhel=8 picks, and the config it mounts.
func splitCluster(t *testing.T, unready map[string]bool) (*fake.Clientset, kube.Interface) {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: map[string]string{"kubernetes.io/os": "linux", "rhel": "8"}}}
	copyCM := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "kube-proxy-0123456789", Namespace: "kube-system"}, Data: map[string]string{"config.conf": "mode: iptables\n"}}
	base := baseDaemonSet()
	pool := PoolDaemonSet(base, "rhel8", "kube-proxy")
	c, api := kubefake.New(base, n, copyCM, poolstest.KubeProxyPod("kube-proxy-n1", "n1", base, true))
	poolstest.DaemonSets(t, c, unready, base, pool)
	return c, api
}

func nodeLabels(t *testing.T, c *fake.Clientset) map[string]string {
	got, err := c.CoreV1().Nodes().Get(context.Background(), "n1", metav1.GetOptions{})
	require.NoError(t, err)
	return got.Labels
}

const (
	toEmpty = `{"metadata":{"labels":{"kube-proxy-sync.io/pool":"rhel8","kube-proxy-sync.io/pool-moving":"true"}}}`
	toPool  = `{"metadata":{"labels":{"kube-proxy-sync.io/pool":"rhel8","kube-proxy-sync.io/pool-moving":null}}}`
	toBase  = `{"metadata":{"labels":{"kube-proxy-sync.io/pool":null,"kube-proxy-sync.io/pool-moving":null}}}`
)

// A node moves in two steps, never with two kube-proxies: first to labels
// under which neither DaemonSet runs there, until its pod is gone, then
// to the pool's.
func TestSplitMovesANodeWithNoStepOnTwoDaemonSets(t *testing.T) {
	c, api := splitCluster(t, nil)
	out, err := mover(api, false).Split(context.Background(), "rhel8", labels.SelectorFromSet(labels.Set{"rhel": "8"}))
	require.NoError(t, err)
	require.Len(t, out.Moved, 1)
	assert.Equal(t, "n1", out.Moved[0].Node)
	assert.Equal(t, []string{"configmap/rhel8", "daemonset/rhel8"}, out.Created)
	assert.Equal(t, []string{toEmpty, toPool}, nodePatches(c))
	assert.Equal(t, "rhel8", nodeLabels(t, c)[rollout.PoolLabel])
	rec, err := c.CoreV1().ConfigMaps("kube-system").Get(context.Background(), "rhel8", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, map[string]string{"config.conf": "mode: iptables\n"}, rec.Data, "the pool's config: the one its nodes run")

	// again: in place, nothing moved
	c.ClearActions()
	out, err = mover(api, false).Split(context.Background(), "rhel8", labels.SelectorFromSet(labels.Set{"rhel": "8"}))
	require.NoError(t, err)
	assert.Empty(t, out.Nodes)
	assert.Empty(t, nodePatches(c))
}

// A node whose pool kube-proxy is not Ready in time goes back the same
// way, and the run says so.
func TestSplitPutsANodeBackWhenItsPoolPodIsNotReadyInTime(t *testing.T) {
	c, api := splitCluster(t, map[string]bool{"rhel8": true})
	out, err := impatient(api).Split(context.Background(), "rhel8", labels.SelectorFromSet(labels.Set{"rhel": "8"}))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "node n1: no Ready kube-proxy of daemonset rhel8 alone on node n1")
	assert.Contains(t, err.Error(), "it is back on daemonset kube-proxy")
	assert.Equal(t, []string{"n1"}, out.Nodes)
	assert.Empty(t, out.Moved)
	assert.Equal(t, []string{toEmpty, toPool, toEmpty, toBase}, nodePatches(c), "there and back, each in two steps")
	assert.NotContains(t, nodeLabels(t, c), rollout.PoolLabel)
	assert.NotContains(t, nodeLabels(t, c), rollout.MovingLabel)
	_, err = c.CoreV1().Pods("kube-system").Get(context.Background(), "kube-proxy-n1", metav1.GetOptions{})
	assert.NoError(t, err, "kubeadm's kube-proxy back on the node")
}

func nodePatches(c *fake.Clientset) []string {
	var out []string
	for _, a := range c.Actions() {
		if p, ok := a.(k8stesting.PatchAction); ok && a.GetResource().Resource == "nodes" {
			out = append(out, string(p.GetPatch()))
		}
	}
	return out
}

// mover is a Mover whose waits end as soon as what they wait for is there
// (the fake controller makes it at once), at the latest after 30 s: a
// deadline, not a sleep, long enough for a loaded machine.
func mover(api kube.Interface, check bool) Mover {
	return Mover{Kube: api, Clock: clock.RealClock{}, Log: logrus.NewEntry(logrus.New()), Namespace: "kube-system",
		Base: "kube-proxy", Record: "kube-proxy", Container: "kube-proxy", NodeTimeout: 30 * time.Second, Check: check}
}

// impatient is a mover for a wait that must run out: 100 ms.
func impatient(api kube.Interface) Mover {
	m := mover(api, false)
	m.NodeTimeout = 100 * time.Millisecond
	return m
}

// A merge whose node's kube-proxy does not come back in time puts the node
// back in the pool, whose DaemonSet still runs there, and deletes nothing.
func TestMergePutsANodeBackInThePoolOnATimeout(t *testing.T) {
	c, api := splitCluster(t, nil)
	_, err := mover(api, false).Split(context.Background(), "rhel8", labels.SelectorFromSet(labels.Set{"rhel": "8"}))
	require.NoError(t, err)
	c.ClearActions()
	c.ReactionChain = c.ReactionChain[1:] // the controller again, with kubeadm's pods unready
	base, err := c.AppsV1().DaemonSets("kube-system").Get(context.Background(), "kube-proxy", metav1.GetOptions{})
	require.NoError(t, err)
	pool, err := c.AppsV1().DaemonSets("kube-system").Get(context.Background(), "rhel8", metav1.GetOptions{})
	require.NoError(t, err)
	poolstest.DaemonSets(t, c, map[string]bool{"kube-proxy": true}, base, pool)

	out, err := impatient(api).Merge(context.Background(), "rhel8")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "it is back on daemonset rhel8")
	assert.Equal(t, []string{"n1"}, out.Nodes)
	assert.Empty(t, out.Deleted, "nothing deleted while a node is not back")
	assert.Equal(t, []string{toEmpty, toBase, toEmpty, toPool}, nodePatches(c))
	assert.Equal(t, "rhel8", nodeLabels(t, c)[rollout.PoolLabel])
	_, err = c.AppsV1().DaemonSets("kube-system").Get(context.Background(), "rhel8", metav1.GetOptions{})
	assert.NoError(t, err)
}

// A ConfigMap of the pool's name that does not hold what the nodes run
// would become their config by a label: refused, in check mode too.
func TestSplitRefusesAConfigMapOfThePoolsNameHoldingOtherData(t *testing.T) {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: map[string]string{"kubernetes.io/os": "linux", "rhel": "8"}}}
	running := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "kube-proxy-0123456789", Namespace: "kube-system"}, Data: map[string]string{"config.conf": "mode: iptables\n"}}
	stale := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "rhel8", Namespace: "kube-system", Labels: map[string]string{PoolOfLabel: "kube-proxy"}}, Data: map[string]string{"config.conf": "mode: ipvs\n"}}
	for _, check := range []bool{true, false} {
		c, api := kubefake.New(baseDaemonSet(), n, running, stale)
		_, err := mover(api, check).Split(context.Background(), "rhel8", labels.SelectorFromSet(labels.Set{"rhel": "8"}))
		require.Error(t, err)
		assert.Contains(t, err.Error(), "configmap kube-system/rhel8 exists and does not hold the config daemonset kube-proxy runs")
		assert.Empty(t, nodePatches(c))
	}
}

func TestStrays(t *testing.T) {
	labelled := func(name, pool string) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{rollout.PoolLabel: pool}}}
	}
	pool := PoolDaemonSet(baseDaemonSet(), "rhel8", "kube-proxy")
	plain := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n0"}}
	halfway := labelled("n3", "rhel8")
	halfway.Labels[rollout.MovingLabel] = "true"
	_, api := kubefake.New(pool, plain, labelled("n1", "rhel8"), labelled("n2", "gone"), halfway)

	twice, orphans, err := Strays(context.Background(), api, "kube-system", baseDaemonSet())
	require.NoError(t, err)
	assert.Empty(t, twice, "kubeadm's DaemonSet keeps off the pools")
	assert.Equal(t, map[string][]string{"gone": {"n2"}, "moving:rhel8": {"n3"}}, orphans)

	bare := baseDaemonSet()
	bare.Spec.Template.Spec.Affinity = nil // a rollout undo to before the first split
	twice, _, err = Strays(context.Background(), api, "kube-system", bare)
	require.NoError(t, err)
	assert.Equal(t, []string{"n1"}, twice)
	w := StrayWarnings("kube-system", "kube-proxy", twice, orphans)
	require.Len(t, w, 3)
	assert.Contains(t, w[0], "nodes n1 are in pools")
	assert.Contains(t, w[1], "run `--merge gone`")
	assert.Contains(t, w[2], "nodes n3 are between daemonset kube-proxy and pool rhel8")
}

func TestWithoutPools(t *testing.T) {
	only := &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: rollout.PoolLabel, Operator: corev1.NodeSelectorOpDoesNotExist}}}}}
	assert.Nil(t, withoutPools(only), "a term of the pool requirement alone: every node")
	arch := corev1.NodeSelectorRequirement{Key: "kubernetes.io/arch", Operator: corev1.NodeSelectorOpIn, Values: []string{"amd64"}}
	both := &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{arch, only.NodeSelectorTerms[0].MatchExpressions[0]}}}}
	assert.Equal(t, []corev1.NodeSelectorRequirement{arch}, withoutPools(both).NodeSelectorTerms[0].MatchExpressions)
	assert.Len(t, both.NodeSelectorTerms[0].MatchExpressions, 2, "the DaemonSet's own untouched")
}

// The old pod does not go in time (the DaemonSet controller is down): the
// node's own labels come back in one PATCH, which keeps its kube-proxy,
// rather than a second try at emptying it.
func TestSplitKeepsTheOldPodWhenItDoesNotGoInTime(t *testing.T) {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: map[string]string{"kubernetes.io/os": "linux", "rhel": "8"}}}
	copyCM := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "kube-proxy-0123456789", Namespace: "kube-system"}, Data: map[string]string{"config.conf": "mode: iptables\n"}}
	base := baseDaemonSet()
	c, api := kubefake.New(base, n, copyCM, poolstest.KubeProxyPod("kube-proxy-n1", "n1", base, true))
	_, err := impatient(api).Split(context.Background(), "rhel8", labels.SelectorFromSet(labels.Set{"rhel": "8"}))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "the kube-proxy pods on node n1 not gone within 100ms")
	assert.Contains(t, err.Error(), "it is back on daemonset kube-proxy")
	assert.Equal(t, []string{toEmpty, toBase}, nodePatches(c))
	assert.NotContains(t, nodeLabels(t, c), rollout.MovingLabel)
}

// A merge while kubeadm's DaemonSet no longer keeps off the pools' nodes
// could not empty a node first: refused before any write, with the way.
func TestMergeRefusedWhileTheBaseDoesNotKeepOffThePools(t *testing.T) {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: map[string]string{"kubernetes.io/os": "linux", rollout.PoolLabel: "rhel8"}}}
	base := baseDaemonSet()
	pool := PoolDaemonSet(base, "rhel8", "kube-proxy")
	base.Spec.Template.Spec.Affinity = nil
	c, api := kubefake.New(base, pool, n)
	_, err := mover(api, false).Merge(context.Background(), "rhel8")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "run `--split rhel8 --split-nodes kube-proxy-sync.io/pool=rhel8`")
	assert.Contains(t, err.Error(), "nothing was changed")
	assert.Empty(t, nodePatches(c))
}

// A node a killed split left between the two DaemonSets (no kube-proxy):
// the same split run again finishes it.
func TestSplitRunAgainFinishesANodeLeftHalfWay(t *testing.T) {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: map[string]string{"kubernetes.io/os": "linux", "rhel": "8",
		rollout.PoolLabel: "rhel8", rollout.MovingLabel: "true"}}}
	copyCM := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "kube-proxy-0123456789", Namespace: "kube-system"}, Data: map[string]string{"config.conf": "mode: iptables\n"}}
	base := baseDaemonSet()
	pool := PoolDaemonSet(base, "rhel8", "kube-proxy")
	c, api := kubefake.New(base, pool, n, copyCM)
	poolstest.DaemonSets(t, c, nil, base, pool)
	out, err := mover(api, false).Split(context.Background(), "rhel8", labels.SelectorFromSet(labels.Set{"rhel": "8"}))
	require.NoError(t, err)
	assert.Equal(t, []string{"n1"}, out.Nodes)
	require.Len(t, out.Moved, 1)
	assert.Empty(t, out.Created, "the pool is there")
	assert.Equal(t, []string{toEmpty, toPool}, nodePatches(c))
	_, err = c.CoreV1().Pods("kube-system").Get(context.Background(), "rhel8-n1", metav1.GetOptions{})
	assert.NoError(t, err, "the pool's kube-proxy on the node")
}

// leased is m under a Lease whose taking first runs meanwhile: what another
// run did while this one waited for the Lease (on the tracker: a reactor
// holds the fake's lock).
func leased(t *testing.T, c *fake.Clientset, api kube.Interface, m Mover, meanwhile func()) Mover {
	t.Helper()
	once := false
	c.PrependReactor("create", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		if !once {
			once = true
			meanwhile()
		}
		return false, nil, nil
	})
	m.Lease = &lock.Lease{Leases: api.Leases("kube-system"), Namespace: "kube-system", Name: "kube-proxy-sync", Identity: "this-run",
		Duration: 30 * time.Second, Poll: 10 * time.Millisecond, Clock: clock.RealClock{}, Log: m.Log}
	m.LockTimeout = time.Second
	return m
}

// A split plans again once it holds the Lease: the node another run moved
// while this one waited is not moved twice, and the pool it made is kept.
func TestSplitPlansAgainUnderTheLease(t *testing.T) {
	c, api := splitCluster(t, nil)
	nodesGVR := corev1.SchemeGroupVersion.WithResource("nodes")
	podsGVR := corev1.SchemeGroupVersion.WithResource("pods")
	m := leased(t, c, api, mover(api, false), func() {
		base := baseDaemonSet()
		pool := PoolDaemonSet(base, "rhel8", "kube-proxy")
		obj, err := c.Tracker().Get(nodesGVR, "", "n1")
		require.NoError(t, err)
		n := obj.(*corev1.Node).DeepCopy()
		n.Labels[rollout.PoolLabel] = "rhel8"
		require.NoError(t, c.Tracker().Update(nodesGVR, n, ""))
		require.NoError(t, c.Tracker().Delete(podsGVR, "kube-system", "kube-proxy-n1"))
		require.NoError(t, c.Tracker().Add(pool))
		require.NoError(t, c.Tracker().Add(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "rhel8", Namespace: "kube-system",
			Labels: map[string]string{PoolOfLabel: "kube-proxy"}}, Data: map[string]string{"config.conf": "mode: iptables\n"}}))
		require.NoError(t, c.Tracker().Add(poolstest.KubeProxyPod("rhel8-n1", "n1", pool, true)))
	})
	out, err := m.Split(context.Background(), "rhel8", labels.SelectorFromSet(labels.Set{"rhel": "8"}))
	require.NoError(t, err)
	assert.Empty(t, out.Nodes, "split meanwhile")
	assert.Empty(t, out.Moved)
	assert.Empty(t, out.Created)
	assert.Empty(t, nodePatches(c))
}

// A merge is judged and planned again once it holds the Lease: a pool
// moved meanwhile to what the merge refuses (the caller's Judge) is
// refused then, nothing moved.
func TestMergeJudgedAgainUnderTheLease(t *testing.T) {
	c, api := splitCluster(t, nil)
	_, err := mover(api, false).Split(context.Background(), "rhel8", labels.SelectorFromSet(labels.Set{"rhel": "8"}))
	require.NoError(t, err)
	c.ClearActions()
	moved := false
	m := leased(t, c, api, mover(api, false), func() { moved = true })
	m.Judge = func(context.Context, []string) error {
		if moved {
			return errors.New("pool rhel8 runs proxy mode nftables")
		}
		return nil
	}
	out, err := m.Merge(context.Background(), "rhel8")
	require.EqualError(t, err, "pool rhel8 runs proxy mode nftables")
	assert.Empty(t, out.Moved)
	assert.Empty(t, out.Deleted)
	assert.Empty(t, nodePatches(c))
	assert.Equal(t, "rhel8", nodeLabels(t, c)[rollout.PoolLabel])
}

// A node labelled for the pool whose DaemonSet is gone is not in place,
// even while that DaemonSet's pod is still there (collected a moment
// later): the split makes the pool and moves the node.
func TestSplitMovesANodeWhosePoolIsGoneThoughItsPodLingers(t *testing.T) {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: map[string]string{"kubernetes.io/os": "linux", "rhel": "8", rollout.PoolLabel: "rhel8"}}}
	copyCM := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "kube-proxy-0123456789", Namespace: "kube-system"}, Data: map[string]string{"config.conf": "mode: iptables\n"}}
	base := baseDaemonSet()
	gone := PoolDaemonSet(base, "rhel8", "kube-proxy")
	c, api := kubefake.New(base, n, copyCM, poolstest.KubeProxyPod("rhel8-n1", "n1", gone, true))
	poolstest.DaemonSets(t, c, nil, base, gone)
	out, err := mover(api, false).Split(context.Background(), "rhel8", labels.SelectorFromSet(labels.Set{"rhel": "8"}))
	require.NoError(t, err)
	assert.Equal(t, []string{"n1"}, out.Nodes, "not in place: its pool's DaemonSet is gone")
	assert.Equal(t, []string{"configmap/rhel8", "daemonset/rhel8"}, out.Created)
	require.Len(t, out.Moved, 1)
}
