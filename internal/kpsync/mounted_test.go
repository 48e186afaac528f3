package kpsync

import (
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"

	"github.com/kube-proxy-sync/kube-proxy-sync/internal/configmap"
)

// onOwnedCopy is the cluster as a run leaves it after a change: the
// record and the template mounting the copy of its data, owned by the
// DaemonSet; record and cp, when set, change the record and the copy
// first (cp returns false: the copy is gone).
func onOwnedCopy(record func(*corev1.ConfigMap), cp func(*corev1.ConfigMap) bool) (objs []runtime.Object, name string) {
	rec, ds := seedConfigMap(), seedDaemonSet("registry.k8s.io/kube-proxy:v1.33.6")
	c := configmap.NewCopy(rec, maps.Clone(rec.Data), ds, 1)
	ds.Spec.Template.Spec.Volumes[0].ConfigMap.Name = c.Name
	if record != nil {
		record(rec)
	}
	objs = []runtime.Object{rec, ds}
	if cp == nil || cp(c) {
		objs = append(objs, c)
	}
	return objs, c.Name
}

// A plain rerun with the copy the template mounts gone makes it again,
// as the run makes copies, from the record that holds its data: changed,
// with a warning, and nothing restarted; check mode says it and writes
// nothing. The run after it finds nothing to do.
func TestMountedCopyGoneIsMadeAgainByAPlainRerun(t *testing.T) {
	objs, name := onOwnedCopy(nil, func(*corev1.ConfigMap) bool { return false })
	f := newFixture(t, objs...)

	res, err := f.run(t, Options{Check: true})
	require.NoError(t, err)
	assert.True(t, res.Changed, "check mode: a real run writes")
	assert.Contains(t, strings.Join(res.Warnings, "\n"), "configmap kube-system/"+name+", which daemonset kube-system/kube-proxy mounts, is gone")
	assert.Contains(t, strings.Join(res.Warnings, "\n"), "a real run makes it again")
	assert.Empty(t, f.writes(), "check mode")
	assert.NotContains(t, f.copyNames(t), name)

	res, err = f.run(t, Options{})
	require.NoError(t, err, "%s", res.Msg)
	assert.True(t, res.Changed, "a copy made again is a write")
	assert.False(t, res.Facts.Restarted)
	assert.Contains(t, strings.Join(res.Warnings, "\n"), "was gone")
	assert.Equal(t, []string{"create configmaps"}, f.writes(), "the copy, and nothing else")
	// made under the Lease, as every write of a run
	lease, made := -1, -1
	for i, a := range f.client.Actions() {
		switch r := a.GetResource().Resource; {
		case r == "leases" && a.GetVerb() == "create" && lease < 0:
			lease = i
		case r == "configmaps" && a.GetVerb() == "create":
			made = i
		}
	}
	require.GreaterOrEqual(t, lease, 0, "the run took the Lease")
	assert.Less(t, lease, made, "the copy is made after the Lease is taken")
	cp := f.getConfigMap(t, name)
	assert.Equal(t, seedConfigMap().Data, cp.Data)
	assert.Equal(t, ptr.To(true), cp.Immutable)
	assert.Equal(t, map[string]string{configmap.CopyOfLabel: "kube-proxy", configmap.ManagedByLabel: "kube-proxy-sync"}, cp.Labels)
	require.Len(t, cp.OwnerReferences, 1)
	assert.Equal(t, dsUID, cp.OwnerReferences[0].UID)

	f.clock.Step(time.Second)
	res, err = f.run(t, Options{})
	require.NoError(t, err)
	assert.False(t, res.Changed)
	assert.Empty(t, res.Warnings)
	assert.Empty(t, f.writes())
}

// A copy owned by a DaemonSet of that name that is gone (replaced: the
// garbage collector deletes the copy) is made anew, owned by the one
// there; without its data anywhere the run fails.
func TestMountedCopyOfAGoneOwnerIsMadeAnew(t *testing.T) {
	replaced := func(cp *corev1.ConfigMap) bool {
		cp.OwnerReferences[0].UID = "an-earlier-daemonset"
		cp.UID = "old-copy"
		return true
	}
	objs, name := onOwnedCopy(nil, replaced)
	f := newFixture(t, objs...)
	res, err := f.run(t, Options{Check: true})
	require.NoError(t, err)
	assert.True(t, res.Changed)
	assert.Contains(t, strings.Join(res.Warnings, "\n"), "uid an-earlier-daemonset), which is gone")
	assert.Empty(t, f.writes())

	res, err = f.run(t, Options{})
	require.NoError(t, err, "%s", res.Msg)
	assert.True(t, res.Changed)
	assert.Equal(t, []string{"delete configmaps", "create configmaps"}, f.writes())
	cp := f.getConfigMap(t, name)
	require.Len(t, cp.OwnerReferences, 1)
	assert.Equal(t, dsUID, cp.OwnerReferences[0].UID, "owned by the DaemonSet there")
	assert.Equal(t, seedConfigMap().Data, cp.Data)

	objs, name = onOwnedCopy(editRecord, replaced)
	f = newFixture(t, objs...)
	_, err = f.run(t, Options{})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "configmap kube-system/"+name+", which daemonset kube-system/kube-proxy mounts, is owned by daemonset kube-proxy (uid an-earlier-daemonset), which is gone")
	assert.Contains(t, err.Error(), "remove its owner at once")
	assert.Empty(t, f.writes())
}

// editRecord is another hand's edit of the record: the data of the copy
// the template mounts is then nowhere but in that copy.
func editRecord(cm *corev1.ConfigMap) {
	cm.Data["config.conf"] = seedConfig + "clusterCIDR: 10.9.0.0/16\n"
}

// A copy the template mounts that no starting kube-proxy can mount (or
// whose data nobody validated), and that the run cannot recreate, fails
// every run, check mode included, before any write, naming the DaemonSet,
// the copy and what to do.
func TestMountedCopyThatCannotBeHealedFailsEveryRun(t *testing.T) {
	cases := []struct {
		name   string
		record func(*corev1.ConfigMap)
		cp     func(*corev1.ConfigMap) bool
		want   []string
	}{
		{"gone, and its data nowhere", editRecord, func(*corev1.ConfigMap) bool { return false },
			[]string{"which is gone (", "and no ConfigMap this run reads holds the data its name says", "kubectl rollout undo daemonset/kube-proxy -n kube-system"}},
		{"being deleted", nil, func(cp *corev1.ConfigMap) bool {
			cp.DeletionTimestamp = ptr.To(metav1.NewTime(time.Unix(1700000000, 0)))
			cp.Finalizers = []string{"example.com/hold"}
			return true
		}, []string{"which is being deleted", "let the deletion finish", "the run makes it anew from configmap kube-system/kube-proxy"}},
		{"being deleted, its data nowhere", editRecord, func(cp *corev1.ConfigMap) bool {
			cp.DeletionTimestamp = ptr.To(metav1.NewTime(time.Unix(1700000000, 0)))
			cp.Finalizers = []string{"example.com/hold"}
			return true
		}, []string{"which is being deleted", "kubectl rollout undo daemonset/kube-proxy -n kube-system"}},
		{"other data than its name says", nil, func(cp *corev1.ConfigMap) bool {
			cp.Data = map[string]string{"config.conf": "someone else's"}
			return true
		}, []string{"which holds other data than its name says", "delete it, then"}},
		{"mutable", nil, func(cp *corev1.ConfigMap) bool {
			cp.Immutable = nil
			return true
		}, []string{"which is not immutable", `-p '{"immutable":true}'`}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			objs, name := onOwnedCopy(tc.record, tc.cp)
			f := newFixture(t, objs...)
			for _, o := range []Options{{Check: true}, {}, set("mode", "ipvs"), {Restart: RestartAlways}} {
				res, err := f.run(t, o)
				require.Error(t, err, "%+v", o)
				assert.Contains(t, err.Error(), "daemonset kube-system/kube-proxy mounts configmap kube-system/"+name)
				for _, w := range tc.want {
					assert.Contains(t, err.Error(), w)
				}
				assert.Contains(t, err.Error(), "nothing was changed")
				assert.False(t, res.Changed)
				assert.Empty(t, f.writes(), "%+v: refused before any write", o)
			}
		})
	}
}
