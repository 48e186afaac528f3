package rollout

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kube-proxy-sync/kube-proxy-sync/internal/kube/kubefake"
)

// revisionOf is the ControllerRevision the DaemonSet controller records
// for ds's template when it mounts configMap, as its snapshot does: named
// <DaemonSet>-<hash>, labelled with the template's labels and
// controller-revision-hash, the template stored as a replacing patch, and
// controlled by owner (ds itself, for its own revisions).
func revisionOf(t *testing.T, ds, owner *appsv1.DaemonSet, revision int64, configMap string) *appsv1.ControllerRevision {
	t.Helper()
	tmpl := ds.Spec.Template.DeepCopy()
	tmpl.Spec.Volumes = []corev1.Volume{{Name: "kube-proxy", VolumeSource: corev1.VolumeSource{
		ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: configMap}}}}}
	raw, err := runtime.DefaultUnstructuredConverter.ToUnstructured(tmpl)
	require.NoError(t, err)
	raw["$patch"] = "replace"
	data, err := json.Marshal(map[string]any{"spec": map[string]any{"template": raw}})
	require.NoError(t, err)
	hash := fmt.Sprintf("%x", 0x5c4f8d7b0+revision)
	lbls := map[string]string{appsv1.DefaultDaemonSetUniqueLabelKey: hash}
	for k, v := range tmpl.Labels {
		lbls[k] = v
	}
	return &appsv1.ControllerRevision{
		ObjectMeta: metav1.ObjectMeta{Name: owner.Name + "-" + hash, Namespace: owner.Namespace, Labels: lbls,
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(owner, appsv1.SchemeGroupVersion.WithKind("DaemonSet"))}},
		Data:     runtime.RawExtension{Raw: data},
		Revision: revision,
	}
}

// RevisionConfigMaps keeps what `kubectl rollout undo --to-revision` can
// restore, which it finds as kubectl does (controlledHistories): the
// revisions the DaemonSet's selector matches that the DaemonSet controls.
// Each layout has revisions as the DaemonSet controller labels them; those
// of another DaemonSet carrying the same labels (an overlapping selector),
// and those of an earlier DaemonSet of the same name (deleted, its
// revisions not yet collected), are not its own. The DaemonSet's own
// labels differ from its selector in the second layout, and neither is
// kubeadm's k8s-app=kube-proxy: a list by anything but the selector finds
// none of its revisions.
func TestRevisionConfigMapsAreTheDaemonSetsOwn(t *testing.T) {
	daemonSet := func(name string, uid types.UID, labels, selector, template map[string]string) *appsv1.DaemonSet {
		return &appsv1.DaemonSet{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "kube-system", UID: uid, Labels: labels},
			Spec: appsv1.DaemonSetSpec{
				Selector: &metav1.LabelSelector{MatchLabels: selector},
				Template: corev1.PodTemplateSpec{
					ObjectMeta: metav1.ObjectMeta{Labels: template},
					Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "kube-proxy"}}},
				},
			},
		}
	}
	kubeadm := map[string]string{"k8s-app": "kube-proxy"}
	pool := map[string]string{"app": "kubernetes", "role": "proxy", "pool": "pool-a"}
	poolTemplate := map[string]string{"app": "kubernetes", "role": "proxy", "pool": "pool-a", "networking.gardener.cloud/to-apiserver": "allowed"}
	for _, tc := range []struct {
		name string
		ds   *appsv1.DaemonSet
	}{
		{"kubeadm's", daemonSet("kube-proxy", dsUID, kubeadm, kubeadm, kubeadm)},
		{"a DaemonSet per node pool", daemonSet("kube-proxy-pool-a", dsUID,
			map[string]string{"app": "kubernetes", "role": "proxy", "origin": "gardener"}, pool, poolTemplate)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ds := tc.ds
			// the same selector and template labels, another DaemonSet
			other := ds.DeepCopy()
			other.Name, other.UID = ds.Name+"-windows", "7a3e-other"
			// the same name, an earlier incarnation
			earlier := ds.DeepCopy()
			earlier.UID = "2b9f-deleted"
			objs := []runtime.Object{
				revisionOf(t, ds, ds, 1, "kube-proxy"),
				revisionOf(t, ds, ds, 2, "kube-proxy-1111111111"),
				revisionOf(t, ds, ds, 3, "kube-proxy-2222222222"),
				revisionOf(t, other, other, 1, "kube-proxy-3333333333"),
				revisionOf(t, earlier, earlier, 4, "kube-proxy-4444444444"),
			}
			// the precondition: a list by the selector finds them all, so
			// only the controller reference tells them apart
			sel, err := metav1.LabelSelectorAsSelector(ds.Spec.Selector)
			require.NoError(t, err)
			for _, o := range objs {
				cr := o.(*appsv1.ControllerRevision)
				require.True(t, sel.Matches(labels.Set(cr.Labels)), "revision %s carries the labels the DaemonSet controller gives it", cr.Name)
			}
			_, kc := kubefake.New(objs...)
			c := Client{Revisions: kc.ControllerRevisions("kube-system"), Namespace: "kube-system", Name: ds.Name}

			got, err := c.RevisionConfigMaps(context.Background(), ds)
			require.NoError(t, err)
			assert.Equal(t, map[string]bool{"kube-proxy": true, "kube-proxy-1111111111": true, "kube-proxy-2222222222": true}, got,
				"the configmaps its own revisions mount, and no other's")
		})
	}
}

// LastMounting finds the template the fleet ran a ConfigMap with last:
// the highest revision number among those mounting it (a rollback gives
// the revision it goes back to the next number), whatever the order they
// were made in; the next name where no revision mounts the first (the
// record, for the config kubeadm's layout ran); nil where none does, and
// another DaemonSet's revisions never count.
func TestLastMounting(t *testing.T) {
	ds := ownedDS()
	ds.Spec.Template.Labels = map[string]string{"k8s-app": "kube-proxy"} // as the selector
	ds.Spec.Template.Spec.Containers = []corev1.Container{{Name: "kube-proxy"}}
	ran := func(revision int64, configMap, image string) *appsv1.ControllerRevision {
		with := ds.DeepCopy()
		with.Spec.Template.Spec.Containers[0].Image = image
		return revisionOf(t, with, ds, revision, configMap)
	}
	other := ds.DeepCopy()
	other.Name, other.UID = "kube-proxy-windows", "7a3e-other"
	objs := []runtime.Object{
		ran(1, "kube-proxy", "kube-proxy:v1.33.6"),
		ran(2, "kube-proxy-1111111111", "kube-proxy:v1.33.6"),
		ran(6, "kube-proxy-1111111111", "kube-proxy:v1.34.4"), // rolled back to, after 3..5
		ran(4, "kube-proxy-1111111111", "kube-proxy:v1.33.7"),
		ran(5, "kube-proxy-2222222222", "kube-proxy:v1.34.4"),
		revisionOf(t, other, other, 7, "kube-proxy-3333333333"),
	}
	_, kc := kubefake.New(objs...)
	c := Client{Revisions: kc.ControllerRevisions("kube-system"), Namespace: "kube-system", Name: ds.Name}
	for _, tc := range []struct {
		name string
		cms  []string
		want *Revision
	}{
		{"the newest number", []string{"kube-proxy-1111111111", "kube-proxy"}, &Revision{Number: 6, Image: "kube-proxy:v1.34.4"}},
		{"one revision", []string{"kube-proxy-2222222222"}, &Revision{Number: 5, Image: "kube-proxy:v1.34.4"}},
		{"no revision of the first: the next", []string{"kube-proxy-4444444444", "kube-proxy"}, &Revision{Number: 1, Image: "kube-proxy:v1.33.6"}},
		{"none", []string{"kube-proxy-4444444444"}, nil},
		{"another daemonset's", []string{"kube-proxy-3333333333"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, err := c.History(context.Background(), ds)
			got := h.LastMounting("kube-proxy", "kube-proxy", tc.cms...)
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
}
