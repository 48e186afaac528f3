//go:build e2e

package e2e

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kube-proxy-sync/kube-proxy-sync/internal/rollout"
	"github.com/kube-proxy-sync/kube-proxy-sync/test/e2e/cluster"
)

// kwok's nodes have loopback addresses, which the API server refuses to
// proxy to: --verify-health auto reports every node unreachable before the
// restart and restarts without checking them; required refuses to restart.
// (The check itself is tested against an httptest node proxy in
// internal/verify, and on real nodes on kind.)
func TestVerifyHealthOnKwok(t *testing.T) {
	c := cluster.Connect(t)
	c.Reset(t)
	require.Equal(t, 0, runSync(t, c, "--probe-path", "none").Code) // adopt
	before := c.PodUIDs(t)

	t.Run("required: nothing restarted", func(t *testing.T) {
		restartedAt := c.DaemonSet(t).Spec.Template.Annotations[rollout.RestartedAtAnnotation]
		r := runSync(t, c, "--server", "https://10.96.0.9:6443", "--probe-path", "none", "--verify-health", "required")
		require.Equal(t, 1, r.Code, r.Msg+"\n"+r.Stderr)
		assert.Contains(t, r.Msg, "cannot be reached through the API server's node proxy")
		assert.Contains(t, r.Msg, "nothing was restarted")
		assert.False(t, r.facts().Restarted)
		cluster.AssertNoneReplaced(t, before, c.PodUIDs(t))
		assert.Equal(t, restartedAt, c.DaemonSet(t).Spec.Template.Annotations[rollout.RestartedAtAnnotation])
	})
	t.Run("auto: restarted, nodes reported unreachable", func(t *testing.T) {
		r := runSync(t, c, "--server", "https://10.96.0.9:6443", "--probe-path", "none", "--verify-health", "auto", "--timeout", "2m")
		require.Equal(t, 0, r.Code, r.Msg+"\n"+r.Stderr)
		f := r.facts()
		assert.True(t, f.Restarted)
		require.NotNil(t, f.Connectivity)
		assert.Equal(t, "auto", f.Connectivity.Mode)
		assert.Len(t, f.Connectivity.Unreachable, len(before))
		assert.Equal(t, 0, f.Connectivity.Checked)
		assert.Equal(t, int64(len(before)), f.Connectivity.Requests, "one GET per node, the baseline")
		cluster.AssertAllReplaced(t, before, c.PodUIDs(t))
	})
}
