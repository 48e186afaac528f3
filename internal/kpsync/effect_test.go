package kpsync

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	k8stesting "k8s.io/client-go/testing"

	"github.com/kube-proxy-sync/kube-proxy-sync/internal/configmap"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/kpconfig"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/kpvalidate"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/rollout"
)

func set(pairs ...string) Options {
	var s []kpconfig.Setting
	for i := 0; i < len(pairs); i += 2 {
		s = append(s, kpconfig.Setting{Path: pairs[i], Value: pairs[i+1]})
	}
	return Options{Spec: configmap.Spec{Settings: s}}
}

func (f *fixture) configMap(t *testing.T) *corev1.ConfigMap {
	cm, err := f.client.CoreV1().ConfigMaps("kube-system").Get(context.Background(), "kube-proxy", metav1.GetOptions{})
	require.NoError(t, err)
	return cm
}

// A change no running kube-proxy reads is written and not restarted for;
// reruns restart nothing; a later real change restarts once, and the pods
// it starts read both changes.
func TestNoEffectChangeThenRealChange(t *testing.T) {
	f := newFixture(t, onCopy(seedConfigMap(), seedDaemonSet("registry.k8s.io/kube-proxy:v1.33.6"))...)
	seedHash := configmap.Hash(seedConfigMap().Data, nil)

	// ipvs.* while the mode is iptables
	res, err := f.run(t, set("ipvs.scheduler", "lc"))
	require.NoError(t, err)
	assert.Equal(t, []string{"patch daemonsets", "update configmaps", "create events"}, f.writes(),
		"the record on the DaemonSet comes before the ConfigMap write; no restart")
	assert.True(t, res.Changed)
	assert.True(t, res.Facts.ConfigMapChanged)
	assert.False(t, res.Facts.Restarted)
	assert.False(t, res.Facts.RestartRequired)
	assert.Equal(t, ReasonNoEffect, res.Facts.RestartReason)
	assert.Equal(t, map[string]string{"config.conf:ipvs.scheduler": "no-effect"}, res.Facts.ChangedKeysEffect)
	assert.Contains(t, res.Msg, "no restart")
	cm := f.configMap(t)
	assert.Contains(t, cm.Data["config.conf"], "scheduler: lc")
	noEffectHash := configmap.Hash(cm.Data, nil)
	ds := f.daemonSet(t)
	assert.Equal(t, seedHash, ds.Annotations[rollout.HashAnnotation], "the pods still run what they were restarted for")
	assert.Equal(t, noEffectHash+"@"+seedHash, ds.Annotations[rollout.NoEffectAnnotation])
	assert.Empty(t, ds.Spec.Template.Annotations[rollout.RestartedAtAnnotation])
	lines := readAudit(t, f.audit)
	require.Len(t, lines, 2, "a plan and an outcome, no restart intent")
	assert.Equal(t, "outcome", lines[1].Phase)
	assert.Equal(t, map[string]string{"config.conf:ipvs.scheduler": "no-effect"}, lines[1].ChangedKeysEffect)
	assert.False(t, lines[1].Restart)

	// reruns, with the same value or none, write nothing
	for _, o := range []Options{set("ipvs.scheduler", "lc"), {}} {
		res, err = f.run(t, o)
		require.NoError(t, err)
		assert.Empty(t, f.writes())
		assert.False(t, res.Changed)
		assert.False(t, res.Facts.RestartRequired)
	}

	// a real change: one restart, for the data holding both changes, on a
	// new copy; the record follows once the rollout is done
	res, err = f.run(t, set("mode", "ipvs"))
	require.NoError(t, err)
	assert.Equal(t, []string{"create configmaps", "patch daemonsets", "update configmaps", "create events", "create events"}, f.writes())
	assert.True(t, res.Facts.Restarted)
	assert.Equal(t, ReasonConfigChanged, res.Facts.RestartReason)
	assert.Equal(t, map[string]string{"config.conf:mode": "restart"}, res.Facts.ChangedKeysEffect)
	cm = f.configMap(t)
	assert.Contains(t, cm.Data["config.conf"], "scheduler: lc")
	assert.Contains(t, cm.Data["config.conf"], "mode: ipvs")
	ds = f.daemonSet(t)
	assert.Equal(t, configmap.Hash(cm.Data, nil), ds.Annotations[rollout.HashAnnotation])
	assert.NotContains(t, ds.Annotations, rollout.NoEffectAnnotation, "the restart drops the record")

	res, err = f.run(t, set("mode", "ipvs"))
	require.NoError(t, err)
	assert.Empty(t, f.writes())
	assert.False(t, res.Facts.Restarted)

	// now that the mode is ipvs, ipvs.* has an effect
	res, err = f.run(t, set("ipvs.scheduler", "rr"))
	require.NoError(t, err)
	assert.True(t, res.Facts.Restarted)
	assert.Equal(t, map[string]string{"config.conf:ipvs.scheduler": "restart"}, res.Facts.ChangedKeysEffect)
}

// Leaving a mode: the earlier no-effect change is read by the new mode,
// and the mode change restarts.
func TestNoEffectChangeMattersAfterModeChange(t *testing.T) {
	f := newFixture(t, onCopy(seedConfigMap(), seedDaemonSet("registry.k8s.io/kube-proxy:v1.33.6"))...)
	res, err := f.run(t, set("nftables.masqueradeAll", "true"))
	require.NoError(t, err)
	require.False(t, res.Facts.Restarted)
	o := set("mode", "nftables")
	o.Connectivity = noTraffic
	res, err = f.run(t, o)
	require.NoError(t, err)
	assert.True(t, res.Facts.Restarted)
	assert.Equal(t, configmap.Hash(f.configMap(t).Data, nil), f.daemonSet(t).Annotations[rollout.HashAnnotation])
}

func TestNoEffectRestartPolicies(t *testing.T) {
	t.Run("a restart owed before still happens", func(t *testing.T) {
		ds := seedDaemonSet("registry.k8s.io/kube-proxy:v1.33.6")
		ds.Annotations[rollout.HashAnnotation] = "stale"
		f := newFixture(t, onCopy(seedConfigMap(), ds)...)
		res, err := f.run(t, set("ipvs.scheduler", "lc"))
		require.NoError(t, err)
		assert.True(t, res.Facts.Restarted)
		assert.Equal(t, ReasonConfigChanged, res.Facts.RestartReason)
		assert.Equal(t, "no-effect", res.Facts.ChangedKeysEffect["config.conf:ipvs.scheduler"])
	})
	t.Run("a DaemonSet never stamped: what its pods run is unknown", func(t *testing.T) {
		ds := seedDaemonSet("registry.k8s.io/kube-proxy:v1.33.6")
		delete(ds.Annotations, rollout.HashAnnotation)
		f := newFixture(t, onCopy(seedConfigMap(), ds)...)
		res, err := f.run(t, set("ipvs.scheduler", "lc"))
		require.NoError(t, err)
		assert.True(t, res.Facts.Restarted)
	})
	t.Run("always restarts", func(t *testing.T) {
		f := newFixture(t, onCopy(seedConfigMap(), seedDaemonSet("registry.k8s.io/kube-proxy:v1.33.6"))...)
		o := set("ipvs.scheduler", "lc")
		o.Restart = RestartAlways
		res, err := f.run(t, o)
		require.NoError(t, err)
		assert.True(t, res.Facts.Restarted)
		assert.Equal(t, ReasonForced, res.Facts.RestartReason)
		assert.NotContains(t, f.daemonSet(t).Annotations, rollout.NoEffectAnnotation)
	})
	t.Run("never owes nothing for it", func(t *testing.T) {
		f := newFixture(t, onCopy(seedConfigMap(), seedDaemonSet("registry.k8s.io/kube-proxy:v1.33.6"))...)
		o := set("ipvs.scheduler", "lc")
		o.Restart = RestartNever
		res, err := f.run(t, o)
		require.NoError(t, err)
		assert.False(t, res.Facts.RestartRequired)
		assert.Equal(t, ReasonNoEffect, res.Facts.RestartReason)
		res, err = f.run(t, Options{})
		require.NoError(t, err)
		assert.False(t, res.Facts.Restarted, "a later auto run has nothing owed")
		assert.Empty(t, f.writes())
	})
	t.Run("a probe change restarts and the pods read the change", func(t *testing.T) {
		ds := seedDaemonSet("registry.k8s.io/kube-proxy:v1.33.6")
		ds.Spec.Template.Spec.Containers[0].ReadinessProbe.HTTPGet.Path = "/healthz"
		f := newFixture(t, onCopy(seedConfigMap(), ds)...)
		res, err := f.run(t, set("ipvs.scheduler", "lc"))
		require.NoError(t, err)
		assert.True(t, res.Facts.Restarted)
		assert.Equal(t, ReasonProbeChanged, res.Facts.RestartReason)
		got := f.daemonSet(t)
		assert.Equal(t, configmap.Hash(f.configMap(t).Data, nil), got.Annotations[rollout.HashAnnotation])
		assert.NotContains(t, got.Annotations, rollout.NoEffectAnnotation)
	})
}

func TestNoEffectCheckModeAndDiff(t *testing.T) {
	f := newFixture(t, onCopy(seedConfigMap(), seedDaemonSet("registry.k8s.io/kube-proxy:v1.33.6"))...)
	o := set("ipvs.scheduler", "lc", "iptables.masqueradeAll", "true")
	o.Check, o.Diff = true, true
	res, err := f.run(t, o)
	require.NoError(t, err)
	assert.Empty(t, f.writes())
	assert.True(t, res.Facts.RestartRequired, "masqueradeAll is read in iptables mode")
	assert.Equal(t, map[string]string{"config.conf:ipvs.scheduler": "no-effect", "config.conf:iptables.masqueradeAll": "restart"}, res.Facts.ChangedKeysEffect)
	require.NotNil(t, res.Diff)
	assert.Contains(t, res.Diff.AfterHeader, "config.conf:iptables.masqueradeAll: restart, config.conf:ipvs.scheduler: no-effect")

	o = set("ipvs.scheduler", "lc")
	o.Check, o.Diff = true, true
	res, err = f.run(t, o)
	require.NoError(t, err)
	assert.Empty(t, f.writes())
	assert.True(t, res.Changed)
	assert.False(t, res.Facts.RestartRequired)
	assert.Equal(t, ReasonNoEffect, res.Facts.RestartReason)
	assert.Contains(t, res.Diff.AfterHeader, "config.conf:ipvs.scheduler: no-effect")
}

// The judgement is against the running pods' version and OS.
func TestNoEffectTargets(t *testing.T) {
	ipvsMode := func(cm *corev1.ConfigMap) *corev1.ConfigMap {
		cm.Data["config.conf"] = strings.Replace(seedConfig, "mode: iptables", "mode: ipvs", 1)
		return cm
	}
	noMode := seedConfigMap()
	noMode.Data["config.conf"] = strings.Replace(seedConfig, "mode: iptables\n", "", 1)
	cases := []struct {
		name   string
		image  string
		edit   func(*appsv1.DaemonSet)
		cm     *corev1.ConfigMap
		set    Options
		effect string
	}{
		{"iptables.syncPeriod in ipvs mode on 1.30", "registry.k8s.io/kube-proxy:v1.30.2", nil, ipvsMode(seedConfigMap()), set("iptables.syncPeriod", "7s"), "restart"},
		{"iptables.syncPeriod in ipvs mode on 1.31", "registry.k8s.io/kube-proxy:v1.31.2", nil, ipvsMode(seedConfigMap()), set("iptables.syncPeriod", "7s"), "no-effect"},
		{"1.31 template, pods not all of it yet", "registry.k8s.io/kube-proxy:v1.31.2", func(ds *appsv1.DaemonSet) { ds.Status.UpdatedNumberScheduled = 2 },
			ipvsMode(seedConfigMap()), set("iptables.syncPeriod", "7s"), "restart"},
		{"an image tag without a version", "example.com/kube-proxy:latest", nil, ipvsMode(seedConfigMap()), set("iptables.syncPeriod", "7s"), "restart"},
		{"winkernel on a Linux DaemonSet", "registry.k8s.io/kube-proxy:v1.33.6", func(ds *appsv1.DaemonSet) {
			ds.Spec.Template.Spec.NodeSelector = map[string]string{"kubernetes.io/os": "linux"}
		}, seedConfigMap(), set("winkernel.enableDSR", "true"), "no-effect"},
		{"conntrack on a Windows DaemonSet (default mode: kernelspace)", "registry.k8s.io/kube-proxy:v1.33.6", func(ds *appsv1.DaemonSet) {
			ds.Spec.Template.Spec.NodeSelector = map[string]string{"kubernetes.io/os": "windows"}
		}, noMode, set("conntrack.min", "7"), "no-effect"},
		{"winkernel, default mode, no OS selected", "registry.k8s.io/kube-proxy:v1.33.6", nil, noMode, set("winkernel.enableDSR", "true"), "restart"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ds := seedDaemonSet(tc.image)
			ds.Annotations[rollout.HashAnnotation] = configmap.Hash(tc.cm.Data, nil)
			if tc.edit != nil {
				tc.edit(ds)
			}
			f := newFixture(t, onCopy(tc.cm, ds)...)
			o := tc.set
			o.Check = true
			o.ProbePath = "none"
			res, err := f.run(t, o)
			require.NoError(t, err)
			for k, e := range res.Facts.ChangedKeysEffect {
				assert.Equal(t, tc.effect, e, k)
			}
			assert.Len(t, res.Facts.ChangedKeysEffect, 1)
			assert.Equal(t, tc.effect == "restart", res.Facts.RestartRequired)
		})
	}
}

// The DaemonSet moved between the capture and the record, and its pods no
// longer run the data before the change (an earlier restart is owed): no
// record, the run restarts.
func TestNoEffectRecordLostToAnotherWriter(t *testing.T) {
	f := newFixture(t, onCopy(seedConfigMap(), seedDaemonSet("registry.k8s.io/kube-proxy:v1.33.6"))...)
	patches := 0
	f.client.PrependReactor("patch", "daemonsets", func(a k8stesting.Action) (bool, runtime.Object, error) {
		patches++
		if patches > 1 {
			return false, nil, nil
		}
		ds := seedDaemonSet("registry.k8s.io/kube-proxy:v1.33.6")
		ds.Annotations[rollout.HashAnnotation] = "someone-else"
		require.NoError(t, f.client.Tracker().Update(schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "daemonsets"}, ds, "kube-system"))
		return true, nil, apierrors.NewConflict(schema.GroupResource{Group: "apps", Resource: "daemonsets"}, "kube-proxy", nil)
	})
	res, err := f.run(t, set("ipvs.scheduler", "lc"))
	require.NoError(t, err)
	assert.True(t, res.Facts.Restarted)
	assert.NotContains(t, f.daemonSet(t).Annotations, rollout.NoEffectAnnotation)
}

func TestKeyEffects(t *testing.T) {
	ipvsLC := strings.Replace(seedConfig, "  strictARP: false\n", "  strictARP: false\n  scheduler: lc\n", 1)
	linux := []kpvalidate.Target{{Minor: 33, OS: "linux"}}
	cases := []struct {
		name     string
		old, new map[string]string
		keys     []string
		want     map[string]string
		none     bool
	}{
		{"a field no kube-proxy reads", map[string]string{"config.conf": seedConfig}, map[string]string{"config.conf": ipvsLC},
			[]string{"config.conf:ipvs.scheduler"}, map[string]string{"config.conf:ipvs.scheduler": "no-effect"}, true},
		{"a whole config.conf (--manifest): judged over every field", map[string]string{"config.conf": seedConfig}, map[string]string{"config.conf": ipvsLC},
			[]string{"config.conf"}, map[string]string{"config.conf": "no-effect"}, true},
		{"and with a field that is read", map[string]string{"config.conf": seedConfig}, map[string]string{"config.conf": ipvsLC + "clusterCIDR: 10.0.0.0/8\n"},
			[]string{"config.conf"}, map[string]string{"config.conf": "restart"}, false},
		{"another key always restarts", map[string]string{"config.conf": seedConfig, "kubeconfig.conf": "a"}, map[string]string{"config.conf": ipvsLC, "kubeconfig.conf": "b"},
			[]string{"config.conf:ipvs.scheduler", "kubeconfig.conf:clusters[0].cluster.server"},
			map[string]string{"config.conf:ipvs.scheduler": "no-effect", "kubeconfig.conf:clusters[0].cluster.server": "restart"}, false},
		{"a text that does not decode", map[string]string{"config.conf": seedConfig}, map[string]string{"config.conf": "{{{"},
			[]string{"config.conf"}, map[string]string{"config.conf": "restart"}, false},
		{"a config.conf added", map[string]string{}, map[string]string{"config.conf": seedConfig},
			[]string{"config.conf"}, map[string]string{"config.conf": "restart"}, false},
		{"the same value to kube-proxy, written otherwise", map[string]string{"config.conf": seedConfig},
			map[string]string{"config.conf": strings.Replace(seedConfig, "bindAddress: 0.0.0.0", `bindAddress: "0.0.0.0"`, 1)},
			[]string{"config.conf:bindAddress"}, map[string]string{"config.conf:bindAddress": "no-effect"}, true},
		{"a field every kube-proxy reads", map[string]string{"config.conf": seedConfig},
			map[string]string{"config.conf": strings.Replace(seedConfig, "bindAddress: 0.0.0.0", "bindAddress: 127.0.0.1", 1)},
			[]string{"config.conf:bindAddress"}, map[string]string{"config.conf:bindAddress": "restart"}, false},
		{"nothing changed", map[string]string{"config.conf": seedConfig}, map[string]string{"config.conf": seedConfig}, []string{}, map[string]string{}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, none := keyEffects(tc.old, tc.new, tc.keys, linux)
			assert.Equal(t, tc.want, got)
			assert.Equal(t, tc.none, none)
		})
	}
}

// The API requests of a no-effect change while the template mounts a copy:
// the budget is this list; a new request is a deliberate change of it.
func TestNoEffectRequests(t *testing.T) {
	f := newFixture(t, onCopy(seedConfigMap(), seedDaemonSet("registry.k8s.io/kube-proxy:v1.33.6"))...)
	res, err := f.run(t, set("ipvs.scheduler", "lc"))
	require.NoError(t, err)
	require.Equal(t, ReasonNoEffect, res.Facts.RestartReason)
	got := map[string]int{}
	for _, a := range f.client.Actions() {
		got[a.GetVerb()+" "+a.GetResource().Resource]++
	}
	assert.Equal(t, map[string]int{
		"get configmaps":                  5,  // plan and plan under the lease (each the record and the copy the template mounts), the record after its write
		"update configmaps":               1,  // the record: no pod mounts it
		"get daemonsets":                  2,  // plan, plan under the lease
		"patch daemonsets":                1,  // the record of the no-effect change, before the write
		"create selfsubjectaccessreviews": 12, // every verb the run may use (no pod or node verbs: nothing rolls)
		"list daemonsets":                 1,  // no other DaemonSet mounts the record, which is written in place
		"get leases":                      1,
		"create leases":                   1,
		"update leases":                   1, // the release
		"create events":                   1,
	}, got, "no pod listed, the DaemonSet and the record not read again, no history to collect (no copy made)")
}
