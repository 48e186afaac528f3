//go:build e2e

package cluster_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kube-proxy-sync/kube-proxy-sync/internal/configmap"
	"github.com/kube-proxy-sync/kube-proxy-sync/test/e2e/cluster"
)

// TestResetGivesOneReadyPodPerNode checks the harness itself: after Reset
// every Linux node runs exactly one Ready kube-proxy pod of the seed spec.
func TestResetGivesOneReadyPodPerNode(t *testing.T) {
	c := cluster.Connect(t)
	c.Reset(t)

	ds := c.DaemonSet(t)
	assert.True(t, cluster.RolloutComplete(ds), "rollout complete after Reset")
	assert.Equal(t, ds.Status.DesiredNumberScheduled, ds.Status.NumberReady, "Ready pods")
	assert.Equal(t, c.SeedDaemonSet(t).Spec.Template.Spec.Containers[0].Image, ds.Spec.Template.Spec.Containers[0].Image)

	nodes, err := c.Client.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{LabelSelector: "kubernetes.io/os=linux"})
	require.NoError(t, err)
	require.NotEmpty(t, nodes.Items, "no Linux nodes")
	want := make([]string, 0, len(nodes.Items))
	for _, n := range nodes.Items {
		want = append(want, n.Name)
	}
	uids := c.PodUIDs(t)
	got := make([]string, 0, len(uids))
	for n := range uids {
		got = append(got, n)
	}
	assert.ElementsMatch(t, want, got, "one kube-proxy pod per Linux node")
	assert.EqualValues(t, len(want), ds.Status.DesiredNumberScheduled)
}

// TestResetUndoesChanges changes the seed objects the way kube-proxy-sync
// and `kubectl rollout restart` do (a copy of the ConfigMap the template
// is pointed at, among them), and checks that Reset restores them, deletes
// the copy and replaces the pods, and that a second Reset replaces nothing.
func TestResetUndoesChanges(t *testing.T) {
	c := cluster.Connect(t)
	c.Reset(t)
	ctx := context.Background()
	before := c.PodUIDs(t)

	cm := c.ConfigMap(t)
	cm.Data["config.conf"] += "\n# changed by a test\n"
	_, err := c.Client.CoreV1().ConfigMaps(c.Namespace).Update(ctx, cm, metav1.UpdateOptions{})
	require.NoError(t, err)
	cp := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: cluster.Name + "-0123456789", Namespace: c.Namespace,
			Labels: map[string]string{configmap.CopyOfLabel: cluster.Name}},
		Data: cm.Data,
	}
	_, err = c.Client.CoreV1().ConfigMaps(c.Namespace).Create(ctx, cp, metav1.CreateOptions{})
	require.NoError(t, err)
	patch := `{"metadata":{"annotations":{"kube-proxy-sync.io/config-hash":"x"}},` +
		`"spec":{"template":{"metadata":{"annotations":{"kubectl.kubernetes.io/restartedAt":"` +
		time.Now().Format(time.RFC3339) + `"}},"spec":{"volumes":[{"name":"kube-proxy","configMap":{"name":"` + cp.Name + `"}}]}}}}`
	_, err = c.Client.AppsV1().DaemonSets(c.Namespace).Patch(ctx, cluster.Name, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{})
	require.NoError(t, err)

	require.Equal(t, cp.Name, cluster.MountedConfigMapName(c.DaemonSet(t)))

	c.Reset(t)
	assert.Equal(t, c.SeedConfigMap(t).Data, c.ConfigMap(t).Data, "configmap data after Reset")
	assert.Empty(t, c.Copies(t), "the copies are gone")
	ds := c.DaemonSet(t)
	assert.Equal(t, cluster.Name, cluster.MountedConfigMapName(ds), "the template mounts the ConfigMap again")
	assert.NotContains(t, ds.Annotations, "kube-proxy-sync.io/config-hash")
	assert.NotContains(t, ds.Spec.Template.Annotations, "kubectl.kubernetes.io/restartedAt")
	afterReset := c.PodUIDs(t)
	cluster.AssertAllReplaced(t, before, afterReset)

	c.Reset(t)
	cluster.AssertNoneReplaced(t, afterReset, c.PodUIDs(t))
}
