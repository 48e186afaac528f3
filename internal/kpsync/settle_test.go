package kpsync

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kube-proxy-sync/kube-proxy-sync/internal/rollout"
)

// secondDaemonSet is another kube-proxy DaemonSet of the namespace (a
// Windows one, a per-pool one) whose template mounts configmap cm.
func secondDaemonSet(name, cm string) *appsv1.DaemonSet {
	ds := seedDaemonSet("registry.k8s.io/kube-proxy:v1.33.6")
	ds.Name, ds.UID = name, types.UID("uid-"+name)
	ds.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"k8s-app": name}}
	ds.Spec.Template.Labels = map[string]string{"k8s-app": name}
	ds.Spec.Template.Spec.Volumes[0].ConfigMap.Name = cm
	return ds
}

// A second DaemonSet mounts kubeadm's record (kubeadm's Windows
// kube-proxy): a change of the first moves it onto a copy, and the record,
// which the other's pods read, is never written under them.
func TestRecordIsNotWrittenUnderAnotherDaemonSet(t *testing.T) {
	f := newFixture(t, seedConfigMap(), seedDaemonSet("registry.k8s.io/kube-proxy:v1.33.6"), secondDaemonSet("kube-proxy-windows", "kube-proxy"))
	res, err := f.run(t, set("mode", "ipvs"))
	require.NoError(t, err)
	assert.True(t, res.Facts.Restarted)
	assert.False(t, res.Facts.RecordChanged)
	assert.Equal(t, seedConfigMap().Data, f.configMap(t).Data, "the other DaemonSet's pods mount it")
	assert.Contains(t, strings.Join(res.Warnings, "\n"), "daemonset kube-proxy-windows")
}

// The history of one DaemonSet's copies keeps the copy another
// DaemonSet's template mounts.
func TestHistoryKeepsWhatAnotherDaemonSetMounts(t *testing.T) {
	f := newFixture(t, seedConfigMap(), seedDaemonSet("registry.k8s.io/kube-proxy:v1.33.6"))
	o := set("clusterCIDR", "10.50.0.0/16")
	o.History = 1
	res, err := f.run(t, o)
	require.NoError(t, err)
	first := res.Facts.ConfigMapName
	_, err = f.client.AppsV1().DaemonSets("kube-system").Create(context.Background(), secondDaemonSet("kube-proxy-pool-b", first), metav1.CreateOptions{})
	require.NoError(t, err)
	for i, cidr := range []string{"10.51.0.0/16", "10.52.0.0/16", "10.53.0.0/16"} {
		f.clock.Step(time.Second)
		o := set("clusterCIDR", cidr)
		o.History = 1
		_, err := f.run(t, o)
		require.NoError(t, err, "change %d", i)
	}
	assert.Contains(t, f.copyNames(t), first, "kube-proxy-pool-b's template mounts it")
	assert.NotEqual(t, first, rollout.ConfigVolumeOf(f.daemonSet(t), "kube-proxy"))
}

// A record another DaemonSet mounts lags for good: later runs with the
// same values change nothing and write nothing (no Lease taken), and the
// history keeps the copy of what the record holds, which tells that lag
// from an edit of the record, whatever --config-history.
func TestRecordAnotherDaemonSetMountsLagsQuietly(t *testing.T) {
	f := newFixture(t, seedConfigMap(), seedDaemonSet("registry.k8s.io/kube-proxy:v1.33.6"), secondDaemonSet("kube-proxy-windows", "kube-proxy"))
	for i, cidr := range []string{"10.50.0.0/16", "10.51.0.0/16", "10.52.0.0/16"} {
		f.clock.Step(time.Second)
		o := set("clusterCIDR", cidr)
		o.History = 1
		_, err := f.run(t, o)
		require.NoError(t, err, "change %d", i)
	}
	f.clock.Step(time.Second)
	res, err := f.run(t, set("clusterCIDR", "10.52.0.0/16"))
	require.NoError(t, err)
	assert.False(t, res.Changed, "%s", res.Msg)
	assert.Empty(t, f.writes())
	for _, a := range f.client.Actions() {
		assert.NotEqual(t, "leases", a.GetResource().Resource, "no Lease: nothing to write")
	}
	assert.Equal(t, seedConfigMap().Data, f.configMap(t).Data)
	assert.Contains(t, strings.Join(res.Warnings, "\n"), "daemonset(s) kube-proxy-windows")
}
