package app

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/yaml"

	"github.com/kube-proxy-sync/kube-proxy-sync/internal/configmap"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/kube"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/kube/kubefake"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/pools"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/pools/poolstest"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/rollout"
)

// poolDaemonSet is a pool of kubeadm's DaemonSet: its template mounting
// mounts (the pool's own config, or another's).
func poolDaemonSet(name, mounts string) *appsv1.DaemonSet {
	_, ds := seed()
	ds.Name, ds.UID = name, types.UID("uid-"+name)
	ds.Spec.Template.Spec.Volumes[0].ConfigMap.Name = mounts
	return ds
}

// poolCluster is kubeadm's ConfigMap and DaemonSet, with the pools' DaemonSets.
func poolCluster(pools ...*appsv1.DaemonSet) (*fake.Clientset, kube.Interface) {
	cm, ds := seed()
	ds.UID = "uid-kube-proxy"
	objs := []runtime.Object{cm, ds}
	for _, p := range pools {
		objs = append(objs, p)
	}
	return kubefake.New(objs...)
}

// runOn runs the command against api.
func runOn(t *testing.T, api kube.Interface, args ...string) (int, moduleResult, string) {
	t.Helper()
	return runOnClock(t, api, clocktesting.NewFakeClock(time.Unix(0, 0)), args...)
}

// runOnClock runs the command against api with clk as its clock.
func runOnClock(t *testing.T, api kube.Interface, clk *clocktesting.FakeClock, args ...string) (int, moduleResult, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := Run(context.Background(), Streams{Out: &out, ErrOut: &errOut}, append(args, "-o", "json"), Deps{
		Clock: clk, Kube: api,
	})
	var res moduleResult
	require.NoError(t, json.Unmarshal(out.Bytes(), &res), out.String()+errOut.String())
	return code, res, errOut.String()
}

// mountedBy is the ConfigMap the DaemonSet's config volume names.
func mountedBy(t *testing.T, c *fake.Clientset, name string) string {
	t.Helper()
	ds, err := c.AppsV1().DaemonSets("kube-system").Get(context.Background(), name, metav1.GetOptions{})
	require.NoError(t, err)
	return ds.Spec.Template.Spec.Volumes[0].ConfigMap.Name
}

// field reads one top-level KubeProxyConfiguration field, or one of a
// section ("iptables.minSyncPeriod"), of a ConfigMap's config.conf.
func field(t *testing.T, c *fake.Clientset, cm, path string) string {
	t.Helper()
	got, err := c.CoreV1().ConfigMaps("kube-system").Get(context.Background(), cm, metav1.GetOptions{})
	require.NoError(t, err, cm)
	var v map[string]any
	require.NoError(t, yaml.Unmarshal([]byte(got.Data[configmap.ConfigKey]), &v))
	section, key, nested := strings.Cut(path, ".")
	if !nested {
		return fmt.Sprint(v[section])
	}
	inner, _ := v[section].(map[string]any)
	return fmt.Sprint(inner[key])
}

func TestPoolsRunTheirOwnConfigAndConverge(t *testing.T) {
	c, api := poolCluster(poolDaemonSet("kube-proxy-b", "kube-proxy-b"))
	args := []string{"--set", "conntrack.maxPerCore=0", "--pool", "kube-proxy-b", "--pool-set", "kube-proxy-b:iptables.minSyncPeriod=2s"}
	code, res, stderr := runOn(t, api, args...)
	require.Equal(t, ExitOK, code, res.Msg+stderr)
	require.Len(t, res.Pools, 2)
	assert.Equal(t, []string{"kube-proxy", "kube-proxy-b"}, []string{res.Pools[0].DaemonSet, res.Pools[1].DaemonSet})
	assert.True(t, res.Changed)
	assert.True(t, res.Pools[0].Changed)
	assert.True(t, res.Pools[1].Changed)
	assert.Regexp(t, `[^.]\. Pools changed: kube-proxy, kube-proxy-b of 2\.$`, res.Msg, "the base's sentence ends before the pools' begins")

	// each DaemonSet mounts a copy of its own record, owned by it
	base, pool := mountedBy(t, c, "kube-proxy"), mountedBy(t, c, "kube-proxy-b")
	assert.True(t, configmap.IsCopyName("kube-proxy", base), base)
	assert.True(t, configmap.IsCopyName("kube-proxy-b", pool), pool)
	cp, err := c.CoreV1().ConfigMaps("kube-system").Get(context.Background(), pool, metav1.GetOptions{})
	require.NoError(t, err)
	require.Len(t, cp.OwnerReferences, 1)
	assert.Equal(t, types.UID("uid-kube-proxy-b"), cp.OwnerReferences[0].UID)
	assert.Equal(t, res.Pools[1].ConfigMapName, pool)

	// the base's config has the shared value only; the pool's both, and
	// its record was made from the base's
	assert.Equal(t, "0", field(t, c, base, "conntrack.maxPerCore"))
	assert.NotEqual(t, "2s", field(t, c, base, "iptables.minSyncPeriod"))
	assert.Equal(t, "0", field(t, c, pool, "conntrack.maxPerCore"))
	assert.Equal(t, "2s", field(t, c, pool, "iptables.minSyncPeriod"))
	rec, err := c.CoreV1().ConfigMaps("kube-system").Get(context.Background(), "kube-proxy-b", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, "kube-proxy", rec.Labels[PoolOfLabel])
	assert.NotEqual(t, "2s", field(t, c, "kube-proxy", "iptables.minSyncPeriod"), "no pool writes the base's record")

	// the same run again changes nothing, in either pool
	c.ClearActions()
	code, res, stderr = runOn(t, api, args...)
	require.Equal(t, ExitOK, code, res.Msg+stderr)
	assert.False(t, res.Changed, res.Msg)
	assert.False(t, res.Pools[0].Changed)
	assert.False(t, res.Pools[1].Changed)
	assert.Zero(t, writes(c), "a converged run writes nothing")
	assert.Equal(t, pool, mountedBy(t, c, "kube-proxy-b"))
}

func TestPoolsCheckModeWritesNothingAndSaysWhatWouldChange(t *testing.T) {
	c, api := poolCluster(poolDaemonSet("kube-proxy-b", "kube-proxy-b"))
	code, res, stderr := runOn(t, api, "--check", "--probe-path", "none", "--pool", "kube-proxy-b", "--pool-set", "kube-proxy-b:iptables.minSyncPeriod=2s")
	require.Equal(t, ExitOK, code, res.Msg+stderr)
	assert.Zero(t, writes(c), "check mode writes nothing, not even the pool's record")
	require.Len(t, res.Pools, 2)
	assert.Empty(t, res.Pools[0].ChangedKeys, "nothing asked of the base")
	assert.False(t, res.Pools[0].Restarted)
	assert.True(t, res.Pools[1].Changed, "the pool's value, judged against the record a real run would make")
	assert.Equal(t, []string{"config.conf:iptables.minSyncPeriod"}, res.Pools[1].ChangedKeys)
	assert.True(t, res.Changed)
}

func TestPoolMountingTheBaseConfigIsRefusedBeforeAnyWrite(t *testing.T) {
	for _, mounts := range []string{"kube-proxy", "kube-proxy-0123456789"} {
		c, api := poolCluster(poolDaemonSet("kube-proxy-b", mounts))
		code, res, _ := runOn(t, api, "--set", "conntrack.maxPerCore=0", "--pool", "kube-proxy-b")
		assert.Equal(t, ExitFailed, code)
		assert.Contains(t, res.Msg, "mounts configmap "+mounts+", the config of daemonset kube-proxy")
		assert.Contains(t, res.Msg, "nothing was changed")
		assert.Zero(t, writes(c), mounts)
	}
}

func TestPoolRefusedInThePlanChangesNoPool(t *testing.T) {
	c, api := poolCluster(poolDaemonSet("kube-proxy-b", "kube-proxy-b"), poolDaemonSet("kube-proxy-c", "kube-proxy-c"))
	// the base and b could go; c's value fails kube-proxy's validation
	code, res, _ := runOn(t, api, "--set", "conntrack.maxPerCore=0", "--pool", "kube-proxy-b", "--pool", "kube-proxy-c",
		"--pool-set", "kube-proxy-c:conntrack.maxPerCore=-1")
	assert.Equal(t, ExitFailed, code)
	assert.Contains(t, res.Msg, "pool kube-proxy-c")
	assert.Contains(t, res.Msg, "no pool was changed")
	assert.Zero(t, writes(c))
	assert.Equal(t, "kube-proxy", mountedBy(t, c, "kube-proxy"))
}

func TestPoolFailureStopsThereAndLeavesTheRest(t *testing.T) {
	c, api := poolCluster(poolDaemonSet("kube-proxy-b", "kube-proxy-b"), poolDaemonSet("kube-proxy-c", "kube-proxy-c"))
	// b's restart PATCH fails after the base went through; c is never run
	c.PrependReactor("patch", "daemonsets", func(a k8stesting.Action) (bool, runtime.Object, error) {
		p, ok := a.(k8stesting.PatchActionImpl)
		if ok && p.GetName() == "kube-proxy-b" && !slices.Contains(p.PatchOptions.DryRun, metav1.DryRunAll) {
			return true, nil, apierrors.NewForbidden(schema.GroupResource{Group: "apps", Resource: "daemonsets"}, p.GetName(), errors.New("denied"))
		}
		return false, nil, nil
	})
	code, res, _ := runOn(t, api, "--set", "conntrack.maxPerCore=0", "--pool", "kube-proxy-b", "--pool", "kube-proxy-c")
	assert.Equal(t, ExitFailed, code)
	assert.Contains(t, res.Msg, "pool kube-proxy-b")
	assert.Contains(t, res.Msg, "not run, left as they were: kube-proxy-c")
	require.Len(t, res.Pools, 2, "the base and b ran, c did not")
	assert.True(t, res.Pools[0].Changed)
	assert.False(t, res.Pools[0].Failed)
	assert.True(t, res.Pools[1].Failed)
	assert.True(t, configmap.IsCopyName("kube-proxy", mountedBy(t, c, "kube-proxy")), "the base went through")
	assert.Equal(t, "kube-proxy-b", mountedBy(t, c, "kube-proxy-b"))
	assert.Equal(t, "kube-proxy-c", mountedBy(t, c, "kube-proxy-c"))
	_, err := c.CoreV1().ConfigMaps("kube-system").Get(context.Background(), "kube-proxy-c", metav1.GetOptions{})
	assert.True(t, apierrors.IsNotFound(err), "c's record is not made: c was not run")
}

func TestPoolOptionsRefused(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--pool", "kube-proxy"}, "that is --daemonset or --configmap"},
		{[]string{"--pool", "kube-proxy-0123456789"}, "a name of a copy of configmap kube-proxy"},
		{[]string{"--pool", "a", "--pool", "a"}, `--pool "a" is named twice`},
		{[]string{"--pool", "Bad_Name"}, `--pool "Bad_Name"`},
		{[]string{"--pool", "a", "--pool-set", "b:mode=iptables"}, "b is not a --pool of this run"},
		{[]string{"--pool", "a", "--pool-set", "mode=iptables"}, "want NAME:path=value"},
		{[]string{"--pool", "a", "--template", "kubeadm", "--kubeadm-config", "x"}, "--pool with --template"},
	} {
		r := run(t, tc.args...)
		assert.Equal(t, ExitFailed, r.code, tc.args)
		assert.Contains(t, r.stderr, tc.want, tc.args)
		assert.Zero(t, writes(r.client), tc.args)
	}
}

func TestPoolsModuleArg(t *testing.T) {
	o := NewOptions()
	require.NoError(t, poolsArg(o, map[string]any{
		"kube-proxy-c": map[string]any{},
		"kube-proxy-b": map[string]any{"mode": "iptables", "iptables.minSyncPeriod": "2s"},
	}))
	assert.Equal(t, []string{"kube-proxy-b", "kube-proxy-c"}, o.Pools, "by name")
	assert.Equal(t, []string{"kube-proxy-b:iptables.minSyncPeriod=2s", "kube-proxy-b:mode=iptables"}, o.PoolSet)
	assert.ErrorContains(t, poolsArg(o, []any{"kube-proxy-b"}), "want a dict of DaemonSet names")
	assert.ErrorContains(t, poolsArg(o, map[string]any{"b": "iptables"}), "b: want a dict of field paths")
}

func TestSplitOptionsRefused(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--split", "p"}, "--split needs --split-nodes"},
		{[]string{"--split", "p", "--split-nodes", "a in ("}, "--split-nodes \"a in (\""},
		{[]string{"--split-nodes", "a=b"}, "--split-nodes goes with --split"},
		{[]string{"--split", "p", "--split-nodes", "a=b", "--merge", "q"}, "one at a time"},
		{[]string{"--split", "kube-proxy", "--split-nodes", "a=b"}, "name the pool otherwise"},
		{[]string{"--split", strings.Repeat("p", 64), "--split-nodes", "a=b"}, "a pool's name is a label value"},
		{[]string{"--split", "p", "--split-nodes", "a=b", "--set", "mode=iptables"}, "it takes no --pool, --set"},
		{[]string{"--merge", "p", "--pool", "q"}, "it takes no --pool, --set"},
		{[]string{"--merge", "p", "--restart", "never"}, "--merge with --restart never"},
		// no node selected: nothing rolled, kubeadm's DaemonSet as it was
		{[]string{"--split", "p", "--split-nodes", "a=b"}, "no node that daemonset kube-system/kube-proxy runs on matches a=b; nothing was changed"},
	} {
		r := run(t, tc.args...)
		assert.Equal(t, ExitFailed, r.code, tc.args)
		assert.Contains(t, r.stderr, tc.want, tc.args)
		assert.Zero(t, writes(r.client), tc.args)
	}
}

// A merge would move the pool's nodes onto the base's config by a label:
// another proxy mode is refused, nothing changed, and the way named.
func TestMergeOfAnotherModeRefused(t *testing.T) {
	c, api, _ := poolOfBase(t, func(s string) string { return strings.Replace(s, "mode: iptables", "mode: nftables", 1) })
	code, res, _ := runOn(t, api, "--merge", "kube-proxy-b")
	assert.Equal(t, ExitFailed, code)
	assert.Contains(t, res.Msg, "pool kube-proxy-b runs proxy mode nftables (node(s) n0, by its template) and daemonset kube-system/kube-proxy iptables")
	assert.Contains(t, res.Msg, "--pool kube-proxy-b --pool-set kube-proxy-b:mode=iptables")
	assert.Zero(t, writes(c))
}

// poolOfBase is pool kube-proxy-b of kubeadm's DaemonSet, its record
// kubeadm's config with edit applied.
func poolOfBase(t *testing.T, edit func(config string) string) (*fake.Clientset, kube.Interface, *appsv1.DaemonSet) {
	t.Helper()
	p := poolDaemonSet("kube-proxy-b", "kube-proxy-b")
	p.Labels = map[string]string{"kube-proxy-sync.io/pool-of": "kube-proxy"}
	c, api := poolCluster(p)
	cm, _ := seed()
	cm.Name = "kube-proxy-b"
	cm.Labels = map[string]string{"kube-proxy-sync.io/pool-of": "kube-proxy"}
	cm.Data["config.conf"] = edit(cm.Data["config.conf"])
	_, err := c.CoreV1().ConfigMaps("kube-system").Create(context.Background(), cm, metav1.CreateOptions{})
	require.NoError(t, err)
	// split before: kubeadm's DaemonSet keeps off the pools' nodes
	base, err := c.AppsV1().DaemonSets("kube-system").Get(context.Background(), "kube-proxy", metav1.GetOptions{})
	require.NoError(t, err)
	rollout.KeepOffPools(&base.Spec.Template.Spec)
	_, err = c.AppsV1().DaemonSets("kube-system").Update(context.Background(), base, metav1.UpdateOptions{})
	require.NoError(t, err)
	// a node of the pool, which a merge would move
	_, err = c.CoreV1().Nodes().Create(context.Background(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n0",
		Labels: map[string]string{"kube-proxy-sync.io/pool": "kube-proxy-b"}}}, metav1.CreateOptions{})
	require.NoError(t, err)
	c.ClearActions()
	return c, api, p
}

// movingPool is kubeadm's DaemonSet, keeping off the pools' nodes, and its
// pool kube-proxy-b (its record kubeadm's config with edit applied) on
// nodes n1 and n2, with the DaemonSet controller played on node patches.
func movingPool(t *testing.T, edit func(config string) string) (*fake.Clientset, kube.Interface) {
	t.Helper()
	cm, base := seed()
	base.UID = "uid-kube-proxy"
	base.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"k8s-app": "kube-proxy"}}
	base.Spec.Template.Labels = map[string]string{"k8s-app": "kube-proxy"}
	rollout.KeepOffPools(&base.Spec.Template.Spec)
	p := pools.PoolDaemonSet(base, "kube-proxy-b", "kube-proxy")
	p.UID = "uid-kube-proxy-b"
	rec := cm.DeepCopy()
	rec.Name, rec.Labels = "kube-proxy-b", map[string]string{"kube-proxy-sync.io/pool-of": "kube-proxy"}
	rec.Data["config.conf"] = edit(rec.Data["config.conf"])
	objs := []runtime.Object{cm, base, p, rec}
	for _, n := range []string{"n1", "n2"} {
		objs = append(objs, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n, Labels: map[string]string{rollout.PoolLabel: "kube-proxy-b"}}},
			poolstest.KubeProxyPod("kube-proxy-b-"+n, n, p, true))
	}
	c, api := kubefake.New(objs...)
	poolstest.DaemonSets(t, c, nil, base, p)
	return c, api
}

// Another image is another kube-proxy version on the pool's nodes: a
// merge is refused, nothing changed, and the pool run that judges that
// move named.
func TestMergeOfAnotherImageRefused(t *testing.T) {
	c, api, p := poolOfBase(t, func(s string) string { return s })
	p.Spec.Template.Spec.Containers[0].Image = "registry.k8s.io/kube-proxy:v1.32.9"
	_, err := c.AppsV1().DaemonSets("kube-system").Update(context.Background(), p, metav1.UpdateOptions{})
	require.NoError(t, err)
	c.ClearActions()
	code, res, _ := runOn(t, api, "--merge", "kube-proxy-b")
	assert.Equal(t, ExitFailed, code)
	assert.Contains(t, res.Msg, "pool kube-proxy-b runs image registry.k8s.io/kube-proxy:v1.32.9 (node(s) n0, by its template) and daemonset kube-system/kube-proxy registry.k8s.io/kube-proxy:v1.33.6")
	assert.Contains(t, res.Msg, "--pool kube-proxy-b --image registry.k8s.io/kube-proxy:v1.33.6")
	assert.Zero(t, writes(c))
}

// runningCopy makes the pool's pod on node run config (a copy of the
// pool's record it mounts, as a change made with --restart never leaves
// it) while the pool's template stays as it is.
func runningCopy(t *testing.T, c *fake.Clientset, node, config string) {
	t.Helper()
	ctx := context.Background()
	p, err := c.AppsV1().DaemonSets("kube-system").Get(ctx, "kube-proxy-b", metav1.GetOptions{})
	require.NoError(t, err)
	cp := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: configmap.CopyName("kube-proxy-b", "0123456789abcdef"), Namespace: "kube-system"},
		Data: map[string]string{"config.conf": config}}
	if _, err = c.CoreV1().ConfigMaps("kube-system").Create(ctx, cp, metav1.CreateOptions{}); !apierrors.IsAlreadyExists(err) {
		require.NoError(t, err)
	}
	pod, err := c.CoreV1().Pods("kube-system").Get(ctx, "kube-proxy-b-"+node, metav1.GetOptions{})
	require.NoError(t, err)
	pod.Labels = p.Spec.Template.Labels
	pod.Spec = *p.Spec.Template.Spec.DeepCopy()
	pod.Spec.NodeName = node
	for i := range pod.Spec.Volumes {
		if v := pod.Spec.Volumes[i].ConfigMap; v != nil {
			v.Name = cp.Name
		}
	}
	_, err = c.CoreV1().Pods("kube-system").Update(ctx, pod, metav1.UpdateOptions{})
	require.NoError(t, err)
}

// Judged by what the nodes run, not by the templates: a pool whose
// template is back on iptables while its pod on n1 still runs nftables (a
// change made with --restart never) moves n1 from nftables to iptables in
// a merge, a mode change by a label: refused, the node named, nothing
// changed. Both templates say iptables; a judge of templates let it pass.
func TestMergeJudgesWhatThePodsRun(t *testing.T) {
	c, api := movingPool(t, func(s string) string { return s })
	runningCopy(t, c, "n1", "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\nmode: nftables\n")
	c.ClearActions()
	code, res, _ := runOn(t, api, "--merge", "kube-proxy-b")
	assert.Equal(t, ExitFailed, code, res.Msg)
	assert.Contains(t, res.Msg, "pool kube-proxy-b runs proxy mode nftables (node(s) n1, by their pods) and daemonset kube-system/kube-proxy iptables")
	assert.Zero(t, writes(c))
}

// And the other way: a pool whose template moved to nftables with
// --restart never, its pods still on iptables, merges into an iptables
// base with no mode change on any node: it goes ahead.
func TestMergeOfPodsStillOnTheBasesModeGoesAhead(t *testing.T) {
	c, api := movingPool(t, func(s string) string { return strings.Replace(s, "mode: iptables", "mode: nftables", 1) })
	for _, n := range []string{"n1", "n2"} {
		runningCopy(t, c, n, "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\nmode: iptables\n")
	}
	code, res, _ := runOn(t, api, "--merge", "kube-proxy-b")
	require.Equal(t, ExitOK, code, res.Msg)
	assert.Contains(t, res.PoolMove.Deleted, "daemonset/kube-proxy-b")
}

// The same version by another reference (a mirror's tag, pinned by a
// digest as well) is no version change: the merge goes ahead. A reference
// with no version in it is only the same as itself.
func TestMergeOfTheSameVersionByAnotherReference(t *testing.T) {
	const digest = "@sha256:0000000000000000000000000000000000000000000000000000000000000000"
	for image, ok := range map[string]bool{
		"mirror.example/kube-proxy:v1.33.6" + digest:    true,
		"mirror.example/kube-proxy" + digest:            false,
		"registry.k8s.io/kube-proxy:v1.33.6-eksbuild.1": false,
	} {
		t.Run(image, func(t *testing.T) {
			c, api := movingPool(t, func(s string) string { return s })
			p, err := c.AppsV1().DaemonSets("kube-system").Get(context.Background(), "kube-proxy-b", metav1.GetOptions{})
			require.NoError(t, err)
			p.Spec.Template.Spec.Containers[0].Image = image
			_, err = c.AppsV1().DaemonSets("kube-system").Update(context.Background(), p, metav1.UpdateOptions{})
			require.NoError(t, err)
			code, res, _ := runOn(t, api, "--merge", "kube-proxy-b")
			if !ok {
				assert.Equal(t, ExitFailed, code)
				assert.Contains(t, res.Msg, "pool kube-proxy-b runs image "+image)
				return
			}
			require.Equal(t, ExitOK, code, res.Msg)
			assert.Contains(t, res.PoolMove.Deleted, "daemonset/kube-proxy-b")
		})
	}
}

// Settings of the pool's own (not the mode) go the base's way on its
// nodes: the merge goes ahead and says which, from what to what. An empty
// mode is iptables, kube-proxy's Linux default, so no mode change.
func TestMergeWarnsOfTheSettingsThePoolSetsApart(t *testing.T) {
	_, api := movingPool(t, func(s string) string {
		return strings.Replace(s, "mode: iptables\n", "mode: \"\"\niptables:\n  minSyncPeriod: 7s\n", 1)
	})
	code, res, _ := runOn(t, api, "--merge", "kube-proxy-b")
	require.Equal(t, ExitOK, code, res.Msg)
	require.Len(t, res.Warnings, 1, res.Warnings)
	assert.Equal(t, `pool kube-proxy-b (node(s) n1, n2, by its template) sets apart from daemonset kube-system/kube-proxy: iptables.minSyncPeriod "7s" -> unset; `+
		`merged, its nodes run the daemonset's values (for the pool's own checks first: --pool kube-proxy-b --pool-set kube-proxy-b:PATH=VALUE, then merge)`, res.Warnings[0])
	assert.Contains(t, res.PoolMove.Deleted, "daemonset/kube-proxy-b")
}

// A pool merged already (no DaemonSet, no node labelled for it, no config)
// is no change: a rerun of the same merge ends green.
func TestMergeOfAMergedPoolIsNoChange(t *testing.T) {
	r := run(t, "--merge", "p", "-o", "json")
	assert.Equal(t, ExitOK, r.code, r.stdout+r.stderr)
	var res moduleResult
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &res))
	assert.False(t, res.Changed, res.Msg)
	assert.Zero(t, writes(r.client))
}

// Pool nodes while kubeadm's DaemonSet does not keep off them (a rollout
// undo to before the first split) run two kube-proxies: a run with pools
// refuses, nothing changed. A node labelled for a pool whose DaemonSet is
// gone runs none: warned.
func TestPoolsRunRefusedWhilePoolNodesRunTwoKubeProxies(t *testing.T) {
	labelled := func(name, pool string) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"kube-proxy-sync.io/pool": pool}}}
	}
	cm, ds := seed()
	ds.UID = "uid-kube-proxy"
	c, api := kubefake.New(cm, ds, poolDaemonSet("kube-proxy-b", "kube-proxy-b"), labelled("n1", "kube-proxy-b"), labelled("n2", "kube-proxy-gone"))
	code, res, _ := runOn(t, api, "--set", "conntrack.maxPerCore=0", "--pool", "kube-proxy-b")
	assert.Equal(t, ExitFailed, code)
	assert.Contains(t, res.Msg, "nodes n1 are in pools (label kube-proxy-sync.io/pool) but daemonset kube-system/kube-proxy no longer keeps off them")
	assert.Contains(t, res.Msg, "nothing was changed")
	assert.Zero(t, writes(c))
	require.NotEmpty(t, res.Warnings)
	assert.Contains(t, res.Warnings[0], "nodes n2 are labelled for pool kube-proxy-gone, whose daemonset kube-system/kube-proxy-gone is gone")
}

// --timeout bounds a merge's moves as it bounds a rollout: the node moving
// when it passes arrives, no further node starts to move, and the run
// fails saying how many moved and how to go on; the pool is kept.
func TestMergeStopsAtTheTimeout(t *testing.T) {
	c, api := movingPool(t, func(s string) string { return s })
	// the time passes while n1 moves back: past the deadline once it is there
	clk := clocktesting.NewFakeClock(time.Unix(0, 0))
	c.PrependReactor("patch", "nodes", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.(k8stesting.PatchAction).GetName() == "n1" && strings.Contains(string(a.(k8stesting.PatchAction).GetPatch()), `"kube-proxy-sync.io/pool":null`) {
			clk.Step(2 * time.Minute)
		}
		return false, nil, nil
	})

	code, res, _ := runOnClock(t, api, clk, "--merge", "kube-proxy-b", "--timeout", "1m")
	assert.Equal(t, ExitFailed, code)
	assert.Equal(t, "--timeout (1m0s) reached with 1 of 2 node(s) moved; the others stay where they are, each with its kube-proxy: run the same --merge kube-proxy-b again to go on", res.Msg)
	require.NotNil(t, res.PoolMove)
	require.Len(t, res.PoolMove.Moved, 1)
	assert.Equal(t, "n1", res.PoolMove.Moved[0].Node, "the node moving arrived")
	for node, pool := range map[string]string{"n1": "", "n2": "kube-proxy-b"} {
		got, err := c.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
		require.NoError(t, err)
		assert.Equal(t, pool, got.Labels[rollout.PoolLabel], node)
	}
	_, err := c.AppsV1().DaemonSets("kube-system").Get(context.Background(), "kube-proxy-b", metav1.GetOptions{})
	assert.NoError(t, err, "the pool is kept")
}

// A pool's proxy-mode change reports its migration in its entry (the base,
// moving nothing, has none), as the top-level migration does without pools.
func TestPoolEntryReportsItsMigration(t *testing.T) {
	_, api := poolCluster(poolDaemonSet("kube-proxy-b", "kube-proxy-b"))
	code, res, stderr := runOn(t, api, "--check", "--verify-traffic", "none", "--pool", "kube-proxy-b", "--pool-set", "kube-proxy-b:mode=nftables")
	require.Equal(t, ExitOK, code, res.Msg+stderr)
	require.Len(t, res.Pools, 2)
	assert.Nil(t, res.Pools[0].Migration, "the base keeps its mode")
	require.NotNil(t, res.Pools[1].Migration)
	assert.Equal(t, "iptables", res.Pools[1].Migration.From)
	assert.Equal(t, "nftables", res.Pools[1].Migration.To)
	assert.Equal(t, "canary", res.Pools[1].Migration.Strategy)
	assert.Nil(t, res.Pools[1].Connectivity, "no traffic check asked")
}

// A split judges what the nodes' pods of kubeadm's DaemonSet run, not its
// template: both templates say iptables, but the base's pod on n2 still
// runs nftables (a copy it mounts, from a change made with --restart
// never): moving n2 into the iptables pool changes its mode, refused,
// nothing written.
func TestSplitJudgesWhatTheBasesPodsRun(t *testing.T) {
	ctx := context.Background()
	c, api, _ := poolOfBase(t, func(s string) string { return s })
	base, err := c.AppsV1().DaemonSets("kube-system").Get(ctx, "kube-proxy", metav1.GetOptions{})
	require.NoError(t, err)
	base.UID = "uid-kube-proxy"
	base.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"k8s-app": "kube-proxy"}}
	base.Spec.Template.Labels = map[string]string{"k8s-app": "kube-proxy"}
	base, err = c.AppsV1().DaemonSets("kube-system").Update(ctx, base, metav1.UpdateOptions{})
	require.NoError(t, err)
	cp := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: configmap.CopyName("kube-proxy", "fedcba9876543210"), Namespace: "kube-system"},
		Data: map[string]string{"config.conf": "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\nmode: nftables\n"}}
	_, err = c.CoreV1().ConfigMaps("kube-system").Create(ctx, cp, metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = c.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n2", Labels: map[string]string{"rhel": "8"}}}, metav1.CreateOptions{})
	require.NoError(t, err)
	pod := poolstest.KubeProxyPod("kube-proxy-n2", "n2", base, true)
	pod.Labels = base.Spec.Template.Labels
	pod.Spec = *base.Spec.Template.Spec.DeepCopy()
	pod.Spec.NodeName = "n2"
	pod.Spec.Volumes[0].ConfigMap.Name = cp.Name
	_, err = c.CoreV1().Pods("kube-system").Create(ctx, pod, metav1.CreateOptions{})
	require.NoError(t, err)
	c.ClearActions()
	code, res, _ := runOn(t, api, "--split", "kube-proxy-b", "--split-nodes", "rhel=8")
	assert.Equal(t, ExitFailed, code, res.Msg)
	assert.Contains(t, res.Msg, "pool kube-proxy-b runs proxy mode iptables and daemonset kube-system/kube-proxy nftables (node(s) n2, by their pods): split into it")
	assert.Contains(t, res.Msg, "--pool kube-proxy-b --pool-set kube-proxy-b:mode=nftables")
	assert.Zero(t, writes(c))
}

// A split into a pool that runs another mode than kubeadm's DaemonSet
// would change the nodes' mode by a label: refused before anything is
// written, with the ways named.
func TestSplitIntoAPoolOfAnotherModeRefused(t *testing.T) {
	c, api, p := poolOfBase(t, func(s string) string { return strings.Replace(s, "mode: iptables", "mode: nftables", 1) })
	// n1 in the pool already, n2 to move
	for _, n := range []*corev1.Node{
		{ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: map[string]string{"rhel": "8", "kube-proxy-sync.io/pool": "kube-proxy-b"}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "n2", Labels: map[string]string{"rhel": "8"}}},
	} {
		_, err := c.CoreV1().Nodes().Create(context.Background(), n, metav1.CreateOptions{})
		require.NoError(t, err)
	}
	_, err := c.CoreV1().Pods("kube-system").Create(context.Background(), poolstest.KubeProxyPod("kube-proxy-b-n1", "n1", p, true), metav1.CreateOptions{})
	require.NoError(t, err)
	c.ClearActions()
	code, res, _ := runOn(t, api, "--split", "kube-proxy-b", "--split-nodes", "rhel=8")
	assert.Equal(t, ExitFailed, code)
	assert.Contains(t, res.Msg, "pool kube-proxy-b runs proxy mode nftables and daemonset kube-system/kube-proxy iptables (node(s) n2, by its template): split into it, the nodes would change mode")
	assert.Contains(t, res.Msg, "(--pool kube-proxy-b --pool-set kube-proxy-b:mode=iptables), split, then move the pool with its checks; or split into a new pool")
	assert.Zero(t, writes(c))

	// with n2 out of the selection no node moves: the same split again
	// (kubespray's every run) is no change, whatever mode the pool runs
	require.NoError(t, c.CoreV1().Nodes().Delete(context.Background(), "n2", metav1.DeleteOptions{}))
	c.ClearActions()
	code, res, _ = runOn(t, api, "--split", "kube-proxy-b", "--split-nodes", "rhel=8")
	assert.Equal(t, ExitOK, code, res.Msg)
	assert.False(t, res.Changed, res.Msg)
	assert.Zero(t, writes(c))
}
