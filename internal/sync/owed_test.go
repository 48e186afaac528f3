package sync

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"

	"github.com/kube-proxy-sync/kube-proxy-sync/internal/configmap"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/kube/kubefake"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/rollout"
)

const templateGeneration = "deprecated.daemonset.template.generation"

// Two runs in the same second, as an Ansible loop or an upgrade's two
// calls make them (the fake clock stands still): each restart gives the
// template a new restartedAt, so the second replaces the pods as well, and
// the stamp is the second data's.
func TestRestartInTheSameSecondIsNotLost(t *testing.T) {
	f := newFixture(t, seedConfigMap(), seedDaemonSet("registry.k8s.io/kube-proxy:v1.33.6"))
	res, err := f.run(t, Options{Spec: configmap.Spec{Server: "https://10.0.0.1:6443"}})
	require.NoError(t, err)
	require.True(t, res.Facts.Restarted)
	first := f.daemonSet(t)
	require.Equal(t, "2", first.Annotations[templateGeneration])

	res, err = f.run(t, Options{Spec: configmap.Spec{Server: "https://10.0.0.2:6443"}})
	require.NoError(t, err)
	assert.True(t, res.Facts.Restarted)
	ds := f.daemonSet(t)
	assert.Equal(t, "3", ds.Annotations[templateGeneration], "the second restart moved the template too")
	assert.NotEqual(t, first.Spec.Template.Annotations[rollout.RestartedAtAnnotation], ds.Spec.Template.Annotations[rollout.RestartedAtAnnotation])
	assert.Equal(t, configmap.Hash(f.configMap(t).Data, nil), ds.Annotations[rollout.HashAnnotation])
	assert.Equal(t, "3", ds.Annotations[rollout.RestartGenerationAnnotation])

	res, err = f.run(t, Options{Spec: configmap.Spec{Server: "https://10.0.0.2:6443"}})
	require.NoError(t, err)
	assert.False(t, res.Changed, "the next run finds nothing owed")
}

// A restart PATCH that leaves the template as it was (here something drops
// restartedAt from it, as an admission webhook could) replaces no pod: the
// run fails saying so, and the restart stays owed for the next run.
func TestRestartThatDoesNotMoveTheTemplateStaysOwed(t *testing.T) {
	f := newFixture(t, seedConfigMap(), seedDaemonSet("registry.k8s.io/kube-proxy:v1.33.6"))
	f.client.PrependReactor("patch", "daemonsets", func(a k8stesting.Action) (bool, runtime.Object, error) {
		pa := a.(k8stesting.PatchAction)
		var patch map[string]any
		require.NoError(t, json.Unmarshal(pa.GetPatch(), &patch))
		spec, ok := patch["spec"].(map[string]any)
		if !ok {
			return false, nil, nil
		}
		delete(spec, "template")
		body, err := json.Marshal(patch)
		require.NoError(t, err)
		stripped := k8stesting.NewPatchSubresourceAction(a.GetResource(), a.GetNamespace(), pa.GetName(), pa.GetPatchType(), body)
		return kubefake.DaemonSetReaction(f.client.Tracker())(stripped)
	})
	res, err := f.run(t, Options{Spec: configmap.Spec{Server: "https://10.0.0.1:6443"}})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "left its pod template as it was")
	assert.False(t, res.Facts.Restarted)
	assert.True(t, res.Facts.RestartRequired)
	ds := f.daemonSet(t)
	assert.Empty(t, ds.Spec.Template.Annotations[rollout.RestartedAtAnnotation])
	assert.False(t, rollout.Runs(ds, configmap.Hash(f.configMap(t).Data, nil)), "the stamp does not hold")

	f.client.ReactionChain = f.client.ReactionChain[1:] // the webhook is gone
	res, err = f.run(t, Options{Spec: configmap.Spec{Server: "https://10.0.0.1:6443"}})
	require.NoError(t, err)
	assert.True(t, res.Facts.Restarted)
	assert.Equal(t, ReasonPending, res.Facts.RestartReason)
	assert.Equal(t, "2", f.daemonSet(t).Annotations[templateGeneration])
}

// A restart the run owed rather than caused (restart_reason: pending: the
// ConfigMap holds D2, the pods were restarted for D1) fails on the new
// template and is rolled back: the pods not reached still run D1, so the
// DaemonSet keeps saying D1 and the restart stays owed.
func TestRollbackOfAnOwedRestartKeepsItOwed(t *testing.T) {
	f := newRollingFixture(t, 5)
	d1 := map[string]string{"config.conf": seedConfig + "# d1\n", "kubeconfig.conf": seedKubeconfig}
	owed := f.daemonSet(t)
	owed.Annotations[rollout.HashAnnotation] = configmap.Hash(d1, nil)
	require.NoError(t, f.client.Tracker().Update(appsv1.SchemeGroupVersion.WithResource("daemonsets"), owed, "kube-system"))
	go func() {
		w := <-f.watches
		broken := kubeProxyPod("node-0", "2", false)
		broken.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "kube-proxy", RestartCount: 3,
			State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}}}}
		f.replace(t, broken)
		w.Modify(f.status("301", 1, 4))
		w.Modify(f.status("302", 1, 4))
		w.Modify(f.status("303", 1, 4))
		f.clock.Step(statusStall)
	}()
	res, err := f.run(t, Options{RollbackOnFailure: true})
	require.Error(t, err)
	assert.Equal(t, ReasonPending, res.Facts.RestartReason)
	assert.True(t, res.Facts.RolledBack)
	ds := f.daemonSet(t)
	assert.Equal(t, configmap.Hash(d1, nil), ds.Annotations[rollout.HashAnnotation], "the stamp before the run, not the ConfigMap's data")
	assert.Empty(t, ds.Spec.Template.Annotations[rollout.RestartedAtAnnotation], "template restored")
	assert.Equal(t, seedConfigMap().Data, f.configMap(t).Data)

	res, err = f.run(t, Options{Check: true})
	require.NoError(t, err)
	assert.True(t, res.Facts.RestartRequired)
	assert.Equal(t, ReasonPending, res.Facts.RestartReason)
}
