package kpsync

import (
	appsv1 "k8s.io/api/apps/v1"

	"github.com/kube-proxy-sync/kube-proxy-sync/internal/rollout"
)

// withImage is ds with the container's image replaced by image (ds itself
// when image is "").
func withImage(ds *appsv1.DaemonSet, container, image string) *appsv1.DaemonSet {
	if image == "" {
		return ds
	}
	out := ds.DeepCopy()
	for i := range out.Spec.Template.Spec.Containers {
		if out.Spec.Template.Spec.Containers[i].Name == container {
			out.Spec.Template.Spec.Containers[i].Image = image
		}
	}
	return out
}

// imageChange is the image the restart sets given ds: --image when the
// container runs another one, else "".
func imageChange(o Options, ds *appsv1.DaemonSet) string {
	if o.Image == "" || o.Undo || rollout.ContainerImage(ds, o.Container) == o.Image {
		return ""
	}
	return o.Image
}
