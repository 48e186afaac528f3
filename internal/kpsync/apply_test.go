package kpsync

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"

	"github.com/kube-proxy-sync/kube-proxy-sync/internal/configmap"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/kpconfig"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/rollout"
)

func manifestOf(data map[string]string) *corev1.ConfigMap {
	return &corev1.ConfigMap{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{Name: "kube-proxy", Namespace: "kube-system"},
		Data:       data,
	}
}

// sentData is the ConfigMap data a write sent: the whole object of an
// update, the data of a patch.
func sentData(t *testing.T, a k8stesting.Action) map[string]string {
	t.Helper()
	switch a := a.(type) {
	case k8stesting.UpdateAction:
		return a.GetObject().(*corev1.ConfigMap).Data
	case k8stesting.PatchAction:
		var body struct {
			Data map[string]string `json:"data"`
		}
		require.NoError(t, json.Unmarshal(a.GetPatch(), &body))
		return body.Data
	}
	t.Fatalf("%s %s is not a write", a.GetVerb(), a.GetResource().Resource)
	return nil
}

// A manifest carries the keys it means to change; the keys it leaves out
// stay, whatever an earlier manifest run wrote. With server-side apply the
// API server removes a key our field manager applied before and now omits,
// so a manifest with config.conf followed by one with kubeconfig.conf alone
// deleted config.conf (the fake clientset's field manager removes it too).
// Every write carries the whole data, and the live data keeps config.conf
// (test/e2e TestManifestKeepsTheKeysItLeavesOut: the real API server).
func TestManifestKeepsTheKeysItLeavesOut(t *testing.T) {
	f := newFixture(t, seedConfigMap(), seedDaemonSet("registry.k8s.io/kube-proxy:v1.33.6"))
	ipvs := strings.Replace(seedConfig, "mode: iptables", "mode: ipvs", 1)
	server := strings.Replace(seedKubeconfig, "https://127.0.0.1:6443", "https://10.0.0.1:6443", 1)
	for _, run := range []struct {
		manifest map[string]string
		keys     []string
		want     map[string]string // the data every write sends, and the live data after
	}{
		{map[string]string{"config.conf": ipvs}, []string{"config.conf"}, map[string]string{"config.conf": ipvs, "kubeconfig.conf": seedKubeconfig}},
		{map[string]string{"kubeconfig.conf": server}, []string{"kubeconfig.conf"}, map[string]string{"config.conf": ipvs, "kubeconfig.conf": server}},
	} {
		res, err := f.run(t, Options{Spec: configmap.Spec{Manifest: manifestOf(run.manifest)}})
		require.NoError(t, err)
		assert.Equal(t, run.keys, res.Facts.ChangedKeys)
		var sent []map[string]string
		for _, a := range f.client.Actions() {
			if a.GetResource().Resource == "configmaps" && (a.GetVerb() == "update" || a.GetVerb() == "patch") {
				sent = append(sent, sentData(t, a))
			}
		}
		require.Len(t, sent, 1, "one write")
		assert.Equal(t, run.want, sent[0], "the write carries every key, the ones the manifest leaves out too")
		cm, err := f.client.CoreV1().ConfigMaps("kube-system").Get(context.Background(), "kube-proxy", metav1.GetOptions{})
		require.NoError(t, err)
		assert.Equal(t, run.want, cm.Data)
	}
}

// Should a key ever go missing (or change) between what the run wrote and
// what it reads back, the run says which key, in changed_keys, the diff
// and the audit log, and restarts nothing onto data it did not validate:
// the restart stays owed, and the next run validates the data as it is.
func TestDataChangedUnderTheRunIsShownAndNotRestarted(t *testing.T) {
	f := newFixture(t, seedConfigMap(), seedDaemonSet("registry.k8s.io/kube-proxy:v1.33.6"))
	f.client.PrependReactor("create", "configmaps", func(a k8stesting.Action) (bool, runtime.Object, error) {
		delete(a.(k8stesting.CreateAction).GetObject().(*corev1.ConfigMap).Data, "config.conf") // as the API server's apply did
		return false, nil, nil
	})
	server := strings.Replace(seedKubeconfig, "https://127.0.0.1:6443", "https://10.0.0.1:6443", 1)
	res, err := f.run(t, Options{Diff: true, Spec: configmap.Spec{Manifest: manifestOf(map[string]string{"kubeconfig.conf": server})}})
	require.Error(t, err)
	assert.Regexp(t, `configmap kube-system/kube-proxy-[0-9a-f]{10} is not what this run wrote: key config.conf removed`, err.Error())
	assert.Contains(t, err.Error(), "nothing restarted")
	assert.Equal(t, []string{"config.conf", "kubeconfig.conf"}, res.Facts.ChangedKeys)
	assert.True(t, res.Facts.ConfigMapChanged)
	assert.False(t, res.Facts.Restarted)
	require.NotNil(t, res.Diff)
	assert.Regexp(t, `(?m)^config\.conf:`, res.Diff.Before)
	assert.NotRegexp(t, `(?m)^config\.conf:`, res.Diff.After, "the diff shows the deletion")

	ds := f.daemonSet(t)
	assert.Empty(t, ds.Spec.Template.Annotations[rollout.RestartedAtAnnotation], "no restart")
	assert.Equal(t, configmap.Hash(seedConfigMap().Data, nil), ds.Annotations[rollout.HashAnnotation], "the restart stays owed")
	records := readAudit(t, f.audit)
	require.NotEmpty(t, records)
	last := records[len(records)-1]
	assert.Equal(t, "outcome", last.Phase)
	assert.Equal(t, []string{"config.conf", "kubeconfig.conf"}, last.ChangedKeys)
}

// The same for a run with nothing to write: data another writer changed
// between its two captures was never validated, and the run holds no
// Lease; it used to restart onto it.
func TestDataChangedBetweenTheCapturesIsNotRestarted(t *testing.T) {
	ds := seedDaemonSet("registry.k8s.io/kube-proxy:v1.33.6")
	f := newFixture(t, seedConfigMap(), ds)
	gets := 0
	f.client.PrependReactor("get", "configmaps", func(k8stesting.Action) (bool, runtime.Object, error) {
		if gets++; gets == 2 {
			cm := seedConfigMap()
			cm.Data["config.conf"] = "not a config\n"
			require.NoError(t, f.client.Tracker().Update(corev1.SchemeGroupVersion.WithResource("configmaps"), cm, "kube-system"))
		}
		return false, nil, nil
	})
	res, err := f.run(t, Options{})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "configmap kube-system/kube-proxy is not what this run found: key config.conf changed")
	assert.Equal(t, []string{"config.conf"}, res.Facts.ChangedKeys)
	assert.False(t, res.Facts.Restarted)
	assert.Equal(t, ds.Spec.Template, f.daemonSet(t).Spec.Template, "no restart")
	assert.Equal(t, ds.Annotations, f.daemonSet(t).Annotations)
}

// Another writer of the record during the run: nothing it wrote reaches a
// pod. The pods are restarted onto the copy of the data the run validated,
// and the record is then written to what they run (it used to write its
// change on top of the other writer's unvalidated data).
func TestAnotherWriterOfTheRecordDoesNotReachThePods(t *testing.T) {
	f := newFixture(t, seedConfigMap(), seedDaemonSet("registry.k8s.io/kube-proxy:v1.33.6"))
	theirs := strings.Replace(seedConfig, "mode: iptables", "mode: iptables\nclusterCIDR: not-a-cidr", 1)
	f.client.PrependReactor("create", "configmaps", func(a k8stesting.Action) (bool, runtime.Object, error) {
		// the other writer lands while the run makes its copy
		cm := seedConfigMap()
		cm.Data["config.conf"] = theirs
		cm.ResourceVersion = "101"
		require.NoError(t, f.client.Tracker().Update(corev1.SchemeGroupVersion.WithResource("configmaps"), cm, "kube-system"))
		return false, nil, nil
	})
	res, err := f.run(t, Options{Spec: configmap.Spec{Settings: []kpconfig.Setting{{Path: "mode", Value: "ipvs"}}}})
	require.NoError(t, err)
	assert.True(t, res.Facts.Restarted)
	mounted := rollout.ConfigVolumeOf(f.daemonSet(t), "kube-proxy")
	require.Equal(t, res.Facts.ConfigMapName, mounted)
	cp, err := f.client.CoreV1().ConfigMaps("kube-system").Get(context.Background(), mounted, metav1.GetOptions{})
	require.NoError(t, err)
	assert.Contains(t, cp.Data["config.conf"], "mode: ipvs")
	assert.NotContains(t, cp.Data["config.conf"], "not-a-cidr", "the pods run only validated data")
	assert.Equal(t, cp.Data, f.configMap(t).Data, "the record holds what the pods run")
}

// A change with no effect on this DaemonSet's pods is written to the
// record in place only while no other DaemonSet mounts it: their pods
// read it, and its effect on them is not judged.
func TestNoEffectChangeIsDeferredWhileAnotherDaemonSetMountsTheRecord(t *testing.T) {
	objs := append(onCopy(seedConfigMap(), seedDaemonSet("registry.k8s.io/kube-proxy:v1.33.6")), secondDaemonSet("kube-proxy-windows", "kube-proxy"))
	f := newFixture(t, objs...)
	res, err := f.run(t, set("ipvs.scheduler", "lc"))
	require.NoError(t, err)
	assert.Equal(t, seedConfigMap().Data, f.configMap(t).Data, "not written under the other DaemonSet's pods")
	assert.Equal(t, []string{"config.conf:ipvs.scheduler"}, res.Facts.DeferredKeys)
	assert.Empty(t, res.Facts.ChangedKeys)
	assert.False(t, res.Facts.ConfigMapChanged)
	assert.Contains(t, strings.Join(res.Warnings, "\n"), "daemonset kube-proxy-windows")
}

// A change with no effect is not written to the record while a pod of an
// older template of the DaemonSet still mounts it (a rollout off kubeadm's
// layout that did not finish): that pod would run it at its next restart.
func TestNoEffectChangeIsDeferredWhileAnOlderPodMountsTheRecord(t *testing.T) {
	objs := onCopy(seedConfigMap(), seedDaemonSet("registry.k8s.io/kube-proxy:v1.33.6"))
	ds := objs[2].(*appsv1.DaemonSet)
	ds.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"k8s-app": "kube-proxy"}}
	ds.Status = appsv1.DaemonSetStatus{ObservedGeneration: 1, DesiredNumberScheduled: 2, UpdatedNumberScheduled: 1, NumberAvailable: 2}
	old := kubeProxyPod("node-old", "1", true)
	old.Spec.Volumes = []corev1.Volume{{Name: "kube-proxy", VolumeSource: corev1.VolumeSource{
		ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "kube-proxy"}}}}}
	f := newFixture(t, append(objs, old)...)
	res, err := f.run(t, set("ipvs.scheduler", "lc"))
	require.NoError(t, err)
	assert.Equal(t, seedConfigMap().Data, f.configMap(t).Data, "not written under the older pod")
	assert.Equal(t, []string{"config.conf:ipvs.scheduler"}, res.Facts.DeferredKeys)
	assert.Contains(t, strings.Join(res.Warnings, "\n"), "pod node-old/")
}
