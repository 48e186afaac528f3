//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kube-proxy-sync/kube-proxy-sync/test/e2e/cluster"
)

// The copies beyond --config-history are deleted by the run after a
// rollout: the newest are kept, never the one the template mounts nor the
// one an undo restores, and never one that a ControllerRevision of the
// DaemonSet mounts (`kubectl rollout undo --to-revision` restores it). With
// the DaemonSet's revisionHistoryLimit at 1 the DaemonSet controller
// prunes the older revisions, and the copies they mounted go; --undo still
// finds its copy.
func TestConfigHistoryIsCollected(t *testing.T) {
	c := cluster.Connect(t)
	c.Reset(t)
	t.Cleanup(func() { c.Reset(t) })
	_, err := c.Client.AppsV1().DaemonSets(c.Namespace).Patch(context.Background(), cluster.Name, types.StrategicMergePatchType,
		[]byte(`{"spec":{"revisionHistoryLimit":1}}`), metav1.PatchOptions{})
	require.NoError(t, err)
	var names []string
	for i := range 5 {
		r := runSync(t, c, "--set", fmt.Sprintf("clusterCIDR=10.%d.0.0/16", 40+i), "--probe-path", "none", "--config-history", "2")
		require.Equal(t, 0, r.Code, r.Msg+"\n"+r.Stderr)
		require.True(t, r.Restarted, r.Msg)
		names = append(names, r.ConfigMapName)
	}
	copies := c.Copies(t)
	for _, name := range names[3:] {
		assert.Contains(t, copies, name, "the two newest copies, the mounted one among them")
	}
	for _, name := range names[:2] {
		assert.NotContains(t, copies, name, "beyond the history, and their revisions pruned by the DaemonSet controller")
	}
	for cm, revision := range cluster.RevisionConfigMaps(t, c.Client, c.DaemonSet(t)) {
		if _, ok := copies[cm]; !ok && cm != cluster.Name {
			t.Errorf("configmap %s, which revision %d of the DaemonSet mounts, was deleted", cm, revision)
		}
	}
	assert.Equal(t, names[4], cluster.MountedConfigMapName(c.DaemonSet(t)))

	r := runSync(t, c, "--undo", "--probe-path", "none")
	require.Equal(t, 0, r.Code, r.Msg+"\n"+r.Stderr)
	assert.Equal(t, names[3], cluster.MountedConfigMapName(c.DaemonSet(t)), "--undo restores the copy before")
}
