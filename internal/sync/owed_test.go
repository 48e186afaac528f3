package sync

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
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
