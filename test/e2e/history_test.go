//go:build e2e

package e2e

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kube-proxy-sync/kube-proxy-sync/test/e2e/cluster"
)

// The copies beyond --config-history are deleted by the run after a
// rollout: the newest are kept, and never the one the template mounts nor
// the one an undo restores; --undo still finds its copy.
func TestConfigHistoryIsCollected(t *testing.T) {
	c := cluster.Connect(t)
	c.Reset(t)
	t.Cleanup(func() { c.Reset(t) })
	var names []string
	for i := range 5 {
		r := runSync(t, c, "--set", fmt.Sprintf("clusterCIDR=10.%d.0.0/16", 40+i), "--probe-path", "none", "--config-history", "2")
		require.Equal(t, 0, r.Code, r.Msg+"\n"+r.Stderr)
		require.True(t, r.Restarted, r.Msg)
		names = append(names, r.ConfigMapName)
	}
	copies := c.Copies(t)
	var have []string
	for name := range copies {
		have = append(have, name)
	}
	assert.ElementsMatch(t, names[3:], have, "the two newest copies, the mounted one among them; older ones deleted")
	assert.Equal(t, names[4], cluster.MountedConfigMapName(c.DaemonSet(t)))

	r := runSync(t, c, "--undo", "--probe-path", "none")
	require.Equal(t, 0, r.Code, r.Msg+"\n"+r.Stderr)
	assert.Equal(t, names[3], cluster.MountedConfigMapName(c.DaemonSet(t)), "--undo restores the copy before")
}
