package pools

import (
	"context"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"

	"github.com/kube-proxy-sync/kube-proxy-sync/internal/kube/kubefake"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/rollout"
)

func baseDaemonSet() *appsv1.DaemonSet {
	ds := &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: "kube-proxy", Namespace: "kube-system", UID: "base"},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"k8s-app": "kube-proxy"}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"k8s-app": "kube-proxy"}},
				Spec: corev1.PodSpec{
					NodeSelector: map[string]string{"kubernetes.io/os": "linux"},
					Containers:   []corev1.Container{{Name: "kube-proxy", VolumeMounts: []corev1.VolumeMount{{Name: "kube-proxy", MountPath: "/var/lib/kube-proxy"}}}},
					Volumes: []corev1.Volume{{Name: "kube-proxy", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
						LocalObjectReference: corev1.LocalObjectReference{Name: "kube-proxy-0123456789"}}}}},
				},
			},
		},
	}
	rollout.KeepOffPools(&ds.Spec.Template.Spec)
	return ds
}

func TestPoolDaemonSetRunsOnItsNodesWithItsOwnConfig(t *testing.T) {
	base := baseDaemonSet()
	ds := PoolDaemonSet(base, "rhel8", "kube-proxy")
	assert.Equal(t, map[string]string{"k8s-app": "rhel8"}, ds.Spec.Selector.MatchLabels)
	assert.Equal(t, "rhel8", ds.Spec.Template.Labels["k8s-app"])
	assert.Equal(t, "rhel8", ds.Spec.Template.Spec.Volumes[0].ConfigMap.Name)
	assert.Equal(t, "kube-proxy", ds.Labels[PoolOfLabel])
	assert.False(t, rollout.KeepsOffPools(&ds.Spec.Template.Spec), "on its own pool's nodes")
	assert.True(t, rollout.KeepsOffPools(&base.Spec.Template.Spec), "the base untouched")
	assert.Equal(t, "kube-proxy-0123456789", base.Spec.Template.Spec.Volumes[0].ConfigMap.Name)
}

// A node whose pool kube-proxy is not Ready in time goes back: its label
// as it was, so kubeadm's DaemonSet puts its kube-proxy back there.
func TestSplitPutsANodeBackWhenItsPoolPodIsNotReadyInTime(t *testing.T) {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: map[string]string{"kubernetes.io/os": "linux", "rhel": "8"}}}
	copyCM := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "kube-proxy-0123456789", Namespace: "kube-system"}, Data: map[string]string{"config.conf": "mode: iptables\n"}}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "kube-proxy-a", Namespace: "kube-system", UID: "pod-a",
		OwnerReferences: []metav1.OwnerReference{{Kind: "DaemonSet", Name: "kube-proxy", UID: "base", Controller: ptr.To(true)}}},
		Spec:   corev1.PodSpec{NodeName: "n1"},
		Status: corev1.PodStatus{Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}}
	c, api := kubefake.New(baseDaemonSet(), n, copyCM, pod)
	m := Mover{Kube: api, Clock: clock.RealClock{}, Log: logrus.NewEntry(logrus.New()), Namespace: "kube-system",
		Base: "kube-proxy", Record: "kube-proxy", Container: "kube-proxy", NodeTimeout: 100 * time.Millisecond}
	out, err := m.Split(context.Background(), "rhel8", labels.SelectorFromSet(labels.Set{"rhel": "8"}))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "node n1: no Ready kube-proxy of daemonset rhel8 alone on node n1")
	assert.Contains(t, err.Error(), "its label is back")
	assert.Equal(t, []string{"n1"}, out.Nodes)
	assert.Empty(t, out.Moved)
	got, err := c.CoreV1().Nodes().Get(context.Background(), "n1", metav1.GetOptions{})
	require.NoError(t, err)
	assert.NotContains(t, got.Labels, rollout.PoolLabel)
	rec, err := c.CoreV1().ConfigMaps("kube-system").Get(context.Background(), "rhel8", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, copyCM.Data, rec.Data, "the pool's config: the one its nodes run")
}
