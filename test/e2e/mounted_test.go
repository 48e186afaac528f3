//go:build e2e

package e2e

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kube-proxy-sync/kube-proxy-sync/test/e2e/cluster"
)

// Every run checks the copy the template mounts, which every kube-proxy
// that starts from now on (a reboot, an eviction, a new node) reads,
// also when it has nothing else to do.

// The copy the template mounts, deleted by another hand (a prune, an
// operator), and a plain rerun with the same values: it makes the copy
// again from the record, which holds its data, says so, and replaces no
// pod.
func TestPlainRerunMakesTheMountedCopyAgain(t *testing.T) {
	c := cluster.Connect(t)
	c.Reset(t)
	t.Cleanup(func() { c.Reset(t) })
	r := change(t, c, "10.76.0.0/16")
	cp := assertMountsCopy(t, c)
	require.Equal(t, r.ConfigMapName, cp.Name)
	require.NoError(t, c.Client.CoreV1().ConfigMaps(c.Namespace).Delete(context.Background(), cp.Name, metav1.DeleteOptions{}))
	before := c.PodUIDs(t)

	r = runSync(t, c, "--set", "clusterCIDR=10.76.0.0/16", "--probe-path", "none")
	require.Equal(t, 0, r.Code, r.Msg+"\n"+r.Stderr)
	assert.True(t, r.Changed, "a copy made again is a write: %s", r.Msg)
	assert.False(t, r.Restarted, r.Msg)
	assert.Contains(t, strings.Join(r.Warnings, "\n"), "configmap "+c.Namespace+"/"+cp.Name+", which daemonset "+c.Namespace+"/"+cluster.Name+" mounts, was gone")
	again := assertMountsCopy(t, c)
	assert.Equal(t, cp.Name, again.Name)
	assert.Equal(t, cp.Data, again.Data, "made again with the data its name says")
	assert.Equal(t, cp.Labels, again.Labels)
	cluster.AssertNoneReplaced(t, before, c.PodUIDs(t))

	r = runSync(t, c, "--set", "clusterCIDR=10.76.0.0/16", "--probe-path", "none")
	require.Equal(t, 0, r.Code, r.Msg)
	assert.False(t, r.Changed, "then in sync: %s", r.Msg)
}

// The copy the template mounts, deleted, after a change with no effect
// was written to the record (ipvs.* in iptables mode): the copy's data is
// nowhere else, and every run, check mode included, fails naming it,
// before any write.
func TestMountedCopyWhoseDataIsNowhereFailsTheRun(t *testing.T) {
	c := cluster.Connect(t)
	c.Reset(t)
	t.Cleanup(func() { c.Reset(t) })
	r := change(t, c, "10.77.0.0/16")
	mounted := r.ConfigMapName
	values := []string{"--set", "clusterCIDR=10.77.0.0/16", "--set", "ipvs.scheduler=lc", "--probe-path", "none"}
	r = runSync(t, c, values...)
	require.Equal(t, 0, r.Code, r.Msg+"\n"+r.Stderr)
	require.True(t, r.RecordChanged, "the no-effect change is written to the record: %s", r.Msg)
	require.False(t, r.Restarted)
	require.Equal(t, mounted, cluster.MountedConfigMapName(c.DaemonSet(t)))
	require.NoError(t, c.Client.CoreV1().ConfigMaps(c.Namespace).Delete(context.Background(), mounted, metav1.DeleteOptions{}))
	state, before := stateOf(t, c), c.PodUIDs(t)

	for _, args := range [][]string{append([]string{"--check"}, values...), values} {
		r = runSync(t, c, args...)
		assert.Equal(t, 1, r.Code, "%v: %s", args, r.Msg)
		assert.Contains(t, r.Msg, "daemonset "+c.Namespace+"/"+cluster.Name+" mounts configmap "+c.Namespace+"/"+mounted+", which is gone (", "%v", args)
		assert.Contains(t, r.Msg, "kubectl rollout undo daemonset/"+cluster.Name, "%v", args)
		assert.Contains(t, r.Msg, "nothing was changed", "%v", args)
		assert.False(t, r.Changed, "%v", args)
		assertUntouched(t, c, state)
		_, err := c.Client.CoreV1().ConfigMaps(c.Namespace).Get(context.Background(), mounted, metav1.GetOptions{})
		assert.True(t, apierrors.IsNotFound(err), "%v: not made with data that is not its own: %v", args, err)
	}
	cluster.AssertNoneReplaced(t, before, c.PodUIDs(t))
}
