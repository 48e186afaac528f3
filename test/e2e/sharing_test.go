//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/kube-proxy-sync/kube-proxy-sync/test/e2e/cluster"
)

// Another DaemonSet's pods on kubeadm's record, after that DaemonSet's
// template has moved off it: an OnDelete DaemonSet keeps the pods of its
// older template, which still mount the record and would read a write at
// their next restart. The record is not written while one of them is
// there, and is once the last is gone.
func TestRecordNotWrittenUnderAnotherDaemonSetsOldPods(t *testing.T) {
	c := cluster.Connect(t)
	c.Reset(t)
	t.Cleanup(func() { c.Reset(t) })
	name := cluster.Name + "-pool"
	node := c.DaemonSetPods(t)[0].Spec.NodeName
	old := onDeleteKubeProxy(t, c, name, node)
	moveOff(t, c, name)

	before := c.ConfigMap(t)
	r := change(t, c, "10.91.0.0/16")
	after := c.ConfigMap(t)
	assert.False(t, r.RecordChanged, r.Msg)
	assert.Equal(t, before.ResourceVersion, after.ResourceVersion, "the record is not written while pod %s/%s mounts it", node, old.Name)
	assert.Equal(t, before.Data, after.Data)
	assert.Contains(t, strings.Join(r.Warnings, "\n"), "pod "+node+"/"+old.Name)
	still, err := c.Client.CoreV1().Pods(c.Namespace).Get(context.Background(), old.Name, metav1.GetOptions{})
	require.NoError(t, err, "the old pod of daemonset %s is there all along", name)
	assert.Equal(t, old.UID, still.UID)

	// the last old pod gone, the next run writes the record
	deletePod(t, c, old)
	r = runSync(t, c, "--set", "clusterCIDR=10.91.0.0/16", "--probe-path", "none")
	require.Equal(t, 0, r.Code, r.Msg+"\n"+r.Stderr)
	assert.True(t, r.RecordChanged, r.Msg)
	assert.NotEqual(t, before.ResourceVersion, c.ConfigMap(t).ResourceVersion)
	assert.Contains(t, c.ConfigMap(t).Data["config.conf"], "10.91.0.0/16")
}

// onDeleteKubeProxy creates a second kube-proxy DaemonSet of the namespace
// (a pool's), updated OnDelete, whose template mounts the record, on node
// only; it returns its pod once the pod runs, and deletes the DaemonSet
// when the test ends.
func onDeleteKubeProxy(t *testing.T, c *cluster.Cluster, name, node string) *corev1.Pod {
	t.Helper()
	ds := c.SeedDaemonSet(t)
	ds.Name = name
	ds.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"k8s-app": name}}
	ds.Spec.Template.Labels = map[string]string{"k8s-app": name}
	ds.Spec.Template.Spec.NodeSelector = map[string]string{"kubernetes.io/hostname": node}
	ds.Spec.UpdateStrategy = appsv1.DaemonSetUpdateStrategy{Type: appsv1.OnDeleteDaemonSetStrategyType}
	dss := c.Client.AppsV1().DaemonSets(c.Namespace)
	made, err := dss.Create(context.Background(), ds, metav1.CreateOptions{})
	require.NoError(t, err)
	t.Cleanup(func() {
		bg := metav1.DeletePropagationBackground
		if err := dss.Delete(context.Background(), name, metav1.DeleteOptions{PropagationPolicy: &bg}); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("delete daemonset %s: %v", name, err)
		}
	})
	var pod *corev1.Pod
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		pods, err := c.Client.CoreV1().Pods(c.Namespace).List(ctx, metav1.ListOptions{LabelSelector: "k8s-app=" + name})
		if err != nil {
			return false, nil
		}
		for i := range pods.Items {
			if p := &pods.Items[i]; metav1.IsControlledBy(p, made) && p.DeletionTimestamp == nil && cluster.PodReady(p) {
				pod = p
				return true, nil
			}
		}
		return false, nil
	})
	require.NoError(t, err, "the pod of daemonset %s on node %s Ready", name, node)
	require.Equal(t, cluster.Name, kubeProxyConfigOf(pod), "the pod of daemonset %s mounts the record", name)
	return pod
}

// moveOff points daemonset name's template at a ConfigMap of its own
// (made here, deleted when the test ends) and waits until the DaemonSet
// controller has seen it: OnDelete, its pod stays as it is.
func moveOff(t *testing.T, c *cluster.Cluster, name string) {
	t.Helper()
	cms := c.Client.CoreV1().ConfigMaps(c.Namespace)
	own := c.SeedConfigMap(t)
	own.Name = name + "-config"
	_, err := cms.Create(context.Background(), own, metav1.CreateOptions{})
	require.NoError(t, err)
	t.Cleanup(func() {
		if err := cms.Delete(context.Background(), own.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("delete configmap %s: %v", own.Name, err)
		}
	})
	dss := c.Client.AppsV1().DaemonSets(c.Namespace)
	ds, err := dss.Get(context.Background(), name, metav1.GetOptions{})
	require.NoError(t, err)
	i := volumeOf(ds.Spec.Template.Spec.Volumes, cluster.Name)
	require.GreaterOrEqual(t, i, 0, "daemonset %s mounts the record", name)
	patch := fmt.Sprintf(`[{"op":"test","path":"/spec/template/spec/volumes/%d/configMap/name","value":%q},`+
		`{"op":"replace","path":"/spec/template/spec/volumes/%d/configMap/name","value":%q}]`, i, cluster.Name, i, own.Name)
	moved, err := dss.Patch(context.Background(), name, types.JSONPatchType, []byte(patch), metav1.PatchOptions{})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		ds, err := dss.Get(ctx, name, metav1.GetOptions{})
		return err == nil && ds.Status.ObservedGeneration >= moved.Generation, nil
	})
	require.NoError(t, err, "the DaemonSet controller sees daemonset %s's template moved off the record", name)
}

// deletePod deletes pod and waits until it is gone.
func deletePod(t *testing.T, c *cluster.Cluster, pod *corev1.Pod) {
	t.Helper()
	pods := c.Client.CoreV1().Pods(c.Namespace)
	require.NoError(t, pods.Delete(context.Background(), pod.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &pod.UID}}))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		p, err := pods.Get(ctx, pod.Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err) || (err == nil && p.UID != pod.UID), nil
	})
	require.NoError(t, err, "pod %s gone", pod.Name)
}

// kubeProxyConfigOf is the name of the ConfigMap pod mounts as kube-proxy's
// config (the volume named kube-proxy).
func kubeProxyConfigOf(pod *corev1.Pod) string {
	for _, v := range pod.Spec.Volumes {
		if v.Name == cluster.Name && v.ConfigMap != nil {
			return v.ConfigMap.Name
		}
	}
	return ""
}

// volumeOf is the index of the volume mounting configmap name, or -1.
func volumeOf(volumes []corev1.Volume, name string) int {
	for i, v := range volumes {
		if v.ConfigMap != nil && v.ConfigMap.Name == name {
			return i
		}
	}
	return -1
}
