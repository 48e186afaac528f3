//go:build e2e

package e2e

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kube-proxy-sync/kube-proxy-sync/internal/configmap"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/rollout"
	"github.com/kube-proxy-sync/kube-proxy-sync/test/e2e/cluster"
)

// The tool is not the only writer of kube-proxy's objects: kubectl, an
// operator's edit, kubeadm, a second DaemonSet and a prune write them too.
// Each test here is one of them, against the real API server and
// DaemonSet controller.

// change runs the tool with clusterCIDR set to cidr (a change with an
// effect in every mode), and fails the test unless it restarted.
func change(t *testing.T, c *cluster.Cluster, cidr string, args ...string) result {
	t.Helper()
	r := runSync(t, c, append([]string{"--set", "clusterCIDR=" + cidr, "--probe-path", "none"}, args...)...)
	require.Equal(t, 0, r.Code, r.Msg+"\n"+r.Stderr)
	require.True(t, r.Restarted, r.Msg)
	c.WaitRolloutComplete(t, time.Minute)
	return r
}

// `kubectl rollout undo`, then a run with the values before the undo:
// those values run again (the stamp the undo left names them, and is
// not believed), and the record keeps them.
func TestKubectlRolloutUndoThenTheSameValuesAgain(t *testing.T) {
	c := cluster.Connect(t)
	c.Reset(t)
	t.Cleanup(func() { c.Reset(t) })
	change(t, c, "10.70.0.0/16")
	second := change(t, c, "10.71.0.0/16")

	out, err := exec.Command(kubectl(t, c), "--kubeconfig", c.KubeconfigPath, "-n", c.Namespace, "rollout", "undo", "daemonset/"+cluster.Name).CombinedOutput()
	require.NoError(t, err, "%s", out)
	c.WaitRolloutComplete(t, time.Minute)
	require.NotEqual(t, second.ConfigMapName, cluster.MountedConfigMapName(c.DaemonSet(t)), "kubectl rollout undo moved the template")

	r := runSync(t, c, "--set", "clusterCIDR=10.71.0.0/16", "--probe-path", "none")
	require.Equal(t, 0, r.Code, r.Msg+"\n"+r.Stderr)
	assert.True(t, r.Restarted, "the values run again: %s", r.Msg)
	c.WaitRolloutComplete(t, time.Minute)
	assert.Equal(t, second.ConfigMapName, cluster.MountedConfigMapName(c.DaemonSet(t)))
	assert.Contains(t, c.ConfigMap(t).Data["config.conf"], "10.71.0.0/16", "the record keeps the values")
	for node, cm := range c.PodConfigMaps(t) {
		assert.Equal(t, second.ConfigMapName, cm, "node %s runs the values", node)
	}
	r = runSync(t, c, "--set", "clusterCIDR=10.71.0.0/16", "--probe-path", "none")
	require.Equal(t, 0, r.Code, r.Msg)
	assert.False(t, r.Changed, "then in sync: %s", r.Msg)
}

// The copy the template mounts, deleted by another hand (a prune, a
// label-based cleanup): a restart makes it again first, so the pods it
// starts find their ConfigMap.
func TestDeletedMountedCopyIsMadeAgainBeforeARestart(t *testing.T) {
	c := cluster.Connect(t)
	c.Reset(t)
	t.Cleanup(func() { c.Reset(t) })
	r := change(t, c, "10.72.0.0/16")
	data := c.ConfigMapNamed(t, r.ConfigMapName).Data
	require.NoError(t, c.Client.CoreV1().ConfigMaps(c.Namespace).Delete(context.Background(), r.ConfigMapName, metav1.DeleteOptions{}))

	before := c.PodUIDs(t)
	r = runSync(t, c, "--set", "clusterCIDR=10.72.0.0/16", "--probe-path", "none", "--restart", "always")
	require.Equal(t, 0, r.Code, r.Msg+"\n"+r.Stderr)
	assert.True(t, r.Restarted)
	assert.Contains(t, strings.Join(r.Warnings, "\n"), "was gone")
	assert.Equal(t, data, c.ConfigMapNamed(t, r.ConfigMapName).Data, "made again before the restart")
	c.WaitRolloutComplete(t, time.Minute)
	cluster.AssertAllReplaced(t, before, c.PodUIDs(t))
}

// A copy being deleted (a finalizer holds it): a run that would point the
// template at it, restart onto it or --undo to it stops before any write.
func TestCopyBeingDeletedIsNeverMounted(t *testing.T) {
	c := cluster.Connect(t)
	c.Reset(t)
	t.Cleanup(func() { c.Reset(t) })
	first := change(t, c, "10.73.0.0/16")
	second := change(t, c, "10.74.0.0/16")
	cms := c.Client.CoreV1().ConfigMaps(c.Namespace)
	hold := func(name string) {
		cm := c.ConfigMapNamed(t, name)
		cm.Finalizers = append(cm.Finalizers, "kube-proxy-sync.test/hold")
		_, err := cms.Update(context.Background(), cm, metav1.UpdateOptions{})
		require.NoError(t, err)
		t.Cleanup(func() {
			cm, err := cms.Get(context.Background(), name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return
			}
			require.NoError(t, err)
			cm.Finalizers = nil
			_, err = cms.Update(context.Background(), cm, metav1.UpdateOptions{})
			require.NoError(t, err)
		})
		require.NoError(t, cms.Delete(context.Background(), name, metav1.DeleteOptions{}))
		require.NotNil(t, c.ConfigMapNamed(t, name).DeletionTimestamp)
	}
	hold(first.ConfigMapName)
	hold(second.ConfigMapName)
	ds := c.DaemonSet(t)

	for _, args := range [][]string{
		{"--undo", "--probe-path", "none"},
		{"--set", "clusterCIDR=10.74.0.0/16", "--probe-path", "none", "--restart", "always"},
	} {
		r := runSync(t, c, args...)
		assert.Equal(t, 1, r.Code, "%v: %s", args, r.Msg)
		assert.Contains(t, r.Msg, "is being deleted", "%v", args)
		now := c.DaemonSet(t)
		assert.Equal(t, ds.Generation, now.Generation, "%v: the template did not move", args)
		assert.Equal(t, second.ConfigMapName, cluster.MountedConfigMapName(now))
	}
}

// An operator's edit of kubeadm's record, the documented kubeadm way to
// change kube-proxy's config, once the template mounts a copy: shown by
// --check --diff, then applied as a change with the values on top.
func TestEditOfTheRecordIsAppliedAsAChange(t *testing.T) {
	c := cluster.Connect(t)
	c.Reset(t)
	t.Cleanup(func() { c.Reset(t) })
	r := change(t, c, "10.75.0.0/16")
	record := c.ConfigMap(t)
	record.Data["config.conf"] = strings.Replace(record.Data["config.conf"], "oomScoreAdj: null", "oomScoreAdj: -998", 1)
	require.Contains(t, record.Data["config.conf"], "oomScoreAdj: -998")
	_, err := c.Client.CoreV1().ConfigMaps(c.Namespace).Update(context.Background(), record, metav1.UpdateOptions{})
	require.NoError(t, err)

	check := runSync(t, c, "--set", "clusterCIDR=10.75.0.0/16", "--probe-path", "none", "--check", "--diff")
	require.Equal(t, 0, check.Code, check.Msg)
	assert.True(t, check.Changed)
	assert.Contains(t, check.Diff["after"], "oomScoreAdj: -998")
	assert.NotContains(t, check.Diff["before"], "oomScoreAdj: -998")

	after := runSync(t, c, "--set", "clusterCIDR=10.75.0.0/16", "--probe-path", "none")
	require.Equal(t, 0, after.Code, after.Msg+"\n"+after.Stderr)
	assert.True(t, after.Restarted, after.Msg)
	assert.NotEqual(t, r.ConfigMapName, after.ConfigMapName)
	assert.Contains(t, c.ConfigMapNamed(t, after.ConfigMapName).Data["config.conf"], "oomScoreAdj: -998", "the fleet runs the edit")
	assert.Contains(t, c.ConfigMap(t).Data["config.conf"], "oomScoreAdj: -998", "the record keeps it")
}

// otherKubeProxy creates a second DaemonSet of the namespace whose
// template mounts configmap cm (kubeadm's Windows kube-proxy mounts the
// record), on no node, deleted when the test ends.
func otherKubeProxy(t *testing.T, c *cluster.Cluster, name, cm string) {
	t.Helper()
	other := c.SeedDaemonSet(t)
	other.Name = name
	other.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"k8s-app": name}}
	other.Spec.Template.Labels = map[string]string{"k8s-app": name}
	other.Spec.Template.Spec.NodeSelector = map[string]string{"kube-proxy-sync.test/no-node": "true"}
	for i := range other.Spec.Template.Spec.Volumes {
		if v := &other.Spec.Template.Spec.Volumes[i]; v.ConfigMap != nil && v.ConfigMap.Name == cluster.Name {
			v.ConfigMap.Name = cm
		}
	}
	dss := c.Client.AppsV1().DaemonSets(c.Namespace)
	_, err := dss.Create(context.Background(), other, metav1.CreateOptions{})
	require.NoError(t, err)
	t.Cleanup(func() {
		bg := metav1.DeletePropagationBackground
		if err := dss.Delete(context.Background(), name, metav1.DeleteOptions{PropagationPolicy: &bg}); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("delete daemonset %s: %v", name, err)
		}
	})
}

// A second kube-proxy DaemonSet on kubeadm's record: the record its pods
// mount is never written under them, and the copy another DaemonSet
// mounts stays whatever the history.
func TestSecondDaemonSetOnTheSameConfig(t *testing.T) {
	c := cluster.Connect(t)
	c.Reset(t)
	t.Cleanup(func() { c.Reset(t) })
	seed := c.ConfigMap(t).Data
	otherKubeProxy(t, c, cluster.Name+"-windows", cluster.Name)
	first := change(t, c, "10.76.0.0/16", "--config-history", "1")
	assert.False(t, first.RecordChanged)
	assert.Equal(t, seed, c.ConfigMap(t).Data, "the other DaemonSet's pods mount it")
	assert.Contains(t, strings.Join(first.Warnings, "\n"), "daemonset "+cluster.Name+"-windows")

	otherKubeProxy(t, c, cluster.Name+"-pool-b", first.ConfigMapName)
	for _, cidr := range []string{"10.77.0.0/16", "10.78.0.0/16", "10.79.0.0/16"} {
		change(t, c, cidr, "--config-history", "1")
	}
	assert.Contains(t, c.Copies(t), first.ConfigMapName, "the copy daemonset %s-pool-b mounts", cluster.Name)
}

// --undo after an image rollout refuses, naming the revision `kubectl
// rollout undo` goes back to; right after `kubectl rollout undo` there is
// nothing left to undo. Nothing is written either time.
func TestUndoSaysWhatIsNotTheLastChange(t *testing.T) {
	c := cluster.Connect(t)
	c.Reset(t)
	t.Cleanup(func() { c.Reset(t) })
	change(t, c, "10.80.0.0/16")
	before := rollout.ContainerImage(c.DaemonSet(t), "kube-proxy")
	r := runSync(t, c, "--image", "registry.k8s.io/kube-proxy:v1.33.7", "--probe-path", "none")
	require.Equal(t, 0, r.Code, r.Msg+"\n"+r.Stderr)
	c.WaitRolloutComplete(t, time.Minute)
	ds := c.DaemonSet(t)
	r = runSync(t, c, "--undo", "--probe-path", "none")
	assert.Equal(t, 1, r.Code, r.Msg)
	assert.Contains(t, r.Msg, "changed since its last config change")
	assert.Contains(t, r.Msg, before)
	assert.Equal(t, ds.Generation, c.DaemonSet(t).Generation, "nothing written")

	out, err := exec.Command(kubectl(t, c), "--kubeconfig", c.KubeconfigPath, "-n", c.Namespace, "rollout", "undo", "daemonset/"+cluster.Name).CombinedOutput()
	require.NoError(t, err, "%s", out)
	c.WaitRolloutComplete(t, time.Minute)
	change(t, c, "10.81.0.0/16")
	out, err = exec.Command(kubectl(t, c), "--kubeconfig", c.KubeconfigPath, "-n", c.Namespace, "rollout", "undo", "daemonset/"+cluster.Name).CombinedOutput()
	require.NoError(t, err, "%s", out)
	c.WaitRolloutComplete(t, time.Minute)
	ds = c.DaemonSet(t)
	r = runSync(t, c, "--undo", "--probe-path", "none")
	assert.Equal(t, 1, r.Code, r.Msg)
	assert.Contains(t, r.Msg, "nothing to undo")
	assert.Equal(t, ds.Generation, c.DaemonSet(t).Generation, "nothing written")
}

// A proxy-mode switch together with --image is judged by both versions:
// a failed canary would roll back to the running 1.30, whose nftables
// gate is off in the running config. Refused before any write.
func TestModeSwitchWithAnImageIsJudgedByBothVersions(t *testing.T) {
	c := cluster.Connect(t)
	c.Reset(t)
	t.Cleanup(func() { c.Reset(t) })
	_, err := c.Client.AppsV1().DaemonSets(c.Namespace).Patch(context.Background(), cluster.Name, types.StrategicMergePatchType,
		[]byte(`{"spec":{"template":{"spec":{"containers":[{"name":"kube-proxy","image":"registry.k8s.io/kube-proxy:v1.30.14"}]}}}}`), metav1.PatchOptions{})
	require.NoError(t, err)
	c.WaitRolloutComplete(t, time.Minute)
	before := stateOf(t, c)
	r := runSync(t, c, "--image", "registry.k8s.io/kube-proxy:v1.31.14", "--set", "mode=nftables", "--probe-path", "none")
	assert.Equal(t, 1, r.Code, r.Msg)
	assert.Contains(t, r.Msg, "kube-proxy 1.30 removes nftables' tables at start-up only with the NFTablesProxyMode feature gate on")
	assertUntouched(t, c, before)
}

// A record with binaryData (another tool's): a change carries it into the
// copy, named by all it holds, instead of failing with a not-found.
func TestRecordWithBinaryDataChanges(t *testing.T) {
	c := cluster.Connect(t)
	c.Reset(t)
	t.Cleanup(func() { c.Reset(t) })
	record := c.ConfigMap(t)
	record.BinaryData = map[string][]byte{"extra.bin": {0, 1, 2}}
	_, err := c.Client.CoreV1().ConfigMaps(c.Namespace).Update(context.Background(), record, metav1.UpdateOptions{})
	require.NoError(t, err)
	r := change(t, c, "10.82.0.0/16")
	cp := c.ConfigMapNamed(t, r.ConfigMapName)
	assert.Equal(t, record.BinaryData, cp.BinaryData)
	assert.Equal(t, configmap.CopyName(cluster.Name, configmap.Hash(cp.Data, cp.BinaryData)), cp.Name)
	assert.Equal(t, map[string]string{configmap.CopyOfLabel: cluster.Name, configmap.ManagedByLabel: "kube-proxy-sync"}, cp.Labels,
		"a copy carries none of the record's labels: a cleanup aimed at kubeadm's does not catch it")
}

// The audit log of an image upgrade names the image and the ConfigMap
// before and after, and the kind of run.
func TestAuditOfAnImageUpgrade(t *testing.T) {
	c := cluster.Connect(t)
	c.Reset(t)
	t.Cleanup(func() { c.Reset(t) })
	log := filepath.Join(t.TempDir(), "audit.jsonl")
	before := rollout.ContainerImage(c.DaemonSet(t), "kube-proxy")
	r := runSync(t, c, "--image", "registry.k8s.io/kube-proxy:v1.33.7", "--probe-path", "none", "--audit-log", log)
	require.Equal(t, 0, r.Code, r.Msg+"\n"+r.Stderr)
	records := readAudit(t, log)
	require.NotEmpty(t, records)
	last := records[len(records)-1]
	assert.Equal(t, "image", last.Kind)
	assert.Equal(t, before, last.ImageBefore)
	assert.Equal(t, "registry.k8s.io/kube-proxy:v1.33.7", last.ImageAfter)
	assert.Equal(t, cluster.Name, last.ConfigMapBefore)
	assert.Equal(t, r.ConfigMapName, last.ConfigMapAfter)
}

// A change that failed and was rolled back is no change: --undo then
// restores the config before the last change that held, not the one it
// rolled back from.
func TestUndoAfterARolledBackChange(t *testing.T) {
	c := cluster.Connect(t)
	c.Reset(t)
	t.Cleanup(func() { c.Reset(t) })
	first := change(t, c, "10.83.0.0/16")
	change(t, c, "10.84.0.0/16")

	holdRollout(t, c, 15) // see TestCrashLoopingPodRollsBackAtOnce
	breaker := breakPodsOfGeneration(t, c, templateGeneration(t, c.DaemonSet(t))+1)
	r := runSync(t, c, "--set", "clusterCIDR=10.85.0.0/16", "--probe-path", "none")
	breaker.Stop()
	require.Equal(t, 1, r.Code, r.Msg)
	require.True(t, r.RolledBack, r.Msg)
	c.WaitRolloutComplete(t, 2*time.Minute)
	assert.Equal(t, first.ConfigMapName, c.DaemonSet(t).Annotations[rollout.PreviousConfigAnnotation], "the rollback puts back what --undo restores")

	holdRollout(t, c, 0)
	r = runSync(t, c, "--undo", "--probe-path", "none")
	require.Equal(t, 0, r.Code, r.Msg+"\n"+r.Stderr)
	assert.True(t, r.Restarted)
	c.WaitRolloutComplete(t, 2*time.Minute)
	assert.Equal(t, first.ConfigMapName, cluster.MountedConfigMapName(c.DaemonSet(t)), "back to the config before the last change that held")
	assert.Contains(t, c.ConfigMap(t).Data["config.conf"], "10.83.0.0/16")
}

// A change with no effect is not written to the record while a pod of an
// older template still mounts it (a rollout off kubeadm's layout that did
// not finish: here the template moved onto a copy with OnDelete, and no
// pod was replaced): that pod would run it at its next restart.
func TestNoEffectChangeWaitsForOlderPodsOnTheRecord(t *testing.T) {
	c := cluster.Connect(t)
	c.Reset(t)
	t.Cleanup(func() { c.Reset(t) })
	require.Equal(t, 0, runSync(t, c, "--probe-path", "none").Code) // adopt
	record, ds := c.ConfigMap(t), c.DaemonSet(t)
	cp := configmap.NewCopy(record, record.Data, ds, rollout.TemplateGeneration(ds)+1)
	_, err := c.Client.CoreV1().ConfigMaps(c.Namespace).Create(context.Background(), cp, metav1.CreateOptions{})
	require.NoError(t, err)
	patch := `{"spec":{"updateStrategy":{"type":"OnDelete","rollingUpdate":null},"template":{"spec":{"volumes":[{"name":"kube-proxy","configMap":{"name":"` + cp.Name + `"}}]}}}}`
	_, err = c.Client.AppsV1().DaemonSets(c.Namespace).Patch(context.Background(), cluster.Name, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{})
	require.NoError(t, err)
	require.NotEmpty(t, c.PodsMounting(t, cluster.Name), "the pods of the older template mount the record")

	r := runSync(t, c, "--set", "ipvs.scheduler=lc", "--probe-path", "none")
	require.Equal(t, 0, r.Code, r.Msg+"\n"+r.Stderr)
	assert.Equal(t, []string{"config.conf:ipvs.scheduler"}, r.DeferredKeys)
	assert.Equal(t, record.Data, c.ConfigMap(t).Data, "not written under the older pods")
	assert.Contains(t, strings.Join(r.Warnings, "\n"), "pod ")
}
