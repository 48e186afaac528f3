//go:build e2e

package e2e

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kube-proxy-sync/kube-proxy-sync/internal/rollout"
	"github.com/kube-proxy-sync/kube-proxy-sync/test/e2e/cluster"
)

// One rollout that changed the image and the config together (an upgrade
// with a settings change), then --undo: it would restore the old config
// with the new image, a pair the fleet never ran, so it refuses before
// any write, naming both images and `kubectl rollout undo`, which the
// real DaemonSet controller's history lets go back to both. No pod is
// replaced.
func TestUndoRefusesAChangeThatMovedTheImageToo(t *testing.T) {
	c := cluster.Connect(t)
	c.Reset(t)
	t.Cleanup(func() { c.Reset(t) })
	before := rollout.ContainerImage(c.DaemonSet(t), "kube-proxy")
	require.Equal(t, "registry.k8s.io/kube-proxy:v1.33.6", before, "the seed DaemonSet's image (test/manifests)")
	const after = "registry.k8s.io/kube-proxy:v1.33.7"

	r := runSync(t, c, "--probe-path", "none") // the adoption
	require.Equal(t, 0, r.Code, r.Msg+"\n"+r.Stderr)
	r = runSync(t, c, "--image", after, "--set", "clusterCIDR=10.83.0.0/16", "--probe-path", "none")
	require.Equal(t, 0, r.Code, r.Msg+"\n"+r.Stderr)
	require.True(t, r.Restarted, r.Msg)
	c.WaitRolloutComplete(t, time.Minute)
	ds := c.DaemonSet(t)
	prev, mounted := ds.Annotations[rollout.PreviousConfigAnnotation], cluster.MountedConfigMapName(ds)
	require.NotEmpty(t, prev, "the change recorded the config before it")
	require.Equal(t, after, rollout.ContainerImage(ds, "kube-proxy"))
	state, pods := stateOf(t, c), c.PodUIDs(t)

	r = runSync(t, c, "--undo", "--probe-path", "none")
	assert.NotEqual(t, 0, r.Code, r.Msg)
	assert.Contains(t, r.Msg, before)
	assert.Contains(t, r.Msg, after)
	assert.Contains(t, r.Msg, prev)
	assert.Contains(t, r.Msg, mounted)
	assert.Contains(t, r.Msg, "kubectl rollout undo daemonset/"+cluster.Name+" -n "+c.Namespace)
	assertUntouched(t, c, state)
	cluster.AssertNoneReplaced(t, pods, c.PodUIDs(t))
	assert.Equal(t, after, rollout.ContainerImage(c.DaemonSet(t), "kube-proxy"), "the image stays")
}
