package kpsync

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kube-proxy-sync/kube-proxy-sync/internal/probe"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/rollout"
)

const (
	imageBefore = "registry.k8s.io/kube-proxy:v1.33.6"
	imageAfter  = "registry.k8s.io/kube-proxy:v1.34.4"
)

// An image change (kubeadm's rendering of an upgrade) is rolled like a
// config change: canary first, each node's new pod followed, the config
// left as it was, and the result says which image runs.
func TestImageChangeRollsLikeAConfigChange(t *testing.T) {
	f := newRollingFixture(t, 3)
	var replaced []string
	f.podController(t, func(node, gen string) *corev1.Pod {
		replaced = append(replaced, node)
		return kubeProxyPod(node, gen, true)
	})
	data := f.configMap(t).Data
	res, err := f.run(t, Options{Image: imageAfter, Strategy: StrategyCanary, CanaryNodes: 1, RollbackOnFailure: true, Timeout: 10 * time.Second})
	require.NoError(t, err)
	fa := res.Facts
	assert.True(t, fa.Restarted)
	assert.Equal(t, ReasonImageChanged, fa.RestartReason)
	assert.True(t, fa.ImageChanged)
	assert.Equal(t, imageBefore, fa.ImageBefore)
	assert.Equal(t, imageAfter, fa.Image)
	assert.Equal(t, "v1.34.4", fa.KubeProxyVersion, "the new pods' version")
	assert.Empty(t, fa.ChangedKeys)
	assert.Equal(t, imageAfter, rollout.ContainerImage(f.daemonSet(t), "kube-proxy"))
	assert.Equal(t, []string{"node-0", "node-1", "node-2"}, replaced, "the canary first, then the others")
	assert.Equal(t, data, f.configMap(t).Data, "the config as it was")

	// the rerun finds the image in place: nothing to do
	res, err = f.run(t, Options{Image: imageAfter, Strategy: StrategyCanary, RollbackOnFailure: true, Timeout: 10 * time.Second})
	require.NoError(t, err)
	assert.False(t, res.Changed)
	assert.False(t, res.Facts.ImageChanged)
	assert.Equal(t, imageAfter, res.Facts.Image)
}

// An upgrade whose new image crash-loops kube-proxy stops at the canary
// and is rolled back: the template runs the image before it again, and
// every other node kept its pod.
func TestImageChangeCrashLoopingCanaryIsRolledBack(t *testing.T) {
	f := newRollingFixture(t, 3)
	f.podController(t, func(node, gen string) *corev1.Pod {
		p := kubeProxyPod(node, gen, true)
		if rollout.ContainerImage(f.daemonSet(t), "kube-proxy") == imageAfter {
			p = crashLoopingPod(node, gen)
		}
		return p
	})
	res, err := f.run(t, Options{Image: imageAfter, Strategy: StrategyCanary, CanaryNodes: 1, RollbackOnFailure: true, Timeout: 10 * time.Second})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "CrashLoopBackOff")
	assert.True(t, res.Facts.RolledBack)
	assert.Equal(t, imageBefore, res.Facts.Image, "the image that runs after the rollback")
	assert.Equal(t, imageBefore, rollout.ContainerImage(f.daemonSet(t), "kube-proxy"), "the template runs the image before the upgrade again")
	for _, n := range []string{"node-1", "node-2"} {
		assert.Equal(t, types.UID(n+"-1"), f.podUID(t, "kube-proxy-"+n+"-1"), "node %s never upgraded", n)
	}
}

// Under --restart never an image change is refused: the PATCH would
// restart every pod. Nothing is written.
func TestImageChangeUnderRestartNeverIsRefused(t *testing.T) {
	f := newFixture(t, seedConfigMap(), seedDaemonSet(imageBefore))
	_, err := f.run(t, Options{Image: imageAfter, Restart: RestartNever})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "--restart never")
	assert.Empty(t, f.writes())
}

// The new image's version chooses the probe: from 1.27 to 1.28 the
// readiness probe moves to /livez in the same PATCH as the image, one
// template change, one rollout.
func TestImageChangeTakesTheProbeOfTheNewVersion(t *testing.T) {
	ds := seedDaemonSet("registry.k8s.io/kube-proxy:v1.27.16")
	ds.Spec.Template.Spec.Containers[0].ReadinessProbe.HTTPGet.Path = probe.Healthz
	f := newFixture(t, seedConfigMap(), ds)
	res, err := f.run(t, Options{Image: "registry.k8s.io/kube-proxy:v1.28.15"})
	require.NoError(t, err)
	assert.True(t, res.Facts.Restarted)
	assert.True(t, res.Facts.ProbeChanged)
	assert.Equal(t, "v1.28.15", res.Facts.KubeProxyVersion)
	after := f.daemonSet(t)
	assert.Equal(t, probe.Livez, after.Spec.Template.Spec.Containers[0].ReadinessProbe.HTTPGet.Path)
	assert.Equal(t, "registry.k8s.io/kube-proxy:v1.28.15", rollout.ContainerImage(after, "kube-proxy"))
	assert.Equal(t, rollout.TemplateGeneration(ds)+1, rollout.TemplateGeneration(after), "one template change")
}
