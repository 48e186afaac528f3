package kpsync

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	goruntime "runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/watch"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	"github.com/kube-proxy-sync/kube-proxy-sync/internal/configmap"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/nodes"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/rollout"
)

func (f *fixture) getConfigMap(t *testing.T, name string) *corev1.ConfigMap {
	t.Helper()
	cm, err := f.client.CoreV1().ConfigMaps("kube-system").Get(context.Background(), name, metav1.GetOptions{})
	require.NoError(t, err)
	return cm
}

func (f *fixture) copyNames(t *testing.T) []string {
	t.Helper()
	list, err := f.client.CoreV1().ConfigMaps("kube-system").List(context.Background(), metav1.ListOptions{})
	require.NoError(t, err)
	var out []string
	for _, cm := range list.Items {
		if configmap.IsCopyName("kube-proxy", cm.Name) {
			out = append(out, cm.Name)
		}
	}
	return out
}

// kubeadm's layout: a change goes into an immutable copy that no pod
// mounts, and the restart PATCH points the template at it. When the
// template moves, the ConfigMap the pods mount still holds the old data:
// a kube-proxy restarted for any other reason keeps its config. The record
// follows once no pod mounts it.
func TestChangeWritesNoConfigMapAPodMounts(t *testing.T) {
	f := newFixture(t, seedConfigMap(), seedDaemonSet("registry.k8s.io/kube-proxy:v1.33.6"))
	var recordAtPatch map[string]string
	f.client.PrependReactor("patch", "daemonsets", func(k8stesting.Action) (bool, runtime.Object, error) {
		cm, err := f.client.Tracker().Get(corev1.SchemeGroupVersion.WithResource("configmaps"), "kube-system", "kube-proxy")
		require.NoError(t, err)
		recordAtPatch = cm.(*corev1.ConfigMap).Data
		return false, nil, nil
	})
	res, err := f.run(t, set("mode", "ipvs"))
	require.NoError(t, err)
	assert.Equal(t, seedConfigMap().Data, recordAtPatch, "the ConfigMap the pods mount is untouched until the template moved off it")

	ds := f.daemonSet(t)
	name := rollout.ConfigVolumeOf(ds, "kube-proxy")
	assert.Regexp(t, `^kube-proxy-[0-9a-f]{10}$`, name)
	assert.Equal(t, name, res.Facts.ConfigMapName)
	assert.Equal(t, "kube-proxy", res.Facts.PreviousConfigMap, "what a rollback or `kubectl rollout undo` restores")
	cp := f.getConfigMap(t, name)
	require.NotNil(t, cp.Immutable)
	assert.True(t, *cp.Immutable)
	assert.Contains(t, cp.Data["config.conf"], "mode: ipvs")
	assert.Equal(t, configmap.Hash(cp.Data, nil), ds.Annotations[rollout.HashAnnotation])
	require.Len(t, cp.OwnerReferences, 1)
	assert.Equal(t, dsUID, cp.OwnerReferences[0].UID, "deleting the DaemonSet deletes its history")
	assert.Equal(t, cp.Data, f.configMap(t).Data, "the record holds what the pods run")
	assert.True(t, res.Facts.RecordChanged)

	// a rerun: four reads, nothing written
	f.client.ClearActions()
	res, err = f.run(t, set("mode", "ipvs"))
	require.NoError(t, err)
	assert.False(t, res.Changed)
	assert.Empty(t, f.writes())
	assert.Len(t, f.client.Actions(), 4, "a no-change run reads the record, the DaemonSet, the copy the template mounts and the record again")
	assert.Equal(t, name, res.Facts.ConfigMapName)
}

// A pod still mounting the record (its node going away, a canary stopped
// half-way) keeps the record as it is; the run after it is gone writes it.
func TestRecordWaitsForThePodsThatMountIt(t *testing.T) {
	newer := seedConfigMap()
	newer.Data["config.conf"] = strings.Replace(seedConfig, "mode: iptables", "mode: ipvs", 1)
	objs := onCopy(newer, seedDaemonSet("registry.k8s.io/kube-proxy:v1.33.6"))
	objs[0] = seedConfigMap() // the record lags behind the copy the template mounts
	// the config the fleet ran before, which the restart onto the copy kept
	objs = append(objs, configmap.NewCopy(seedConfigMap(), seedConfigMap().Data, nil, 1))
	stale := kubeProxyPod("node-leaving", "1", false)
	stale.Spec.Volumes = []corev1.Volume{{Name: "kube-proxy", VolumeSource: corev1.VolumeSource{
		ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "kube-proxy"}}}}}
	f := newFixture(t, append(objs, stale)...)
	dsObj := f.daemonSet(t)
	dsObj.Annotations[rollout.HashAnnotation] = configmap.Hash(newer.Data, nil)
	dsObj.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"k8s-app": "kube-proxy"}}
	_, err := f.client.AppsV1().DaemonSets("kube-system").Update(context.Background(), dsObj, metav1.UpdateOptions{})
	require.NoError(t, err)
	f.client.ClearActions()

	res, err := f.run(t, Options{})
	require.NoError(t, err)
	assert.Equal(t, seedConfigMap().Data, f.configMap(t).Data, "a pod mounts it: not written")
	assert.False(t, res.Facts.RecordChanged)
	assert.Contains(t, strings.Join(res.Warnings, "\n"), "node-leaving/kube-proxy-node-leaving-1 still mount it")
	assert.False(t, res.Facts.Restarted)

	require.NoError(t, f.client.CoreV1().Pods("kube-system").Delete(context.Background(), stale.Name, metav1.DeleteOptions{}))
	res, err = f.run(t, Options{})
	require.NoError(t, err)
	assert.Equal(t, newer.Data, f.configMap(t).Data, "no pod mounts it any more: it holds what the fleet runs")
	assert.True(t, res.Facts.RecordChanged)
	assert.True(t, res.Changed)
	assert.False(t, res.Facts.Restarted)
}

// kubeadm's layout and one node going away, whose old pod mounts the
// record; the rest of the fleet runs no pod (its rollout is done at once).
func leavingNodeMountsTheRecord(terminating bool) []runtime.Object {
	ds := seedDaemonSet("registry.k8s.io/kube-proxy:v1.33.6")
	ds.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"k8s-app": "kube-proxy"}}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-leaving"}, Spec: corev1.NodeSpec{Taints: []corev1.Taint{{Key: nodes.ToBeDeletedTaint, Effect: corev1.TaintEffectNoSchedule}}}}
	stale := kubeProxyPod("node-leaving", "1", true)
	stale.Spec.Volumes = []corev1.Volume{{Name: "kube-proxy", VolumeSource: corev1.VolumeSource{
		ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "kube-proxy"}}}}}
	if terminating {
		stale.DeletionTimestamp = &metav1.Time{Time: time.Date(2026, 11, 22, 11, 59, 0, 0, time.UTC)}
		stale.Finalizers = []string{"example.com/hold"}
	}
	return []runtime.Object{seedConfigMap(), ds, node, stale}
}

// After its rollout the run knows which pods mount the record from the
// pods it followed: a pod on a node going away still does, so the record
// is not written, and nothing is read again to find that out.
func TestRecordUseIsKnownFromTheRollout(t *testing.T) {
	f := newFixture(t, leavingNodeMountsTheRecord(false)...)
	res, err := f.run(t, set("mode", "ipvs"))
	require.NoError(t, err)
	require.True(t, res.Facts.Restarted)
	counts := map[string]int{}
	for _, a := range f.client.Actions() {
		counts[a.GetVerb()+" "+a.GetResource().Resource]++
	}
	assert.Equal(t, 1, counts["list pods"], "listed once, before the restart")
	assert.Equal(t, 2, counts["get daemonsets"], "the plan, and the plan under the lease")
	assert.Equal(t, 3, counts["get configmaps"], "the plan, the plan under the lease, the copy after its create")
	assert.Equal(t, seedConfigMap().Data, f.configMap(t).Data, "a pod mounts it: not written")
	assert.False(t, res.Facts.RecordChanged)
	assert.Contains(t, strings.Join(res.Warnings, "\n"), "node-leaving/kube-proxy-node-leaving-1 still mount it")
}

// A pod the rollout last saw terminating may be gone since: the pods are
// listed again before the record is written or left.
func TestRecordUseOfATerminatingPodIsLookedAtAgain(t *testing.T) {
	f := newFixture(t, leavingNodeMountsTheRecord(true)...)
	f.step = func(_ context.Context, step string) {
		if step == StepDaemonSetPatched {
			// its finalizer is removed, and it is gone, while the rollout runs
			assert.NoError(t, f.client.Tracker().Delete(corev1.SchemeGroupVersion.WithResource("pods"), "kube-system", "kube-proxy-node-leaving-1"))
		}
	}
	res, err := f.run(t, set("mode", "ipvs"))
	require.NoError(t, err)
	require.True(t, res.Facts.Restarted)
	assert.Equal(t, 2, f.count("list", "pods"), "before the restart, and before the record write")
	mounted := rollout.ConfigVolumeOf(f.daemonSet(t), "kube-proxy")
	assert.Equal(t, f.getConfigMap(t, mounted).Data, f.configMap(t).Data, "no pod mounts the record any more: it holds what the fleet runs")
	assert.True(t, res.Facts.RecordChanged)
}

// The record written by someone else during the rollout (kubeadm,
// kubectl): its write is not lost. The record write conflicts, and the
// record and the pods are read again before it is written.
func TestRecordWrittenDuringTheRolloutIsReadAgain(t *testing.T) {
	f := newFixture(t, seedConfigMap(), seedDaemonSet("registry.k8s.io/kube-proxy:v1.33.6"))
	// an update on another resourceVersion conflicts, as on the API server
	f.client.PrependReactor("update", "configmaps", func(a k8stesting.Action) (bool, runtime.Object, error) {
		cm := a.(k8stesting.UpdateAction).GetObject().(*corev1.ConfigMap)
		stored, err := f.client.Tracker().Get(a.GetResource(), a.GetNamespace(), cm.Name)
		if err == nil && stored.(*corev1.ConfigMap).ResourceVersion != cm.ResourceVersion {
			return true, nil, apierrors.NewConflict(a.GetResource().GroupResource(), cm.Name, errors.New("the object has been modified"))
		}
		return false, nil, nil
	})
	f.step = func(_ context.Context, step string) {
		if step != StepDaemonSetPatched {
			return
		}
		cm := seedConfigMap()
		cm.Labels = map[string]string{"written-by": "someone-else"}
		cm.ResourceVersion = "150"
		assert.NoError(t, f.client.Tracker().Update(corev1.SchemeGroupVersion.WithResource("configmaps"), cm, "kube-system"))
	}
	res, err := f.run(t, set("mode", "ipvs"))
	require.NoError(t, err)
	require.True(t, res.Facts.Restarted)
	record := f.configMap(t)
	assert.Equal(t, "someone-else", record.Labels["written-by"], "the other write is kept")
	mounted := rollout.ConfigVolumeOf(f.daemonSet(t), "kube-proxy")
	assert.Equal(t, f.getConfigMap(t, mounted).Data, record.Data, "the record holds what the fleet runs")
	assert.True(t, res.Facts.RecordChanged)
}

// The copies beyond the history are deleted, newest kept, and never the
// one in use or the one before it (what an undo restores).
func TestHistoryKeepsTheNewestCopies(t *testing.T) {
	f := newFixture(t, seedConfigMap(), seedDaemonSet("registry.k8s.io/kube-proxy:v1.33.6"))
	names := f.changeCIDR(t, 6, 3, time.Second, nil)
	assert.ElementsMatch(t, names[3:], f.copyNames(t), "the newest three")
	assert.Equal(t, names[5], rollout.ConfigVolumeOf(f.daemonSet(t), "kube-proxy"))
}

// The history does not hang on when the copies were created: on the API
// server a creationTimestamp has a resolution of a second, and runs of an
// Ansible loop (and a change's two copies on kubeadm's layout, the new
// config and the one the fleet ran) come within one. Here every copy is
// made at the same instant: the newest three are still the ones kept,
// and the copy of kubeadm's data, the oldest, goes.
func TestHistoryDoesNotHangOnCreationTimes(t *testing.T) {
	f := newFixture(t, seedConfigMap(), seedDaemonSet("registry.k8s.io/kube-proxy:v1.33.6"))
	names := f.changeCIDR(t, 5, 3, 0, nil)
	assert.ElementsMatch(t, names[2:], f.copyNames(t), "the newest three")
	assert.Equal(t, names[3], f.daemonSet(t).Annotations[rollout.PreviousConfigAnnotation])
}

// A no-effect change while the template mounts the record itself (kubeadm's
// layout) writes nothing: no ConfigMap a pod mounts is written, and no
// restart is made for it. It is reported, and the next run that restarts
// carries it.
func TestNoEffectChangeOnKubeadmsLayoutIsDeferred(t *testing.T) {
	f := newFixture(t, seedConfigMap(), seedDaemonSet("registry.k8s.io/kube-proxy:v1.33.6"))
	res, err := f.run(t, set("ipvs.scheduler", "lc"))
	require.NoError(t, err)
	assert.Empty(t, f.writes())
	assert.False(t, res.Changed)
	assert.Equal(t, []string{"config.conf:ipvs.scheduler"}, res.Facts.DeferredKeys)
	assert.Contains(t, strings.Join(res.Warnings, "\n"), "the next run that restarts kube-proxy carries it")

	res, err = f.run(t, set("ipvs.scheduler", "lc", "mode", "ipvs"))
	require.NoError(t, err)
	assert.True(t, res.Facts.Restarted)
	cp := f.getConfigMap(t, res.Facts.ConfigMapName)
	assert.Contains(t, cp.Data["config.conf"], "scheduler: lc")
	assert.Contains(t, cp.Data["config.conf"], "mode: ipvs")
}

// --undo restores the config the fleet ran before the last change, through
// the same rollout as a change, and a second undo goes forward again. In
// check mode it shows what it would restore and writes nothing. With no
// earlier config recorded it refuses, having written nothing.
func TestUndoRestoresThePreviousConfig(t *testing.T) {
	f := newFixture(t, seedConfigMap(), seedDaemonSet("registry.k8s.io/kube-proxy:v1.33.6"))
	f.recordRevision(t, "kube-proxy-1", dsUID, 1) // the template kubeadm made, which ran the config an undo restores
	_, err := f.run(t, Options{Undo: true})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "names no earlier config")
	assert.Empty(t, f.writes())

	f.clock.Step(time.Second)
	res, err := f.run(t, set("mode", "ipvs"))
	require.NoError(t, err)
	changed := res.Facts.ConfigMapName
	seedCopy := configmap.CopyName("kube-proxy", configmap.Hash(seedConfigMap().Data, nil))
	assert.Equal(t, seedCopy, f.daemonSet(t).Annotations[rollout.PreviousConfigAnnotation], "kubeadm's layout: the old data gets a copy, for an undo")

	f.clock.Step(time.Second)
	res, err = f.run(t, Options{Undo: true, Check: true, Diff: true})
	require.NoError(t, err)
	assert.Empty(t, f.writes(), "check mode")
	assert.True(t, res.Changed)
	require.NotNil(t, res.Diff)
	assert.Contains(t, res.Diff.Before, "mode: ipvs")
	assert.Contains(t, res.Diff.After, "mode: iptables")

	res, err = f.run(t, Options{Undo: true})
	require.NoError(t, err)
	assert.True(t, res.Facts.Restarted)
	assert.Equal(t, ReasonConfigChanged, res.Facts.RestartReason)
	assert.Equal(t, seedCopy, rollout.ConfigVolumeOf(f.daemonSet(t), "kube-proxy"))
	assert.Equal(t, seedConfigMap().Data, f.configMap(t).Data, "the record follows")
	assert.Equal(t, changed, f.daemonSet(t).Annotations[rollout.PreviousConfigAnnotation])
	assert.Equal(t, changed, res.Facts.UndoConfigMap, "the result names what the next undo restores")
	lines := readAudit(t, f.audit)
	require.NotEmpty(t, lines)
	assert.Equal(t, []string{"config.conf"}, lines[len(lines)-1].ChangedKeys, "the undo is in the audit log")

	res, err = f.run(t, Options{Undo: true})
	require.NoError(t, err)
	assert.Equal(t, changed, rollout.ConfigVolumeOf(f.daemonSet(t), "kube-proxy"), "a second undo goes forward again")
	assert.Contains(t, f.configMap(t).Data["config.conf"], "mode: ipvs")
}

// `kubectl rollout undo` points the template back at the previous copy and
// leaves the DaemonSet's stamp as it was. The next run takes the copy the
// template mounts as what the fleet runs: no restart (the controller rolls
// it), the stamp moved to it, and the record written to it.
func TestRunAfterKubectlRolloutUndo(t *testing.T) {
	f := newFixture(t, seedConfigMap(), seedDaemonSet("registry.k8s.io/kube-proxy:v1.33.6"))
	res, err := f.run(t, set("mode", "ipvs"))
	require.NoError(t, err)
	first := res.Facts.ConfigMapName
	firstData := f.configMap(t).Data
	f.clock.Step(time.Second)
	_, err = f.run(t, set("mode", "iptables", "clusterCIDR", "10.1.0.0/16"))
	require.NoError(t, err)

	// what kubectl rollout undo does: the template of the previous revision
	ds := f.daemonSet(t)
	ds.Spec.Template.Spec.Volumes[0].ConfigMap.Name = first
	_, err = f.client.AppsV1().DaemonSets("kube-system").Update(context.Background(), ds, metav1.UpdateOptions{})
	require.NoError(t, err)

	f.client.ClearActions()
	res, err = f.run(t, Options{})
	require.NoError(t, err)
	assert.False(t, res.Facts.Restarted, "the template runs the copy already: %s", res.Msg)
	assert.True(t, res.Facts.Adopted)
	assert.Equal(t, configmap.Hash(firstData, nil), f.daemonSet(t).Annotations[rollout.HashAnnotation], "the stamp says what the template runs")
	assert.Equal(t, firstData, f.configMap(t).Data, "the record follows the template")
	assert.Equal(t, first, res.Facts.ConfigMapName)

	res, err = f.run(t, Options{})
	require.NoError(t, err)
	assert.False(t, res.Changed, "%s", res.Msg)
}

// After `kubectl rollout undo` the stamp still names the config undone; a
// rerun with the values before the undo restarts onto them (the stamp is a
// hint that disagrees with what the template mounts), instead of judging
// them already running and writing the record back to the undone data.
func TestRerunAfterKubectlRolloutUndoAppliesTheValuesAgain(t *testing.T) {
	f := newFixture(t, seedConfigMap(), seedDaemonSet("registry.k8s.io/kube-proxy:v1.33.6"))
	res, err := f.run(t, set("mode", "ipvs"))
	require.NoError(t, err)
	first := res.Facts.ConfigMapName
	f.clock.Step(time.Second)
	values := set("mode", "iptables", "clusterCIDR", "10.1.0.0/16")
	res, err = f.run(t, values)
	require.NoError(t, err)
	second, secondData := res.Facts.ConfigMapName, f.configMap(t).Data

	ds := f.daemonSet(t)
	ds.Spec.Template.Spec.Volumes[0].ConfigMap.Name = first // what kubectl rollout undo does
	_, err = f.client.AppsV1().DaemonSets("kube-system").Update(context.Background(), ds, metav1.UpdateOptions{})
	require.NoError(t, err)

	f.clock.Step(time.Second)
	res, err = f.run(t, values)
	require.NoError(t, err)
	assert.True(t, res.Facts.Restarted, "the values run again: %s", res.Msg)
	assert.Equal(t, ReasonConfigChanged, res.Facts.RestartReason)
	assert.Equal(t, second, rollout.ConfigVolumeOf(f.daemonSet(t), "kube-proxy"), "the template mounts the values' copy again")
	assert.Equal(t, secondData, f.configMap(t).Data, "the record keeps the values")
	assert.Equal(t, configmap.Hash(secondData, nil), f.daemonSet(t).Annotations[rollout.HashAnnotation])

	f.clock.Step(time.Second)
	res, err = f.run(t, values)
	require.NoError(t, err)
	assert.False(t, res.Changed, "then in sync: %s", res.Msg)
}

// The copy --undo restores is kept whatever the history: with a history of
// one, the first change on kubeadm's layout keeps the old data's copy.
func TestHistoryKeepsWhatAnUndoRestores(t *testing.T) {
	f := newFixture(t, seedConfigMap(), seedDaemonSet("registry.k8s.io/kube-proxy:v1.33.6"))
	f.recordRevision(t, "kube-proxy-1", dsUID, 1) // the template kubeadm made, which ran the config an undo restores
	o := set("mode", "ipvs")
	o.History = 1
	res, err := f.run(t, o)
	require.NoError(t, err)
	assert.ElementsMatch(t, []string{res.Facts.ConfigMapName, res.Facts.UndoConfigMap}, f.copyNames(t))
	f.clock.Step(time.Second)
	_, err = f.run(t, Options{Undo: true, History: 1})
	require.NoError(t, err, "--undo finds its copy")
}

// The history never deletes a copy that a ControllerRevision of the
// DaemonSet mounts: `kubectl rollout undo --to-revision` to it would start
// pods that cannot mount their config, each node it reaches left without a
// kube-proxy. A copy that no revision of this DaemonSet names still goes
// beyond the history, whatever another DaemonSet's revisions mount.
func TestHistoryKeepsWhatARevisionMounts(t *testing.T) {
	f := newFixture(t, seedConfigMap(), seedDaemonSet("registry.k8s.io/kube-proxy:v1.33.6"))
	names := f.changeCIDR(t, 4, 1, time.Second, func(i int) {
		switch i {
		case 0: // as the DaemonSet controller records the template now
			f.recordRevision(t, "kube-proxy-rev2", dsUID, 2)
		case 1: // a revision of another DaemonSet, mounting this copy too
			f.recordRevision(t, "other-rev1", "another-daemonset", 1)
		}
	})
	left := f.copyNames(t)
	assert.Contains(t, left, names[0], "revision 2 mounts it: an undo to it finds its config")
	assert.NotContains(t, left, names[1], "beyond the history, and no revision of kube-proxy mounts it")
	assert.Contains(t, left, names[3], "the template mounts it")
}

// recordRevision stores a ControllerRevision of the DaemonSet's template as
// it is now, as the DaemonSet controller does: the template as a
// replacing patch, owned by the DaemonSet with UID owner.
func (f *fixture) recordRevision(t *testing.T, name string, owner types.UID, revision int64) {
	t.Helper()
	ds := f.daemonSet(t)
	tmpl, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&ds.Spec.Template)
	require.NoError(t, err)
	tmpl["$patch"] = "replace"
	raw, err := json.Marshal(map[string]any{"spec": map[string]any{"template": tmpl}})
	require.NoError(t, err)
	cr := &appsv1.ControllerRevision{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "kube-system", OwnerReferences: []metav1.OwnerReference{{
			APIVersion: "apps/v1", Kind: "DaemonSet", Name: "kube-proxy", UID: owner, Controller: ptr.To(true),
		}}},
		Data:     runtime.RawExtension{Raw: raw},
		Revision: revision,
	}
	_, err = f.client.AppsV1().ControllerRevisions("kube-system").Create(context.Background(), cr, metav1.CreateOptions{})
	require.NoError(t, err)
}

// changeCIDR runs n changes of clusterCIDR with a history of history,
// every restart taken, the clock stepped by step before each, after(i)
// called after run i (nil: nothing), and returns the copy each run made.
func (f *fixture) changeCIDR(t *testing.T, n, history int, step time.Duration, after func(i int)) []string {
	t.Helper()
	var names []string
	for i := range n {
		f.clock.Step(step)
		o := set("clusterCIDR", fmt.Sprintf("10.%d.0.0/16", i))
		o.History = history
		res, err := f.run(t, o)
		require.NoError(t, err)
		require.True(t, res.Facts.Restarted)
		names = append(names, res.Facts.ConfigMapName)
		if after != nil {
			after(i)
		}
	}
	return names
}

// deleteCopy deletes a copy as another hand does; beingDeleted leaves it
// there with a deletionTimestamp and a finalizer, as a foreground deletion
// or a finalizer holds it.
func (f *fixture) deleteCopy(t *testing.T, name string, beingDeleted bool) {
	t.Helper()
	if !beingDeleted {
		require.NoError(t, f.client.CoreV1().ConfigMaps("kube-system").Delete(context.Background(), name, metav1.DeleteOptions{}))
		return
	}
	cm := f.getConfigMap(t, name)
	cm.DeletionTimestamp = ptr.To(metav1.NewTime(time.Unix(1700000000, 0)))
	cm.Finalizers = []string{"example.com/hold"}
	require.NoError(t, f.client.Tracker().Update(corev1.SchemeGroupVersion.WithResource("configmaps"), cm, "kube-system"))
}

// A copy the template mounts, gone (another hand deleted it: a prune, a
// label-based cleanup, the garbage collector) or being deleted, and then a
// run: a restart that keeps the template on it makes it again from the
// data the run holds; a change keeps it for a rollback, made again before
// the restart moves the template off it. One being deleted stops either
// before its first write.
func TestMountedCopyGoneOrBeingDeleted(t *testing.T) {
	runs := map[string]Options{
		"a restart onto it": func() Options { o := set("mode", "ipvs"); o.Restart = RestartAlways; return o }(),
		"a change off it":   set("mode", "ipvs", "clusterCIDR", "10.7.0.0/16"),
	}
	for name, o := range runs {
		for _, beingDeleted := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s, being deleted %t", name, beingDeleted), func(t *testing.T) {
				f := newFixture(t, seedConfigMap(), seedDaemonSet("registry.k8s.io/kube-proxy:v1.33.6"))
				res, err := f.run(t, set("mode", "ipvs"))
				require.NoError(t, err)
				mounted := res.Facts.ConfigMapName
				data := f.getConfigMap(t, mounted).Data
				f.deleteCopy(t, mounted, beingDeleted)

				f.clock.Step(time.Second)
				check := o
				check.Check = true
				res, err = f.run(t, check)
				if beingDeleted {
					require.Error(t, err, "check mode says it too")
					assert.Contains(t, err.Error(), "is being deleted")
				} else {
					require.NoError(t, err)
					assert.Contains(t, strings.Join(res.Warnings, "\n"), "a real run makes it again", "check mode says it")
				}
				assert.Empty(t, f.writes(), "check mode")

				res, err = f.run(t, o)
				if beingDeleted {
					require.Error(t, err)
					assert.Contains(t, err.Error(), "is being deleted")
					assert.NotContains(t, f.writes(), "patch daemonsets", "no restart")
					assert.NotContains(t, f.writes(), "create configmaps", "refused before any write")
					return
				}
				require.NoError(t, err)
				assert.True(t, res.Facts.Restarted)
				assert.Equal(t, data, f.getConfigMap(t, mounted).Data, "made again before the restart")
				assert.Contains(t, strings.Join(res.Warnings, "\n"), "was gone")
				if o.Restart == RestartAlways {
					assert.Equal(t, mounted, rollout.ConfigVolumeOf(f.daemonSet(t), "kube-proxy"))
				} else {
					assert.Equal(t, mounted, res.Facts.PreviousConfigMap, "the rollback's target")
				}
			})
		}
	}
}

// --undo refuses a copy being deleted, before any write.
func TestUndoToACopyBeingDeletedIsRefused(t *testing.T) {
	f := newFixture(t, seedConfigMap(), seedDaemonSet("registry.k8s.io/kube-proxy:v1.33.6"))
	f.recordRevision(t, "kube-proxy-1", dsUID, 1) // the template kubeadm made, which ran the config an undo restores
	_, err := f.run(t, set("mode", "ipvs"))
	require.NoError(t, err)
	prev := f.daemonSet(t).Annotations[rollout.PreviousConfigAnnotation]
	require.NotEmpty(t, prev)
	f.deleteCopy(t, prev, true)
	f.clock.Step(time.Second)
	f.client.ClearActions()
	_, err = f.run(t, Options{Undo: true})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "is being deleted")
	assert.Empty(t, f.writes())
}

// Copies carry none of the record's labels (a cleanup by kubeadm's labels
// must not catch them), and a record's binaryData travels with its copy,
// which is named by all it holds.
func TestCopiesCarryTheirOwnLabelsAndTheBinaryData(t *testing.T) {
	record := seedConfigMap()
	record.Labels = map[string]string{"k8s-app": "kube-proxy", "app": "kube-proxy"}
	record.BinaryData = map[string][]byte{"extra.bin": []byte{1, 2, 3}}
	f := newFixture(t, record, seedDaemonSet("registry.k8s.io/kube-proxy:v1.33.6"))
	res, err := f.run(t, set("mode", "ipvs"))
	require.NoError(t, err, "%s", res.Msg)
	require.True(t, res.Facts.Restarted)
	cp := f.getConfigMap(t, res.Facts.ConfigMapName)
	assert.Equal(t, map[string]string{configmap.CopyOfLabel: "kube-proxy", configmap.ManagedByLabel: "kube-proxy-sync"}, cp.Labels)
	assert.Equal(t, record.BinaryData, cp.BinaryData)
	// written out, not computed with configmap.Hash: the sha256 of the
	// copy's data and binaryData (the same data without the binaryData
	// names kube-proxy-1899382d52), so a change of what the name covers
	// or how fails here
	assert.Equal(t, "kube-proxy-f4da896b1d", cp.Name)
	assert.Equal(t, record.BinaryData, f.configMap(t).BinaryData, "the record keeps its binaryData")

	f.clock.Step(time.Second)
	res, err = f.run(t, set("mode", "ipvs"))
	require.NoError(t, err)
	assert.False(t, res.Changed, "%s", res.Msg)
}

// An operator's edit of kubeadm's record (the documented kubeadm way to
// change kube-proxy's config) once the template mounts a copy is applied
// as a change, with the values asked on top: shown by --check --diff,
// validated, rolled, and kept in the record; never silently overwritten.
func TestAnEditOfTheRecordIsAppliedAsAChange(t *testing.T) {
	f := newFixture(t, seedConfigMap(), seedDaemonSet("registry.k8s.io/kube-proxy:v1.33.6"))
	values := set("mode", "ipvs")
	res, err := f.run(t, values)
	require.NoError(t, err)
	before := res.Facts.ConfigMapName

	record := f.configMap(t)
	record.Data["config.conf"] += "clusterCIDR: 10.9.0.0/16\n" // kubectl edit
	_, err = f.client.CoreV1().ConfigMaps("kube-system").Update(context.Background(), record, metav1.UpdateOptions{})
	require.NoError(t, err)

	f.clock.Step(time.Second)
	f.client.ClearActions()
	check := values
	check.Check, check.Diff = true, true
	res, err = f.run(t, check)
	require.NoError(t, err)
	assert.True(t, res.Changed, "%s", res.Msg)
	assert.Equal(t, []string{"config.conf"}, res.Facts.ChangedKeys)
	require.NotNil(t, res.Diff)
	assert.NotContains(t, res.Diff.Before, "10.9.0.0/16")
	assert.Contains(t, res.Diff.After, "10.9.0.0/16")
	assert.Empty(t, f.writes(), "check mode")

	res, err = f.run(t, values)
	require.NoError(t, err)
	assert.True(t, res.Facts.Restarted, "%s", res.Msg)
	assert.Contains(t, strings.Join(res.Warnings, "\n"), "another hand wrote it")
	mounted := rollout.ConfigVolumeOf(f.daemonSet(t), "kube-proxy")
	assert.NotEqual(t, before, mounted)
	assert.Contains(t, f.getConfigMap(t, mounted).Data["config.conf"], "10.9.0.0/16", "the fleet runs the edit")
	assert.Contains(t, f.configMap(t).Data["config.conf"], "10.9.0.0/16", "the record keeps it")
	assert.Contains(t, f.configMap(t).Data["config.conf"], "mode: ipvs", "with the values asked")

	f.clock.Step(time.Second)
	res, err = f.run(t, values)
	require.NoError(t, err)
	assert.False(t, res.Changed, "%s", res.Msg)
}

// --undo reverts the config of the last change, and says when that is not
// the last rollout: right after `kubectl rollout undo` there is nothing
// left to undo; after an image rollout it refuses, naming the revision
// `kubectl rollout undo` goes back to.
func TestUndoRefusesWhatIsNotTheLastChange(t *testing.T) {
	t.Run("after kubectl rollout undo", func(t *testing.T) {
		f := newFixture(t, seedConfigMap(), seedDaemonSet("registry.k8s.io/kube-proxy:v1.33.6"))
		_, err := f.run(t, set("mode", "ipvs"))
		require.NoError(t, err)
		ds := f.daemonSet(t)
		ds.Spec.Template.Spec.Volumes[0].ConfigMap.Name = ds.Annotations[rollout.PreviousConfigAnnotation] // what kubectl rollout undo does
		_, err = f.client.AppsV1().DaemonSets("kube-system").Update(context.Background(), ds, metav1.UpdateOptions{})
		require.NoError(t, err)
		f.clock.Step(time.Second)
		f.client.ClearActions()
		_, err = f.run(t, Options{Undo: true})
		require.Error(t, err)
		assert.Contains(t, err.Error(), "nothing to undo")
		assert.Empty(t, f.writes())
	})
	t.Run("after an image rollout", func(t *testing.T) {
		f := newFixture(t, seedConfigMap(), seedDaemonSet(imageBefore))
		f.recordRevision(t, "kube-proxy-1", dsUID, 1) // the template kubeadm made, which ran the config an undo restores
		_, err := f.run(t, set("clusterCIDR", "10.60.0.0/16"))
		require.NoError(t, err)
		f.recordRevision(t, "kube-proxy-2", dsUID, 2) // the DaemonSet controller's revision of the change
		f.clock.Step(time.Second)
		_, err = f.run(t, Options{Image: imageAfter})
		require.NoError(t, err)
		f.recordRevision(t, "kube-proxy-3", dsUID, 3)
		f.clock.Step(time.Second)
		f.client.ClearActions()
		_, err = f.run(t, Options{Undo: true})
		require.Error(t, err)
		assert.Contains(t, err.Error(), "changed since its last config change (revision 2 moved it onto configmap")
		assert.Contains(t, err.Error(), "with "+imageBefore+", it runs "+imageAfter+" now")
		assert.Contains(t, err.Error(), "kubectl rollout undo daemonset/kube-proxy -n kube-system")
		assert.Empty(t, f.writes())
		assert.Equal(t, imageAfter, rollout.ContainerImage(f.daemonSet(t), "kube-proxy"))

		// the image rollout undone (kubectl rollout undo, or rolled back):
		// the config change is the last change again, and --undo does it
		ds := f.daemonSet(t)
		ds.Spec.Template.Spec.Containers[0].Image = imageBefore
		_, err = f.client.AppsV1().DaemonSets("kube-system").Update(context.Background(), ds, metav1.UpdateOptions{})
		require.NoError(t, err)
		f.clock.Step(time.Second)
		res, err := f.run(t, Options{Undo: true})
		require.NoError(t, err)
		assert.True(t, res.Facts.Restarted)
		assert.Equal(t, imageBefore, rollout.ContainerImage(f.daemonSet(t), "kube-proxy"))
	})
}

// A change that failed and was rolled back is no change: the rollback
// puts back the config before the last change that held, which --undo
// then restores.
func TestUndoAfterARolledBackChange(t *testing.T) {
	f := newRollingFixture(t, 3)
	// the fleet runs copy B, after a change from A that held
	record := f.configMap(t)
	a := configmap.NewCopy(record, record.Data, nil, 1)
	bData := maps.Clone(record.Data)
	bData["config.conf"] += "clusterCIDR: 10.61.0.0/16\n"
	b := configmap.NewCopy(record, bData, nil, 1)
	for _, cm := range []*corev1.ConfigMap{a, b} {
		_, err := f.client.CoreV1().ConfigMaps("kube-system").Create(context.Background(), cm, metav1.CreateOptions{})
		require.NoError(t, err)
	}
	record.Data = bData
	_, err := f.client.CoreV1().ConfigMaps("kube-system").Update(context.Background(), record, metav1.UpdateOptions{})
	require.NoError(t, err)
	ds := f.daemonSet(t)
	ds.Spec.Template.Spec.Volumes[0].ConfigMap.Name = b.Name
	ds.Annotations[rollout.PreviousConfigAnnotation] = a.Name
	ds.Annotations[rollout.HashAnnotation] = configmap.Hash(bData, nil)
	_, err = f.client.AppsV1().DaemonSets("kube-system").Update(context.Background(), ds, metav1.UpdateOptions{})
	require.NoError(t, err)

	f.podController(t, func(node, gen string) *corev1.Pod { return crashLoopingPod(node, gen) }) // the change fails
	res, err := f.run(t, Options{Spec: set("clusterCIDR", "10.62.0.0/16").Spec, Strategy: StrategyCanary, CanaryNodes: 1, RollbackOnFailure: true, Timeout: 10 * time.Second})
	require.Error(t, err)
	require.True(t, res.Facts.RolledBack, "%s", res.Msg)
	ds = f.daemonSet(t)
	assert.Equal(t, b.Name, rollout.ConfigVolumeOf(ds, "kube-proxy"))
	assert.Equal(t, a.Name, ds.Annotations[rollout.PreviousConfigAnnotation], "the rollback puts back what --undo restores")

	// --undo on that state: back to A, the config before the last change that held
	u := newFixture(t, f.configMap(t), f.getConfigMap(t, a.Name), f.getConfigMap(t, b.Name), ds)
	u.ranBefore(t, 1, a.Name, rollout.ContainerImage(ds, "kube-proxy")) // the template before the change to B
	res, err = u.run(t, Options{Undo: true})
	require.NoError(t, err)
	assert.True(t, res.Facts.Restarted)
	assert.Equal(t, a.Name, rollout.ConfigVolumeOf(u.daemonSet(t), "kube-proxy"))
}

// An edit of the record with no effect on the running kube-proxies (and
// one of its binaryData alone) is a change too: written, kept, and then
// in sync; never deferred into a record write that drops it.
func TestAnEditOfTheRecordWithNoEffect(t *testing.T) {
	for name, edit := range map[string]func(cm *corev1.ConfigMap){
		"a field iptables mode does not read": func(cm *corev1.ConfigMap) {
			cm.Data["config.conf"] = strings.Replace(cm.Data["config.conf"], "ipvs:\n", "ipvs:\n  scheduler: lc\n", 1)
		},
		"binaryData alone": func(cm *corev1.ConfigMap) { cm.BinaryData = map[string][]byte{"extra.bin": {7}} },
	} {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t, seedConfigMap(), seedDaemonSet("registry.k8s.io/kube-proxy:v1.33.6"))
			values := set("clusterCIDR", "10.9.0.0/16")
			_, err := f.run(t, values)
			require.NoError(t, err)
			record := f.configMap(t)
			edit(record)
			_, err = f.client.CoreV1().ConfigMaps("kube-system").Update(context.Background(), record, metav1.UpdateOptions{})
			require.NoError(t, err)
			want := f.configMap(t)

			f.clock.Step(time.Second)
			res, err := f.run(t, values)
			require.NoError(t, err)
			assert.True(t, res.Changed, "%s", res.Msg)
			assert.Empty(t, res.Facts.DeferredKeys)
			got := f.configMap(t)
			assert.Equal(t, want.Data, got.Data, "the record keeps the edit")
			assert.Equal(t, want.BinaryData, got.BinaryData)

			f.clock.Step(time.Second)
			res, err = f.run(t, values)
			require.NoError(t, err)
			assert.False(t, res.Changed, "then in sync: %s", res.Msg)
		})
	}
}

// The rollout ends when each node's new pod is Ready; the pod it replaced
// may still be terminating then, mounting the record. The run follows it
// until it is gone (within its grace period) and writes the record then,
// so the next run does not find it lagging.
func TestRecordWaitsForATerminatingPodToGo(t *testing.T) {
	f, _, watches := terminatingPodMountsTheRecord(t)
	ran, gone := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(gone)
		// the settle's watch, its timer set after the watch opened (the
		// rollout follows the DaemonSet's status): the kubelet confirms the
		// pod's end
		for watches.Load() < 1 || !f.clock.HasWaiters() {
			select {
			case <-ran:
				return
			default:
				goruntime.Gosched()
			}
		}
		assert.NoError(t, f.client.Tracker().Delete(corev1.SchemeGroupVersion.WithResource("pods"), "kube-system", "kube-proxy-node-leaving-1"))
	}()
	res, err := f.run(t, set("mode", "ipvs"))
	close(ran)
	<-gone
	require.NoError(t, err)
	require.True(t, res.Facts.Restarted)
	mounted := rollout.ConfigVolumeOf(f.daemonSet(t), "kube-proxy")
	assert.Equal(t, f.getConfigMap(t, mounted).Data, f.configMap(t).Data, "the pod went: the record holds what the fleet runs")
	assert.True(t, res.Facts.RecordChanged)
	assert.NotContains(t, strings.Join(res.Warnings, "\n"), "still mount it")
}

// A terminating pod that outlives its grace period (its node gone, a
// finalizer) ends the wait: the record is left for a later run.
func TestRecordWaitForATerminatingPodEnds(t *testing.T) {
	f, end, watches := terminatingPodMountsTheRecord(t)
	done := make(chan struct{})
	defer close(done)
	go func() {
		for {
			select {
			case <-done:
				return
			default:
			}
			// the settle's wait (the rollout follows the status): time
			// passes, the pod stays; only up to just past the wait's end
			// (the pod's grace period, then rollout.UnmountGrace), not
			// for the rest of the run (its Lease renewals)
			if watches.Load() > 0 && f.clock.HasWaiters() && f.clock.Now().Before(end.Add(rollout.UnmountGrace+time.Second)) {
				f.clock.Step(5 * time.Second)
			}
			goruntime.Gosched()
		}
	}()
	res, err := f.run(t, set("mode", "ipvs"))
	require.NoError(t, err)
	require.True(t, res.Facts.Restarted)
	assert.Equal(t, seedConfigMap().Data, f.configMap(t).Data, "a pod mounts it still: not written")
	assert.False(t, res.Facts.RecordChanged)
	assert.Contains(t, strings.Join(res.Warnings, "\n"), "node-leaving/kube-proxy-node-leaving-1 still mount it")
}

// terminatingPodMountsTheRecord is leavingNodeMountsTheRecord's terminating
// pod, whose grace period ends (end) 30 s from the fixture's now; watches
// counts the pod watches opened.
func terminatingPodMountsTheRecord(t *testing.T) (f *fixture, end time.Time, watches *atomic.Int32) {
	objs := leavingNodeMountsTheRecord(true)
	end = time.Date(2026, 11, 22, 12, 0, 30, 0, time.UTC)
	objs[3].(*corev1.Pod).DeletionTimestamp = &metav1.Time{Time: end}
	f = newFixture(t, objs...)
	podListsAtAVersion(f)
	watches = &atomic.Int32{}
	// counted once the tracker has the watch: a pod deleted after the count
	// reaches the watch (the fake does not replay from a resourceVersion, so
	// a delete between the list and the watch would never be seen)
	f.client.PrependWatchReactor("pods", func(a k8stesting.Action) (bool, watch.Interface, error) {
		var opts metav1.ListOptions
		if wa, ok := a.(k8stesting.WatchActionImpl); ok {
			opts = wa.ListOptions
		}
		w, err := f.client.Tracker().Watch(a.GetResource(), a.GetNamespace(), opts)
		if err != nil {
			return true, nil, err
		}
		watches.Add(1)
		return true, w, nil
	})
	return f, end, watches
}

// podListsAtAVersion makes pod lists carry a resourceVersion, which a pod
// watch (RetryWatcher) starts from.
func podListsAtAVersion(f *fixture) {
	f.client.PrependReactor("list", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		handled, obj, err := k8stesting.ObjectReaction(f.client.Tracker())(a)
		if list, ok := obj.(*corev1.PodList); ok {
			list.ResourceVersion = "1"
		}
		return handled, obj, err
	})
}
