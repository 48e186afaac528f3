package rollout

import (
	"context"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kube-proxy-sync/kube-proxy-sync/internal/kube/kubefake"
)

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
			got, err := c.LastMounting(context.Background(), ds, "kube-proxy", "kube-proxy", tc.cms...)
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
}
