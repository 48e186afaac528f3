//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/kube-proxy-sync/kube-proxy-sync/test/e2e/cluster"
)

// The copies beyond --config-history are deleted by the run after a
// rollout: the newest are kept, never the one the template mounts nor the
// one an undo restores, and never one that a ControllerRevision of the
// DaemonSet mounts (`kubectl rollout undo --to-revision` restores it). With
// the DaemonSet's revisionHistoryLimit at 1 the DaemonSet controller
// prunes the older revisions, and the copies they mounted go; --undo still
// finds its copy. The first copy goes although a revision of another
// DaemonSet mounts it, one with kube-proxy's selector whose revisions the
// DaemonSet controller labels as it labels kube-proxy's: only the
// revisions kube-proxy's DaemonSet controls keep a copy.
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
		if i == 0 {
			otherDaemonSetMounting(t, c, names[0])
		}
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

// otherDaemonSetMounting creates a DaemonSet beside kube-proxy with its
// selector and pod labels (an overlapping selector) whose template mounts
// the ConfigMap cm and which runs on no node, and waits until the
// DaemonSet controller has recorded its revision, which kube-proxy's
// selector matches as it matches kube-proxy's own revisions. Deleted at
// the end of the test, its revisions with it.
func otherDaemonSetMounting(t *testing.T, c *cluster.Cluster, cm string) {
	t.Helper()
	ctx := context.Background()
	other := c.SeedDaemonSet(t)
	other.Name = cluster.Name + "-other"
	other.Spec.Template.Spec.NodeSelector = map[string]string{"kube-proxy-sync.test/no-node": "true"}
	mounts := false
	for i := range other.Spec.Template.Spec.Volumes {
		if v := &other.Spec.Template.Spec.Volumes[i]; v.ConfigMap != nil && v.ConfigMap.Name == cluster.Name {
			v.ConfigMap.Name, mounts = cm, true
		}
	}
	require.True(t, mounts, "the seed DaemonSet mounts configmap %s", cluster.Name)
	dss := c.Client.AppsV1().DaemonSets(c.Namespace)
	other, err := dss.Create(ctx, other, metav1.CreateOptions{})
	require.NoError(t, err)
	t.Cleanup(func() {
		bg := metav1.DeletePropagationBackground
		if err := dss.Delete(context.Background(), other.Name, metav1.DeleteOptions{PropagationPolicy: &bg}); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("delete daemonset %s: %v", other.Name, err)
		}
	})
	sel, err := metav1.LabelSelectorAsSelector(c.DaemonSet(t).Spec.Selector)
	require.NoError(t, err)
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		list, err := c.Client.AppsV1().ControllerRevisions(c.Namespace).List(ctx, metav1.ListOptions{LabelSelector: sel.String()})
		if err != nil {
			return false, err
		}
		for i := range list.Items {
			if metav1.IsControlledBy(&list.Items[i], other) {
				return true, nil
			}
		}
		return false, nil
	})
	require.NoError(t, err, "no revision of daemonset %s that kube-proxy's selector %s matches", other.Name, sel)
	assert.Contains(t, cluster.RevisionConfigMaps(t, c.Client, other), cm, "a revision of daemonset %s mounts configmap %s", other.Name, cm)
}
