package rollout

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kube-proxy-sync/kube-proxy-sync/internal/kube/kubefake"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/nodes"
)

// mounting is p mounting the ConfigMaps names.
func mounting(p *corev1.Pod, names ...string) *corev1.Pod {
	for _, n := range names {
		p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: n, VolumeSource: corev1.VolumeSource{
			ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: n}}}})
	}
	return p
}

// The fleet knows which ConfigMaps its pods mount, as it last saw them:
// what the record write after a rollout needs, without listing the pods.
func TestFleetMounts(t *testing.T) {
	old := mounting(pod("c1", "c", "1", false), "kube-proxy")
	f := newFleet(map[string]string{"c": nodes.ToBeDeleted},
		mounting(pod("a2", "a", "2", true), "kube-proxy-0123456789"), mounting(pod("b2", "b", "2", true), "kube-proxy-0123456789", "extra"), old)
	by, current := f.MountedBy("kube-proxy")
	assert.Equal(t, []string{"c/kube-proxy-c1"}, by)
	assert.True(t, current)
	assert.Equal(t, map[string]bool{"kube-proxy": true, "kube-proxy-0123456789": true, "extra": true}, f.ConfigMaps())
	assert.Equal(t, int64(2), f.Newest())

	old.DeletionTimestamp = &metav1.Time{Time: time.Unix(0, 0)}
	f.upsert(old)
	by, current = f.MountedBy("kube-proxy")
	assert.Equal(t, []string{"c/kube-proxy-c1"}, by)
	assert.False(t, current, "a terminating pod may be gone by now")

	f.remove(old.UID)
	by, current = f.MountedBy("kube-proxy")
	assert.Empty(t, by)
	assert.True(t, current)
	assert.Equal(t, map[string]bool{"kube-proxy-0123456789": true, "extra": true}, f.ConfigMaps())
}

// What mounts the config and its copies is read from the cluster, whoever
// wrote it, and each source once: the DaemonSet's pods, another DaemonSet
// on the same config (its template, pods and revisions) and the
// DaemonSet's own revisions.
func TestUsesReadsWhatMountsTheConfigOnce(t *testing.T) {
	ours := ownedDS()
	ours.Spec.Template.Labels = map[string]string{"k8s-app": "kube-proxy"}
	windows := &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: "kube-proxy-windows", Namespace: "kube-system", UID: "7a3e-windows"},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"k8s-app": "kube-proxy-windows"}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"k8s-app": "kube-proxy-windows"}},
				Spec: corev1.PodSpec{Volumes: []corev1.Volume{{Name: "kube-proxy", VolumeSource: corev1.VolumeSource{
					ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "kube-proxy"}}}}}},
			},
		},
	}
	windowsPod := mounting(pod("w1", "w", "1", true), "kube-proxy", "kube-proxy-bbbbbbbbbb", "unrelated")
	windowsPod.Namespace, windowsPod.Labels["k8s-app"] = "kube-system", "kube-proxy-windows"
	windowsPod.OwnerReferences = []metav1.OwnerReference{*metav1.NewControllerRef(windows, appsv1.SchemeGroupVersion.WithKind("DaemonSet"))}
	cs, kc := kubefake.New(ours, windows, windowsPod,
		listed(mounting(pod("a1", "a", "1", true), "kube-proxy-aaaaaaaaaa")),
		revisionOf(t, ours, ours, 1, "kube-proxy-cccccccccc"),
		revisionOf(t, windows, windows, 1, "kube-proxy-dddddddddd"))
	c := Client{DaemonSets: kc.DaemonSets("kube-system"), Revisions: kc.ControllerRevisions("kube-system"), Pods: kc.Pods("kube-system"),
		Namespace: "kube-system", Name: "kube-proxy", Log: logrus.NewEntry(logrus.New())}
	ofConfig := func(name string) bool { return name == "kube-proxy" || strings.HasPrefix(name, "kube-proxy-") }
	u := c.Uses(ours, nil, ofConfig)

	others, err := u.OthersMounting(context.Background(), "kube-proxy")
	require.NoError(t, err)
	assert.Equal(t, []string{"daemonset kube-proxy-windows", "pod w/kube-proxy-w1"}, others)
	inUse, err := u.InUse(context.Background())
	require.NoError(t, err)
	assert.Equal(t, map[string]bool{
		"kube-proxy-aaaaaaaaaa": true, // our pod
		"kube-proxy":            true, // the other's template and pod
		"kube-proxy-bbbbbbbbbb": true, // the other's pod
		"kube-proxy-dddddddddd": true, // the other's revision
		"kube-proxy-cccccccccc": true, // our revision
	}, inUse, "not what the other's pod mounts besides the config")

	lists := map[string]int{}
	for _, a := range cs.Actions() {
		if a.GetVerb() == "list" {
			lists[a.GetResource().Resource]++
		}
	}
	assert.Equal(t, map[string]int{"daemonsets": 1, "pods": 2, "controllerrevisions": 2}, lists,
		"the daemonsets once; the pods and revisions of each DaemonSet once")
}

// Another DaemonSet whose template has moved off the config (an OnDelete
// DaemonSet keeps its old pods until they are deleted) shares it while
// any of its pods still mounts it: those pods run it, and read a write at
// their next restart. One whose template and pods mount none of it does
// not.
func TestSharingCountsPodsOfATemplateMovedOff(t *testing.T) {
	other := func(name string, volumes ...string) *appsv1.DaemonSet {
		ds := &appsv1.DaemonSet{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "kube-system", UID: types.UID("7a3e-" + name)},
			Spec: appsv1.DaemonSetSpec{
				Selector:       &metav1.LabelSelector{MatchLabels: map[string]string{"k8s-app": name}},
				UpdateStrategy: appsv1.DaemonSetUpdateStrategy{Type: appsv1.OnDeleteDaemonSetStrategyType},
				Template:       corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"k8s-app": name}}},
			},
		}
		ds.Spec.Template.Spec.Volumes = mounting(&corev1.Pod{}, volumes...).Spec.Volumes
		return ds
	}
	podOf := func(ds *appsv1.DaemonSet, uid, node string, volumes ...string) *corev1.Pod {
		p := mounting(pod(uid, node, "1", true), volumes...)
		p.Namespace, p.Labels["k8s-app"] = "kube-system", ds.Name
		p.OwnerReferences = []metav1.OwnerReference{*metav1.NewControllerRef(ds, appsv1.SchemeGroupVersion.WithKind("DaemonSet"))}
		return p
	}
	ours := ownedDS()
	pool := other("kube-proxy-pool", "kube-proxy-pool-config") // its template moved off the record
	cni := other("cni", "cni-config")
	_, kc := kubefake.New(ours, pool, cni,
		podOf(pool, "p1", "p", "kube-proxy"),             // an old pod: still the record
		podOf(pool, "p2", "q", "kube-proxy-pool-config"), // a new one
		podOf(cni, "c1", "p", "cni-config"))
	c := Client{DaemonSets: kc.DaemonSets("kube-system"), Revisions: kc.ControllerRevisions("kube-system"), Pods: kc.Pods("kube-system"),
		Namespace: "kube-system", Name: "kube-proxy", Log: logrus.NewEntry(logrus.New())}
	ofConfig := func(name string) bool {
		return name == "kube-proxy" || strings.HasPrefix(name, "kube-proxy-") && name != "kube-proxy-pool-config"
	}

	sharing, err := c.Sharing(context.Background(), ours, ofConfig)
	require.NoError(t, err)
	require.Len(t, sharing, 1, "the pool's old pod mounts the record; the cni DaemonSet mounts none of it")
	assert.Equal(t, "kube-proxy-pool", sharing[0].DaemonSet)
	assert.Empty(t, sharing[0].Template)
	assert.Equal(t, map[string][]string{"kube-proxy": {"p/kube-proxy-p1"}}, sharing[0].Pods)

	others, err := c.Uses(ours, nil, ofConfig).OthersMounting(context.Background(), "kube-proxy")
	require.NoError(t, err)
	assert.Equal(t, []string{"pod p/kube-proxy-p1"}, others, "the record is not written while the pool's old pod mounts it")
}
