package kpsync

import (
	appsv1 "k8s.io/api/apps/v1"

	"github.com/kube-proxy-sync/kube-proxy-sync/internal/configmap"
)

// The config travels with the template (see configmap.NewCopy): the pod
// template mounts an immutable copy of the record ConfigMap, named by its
// data's hash. A change creates a new copy and the restart PATCH points
// the template's volume at it; nodes the rollout has not reached keep
// reading the copy they mount, whatever restarts their kube-proxy. The
// record (kubeadm's kube-system/kube-proxy, which kubeadm and kubespray
// read and write) is written to what the fleet runs once no pod mounts it.

// configVolume is the template volume of the container that mounts the
// record or one of its copies, and the ConfigMap it names ("", "" when
// the container mounts neither).
func configVolume(ds *appsv1.DaemonSet, container, record string) (volume, mounted string) {
	c, err := findContainer(ds, container)
	if err != nil {
		return "", ""
	}
	mounts := map[string]bool{}
	for _, m := range c.VolumeMounts {
		mounts[m.Name] = true
	}
	for _, v := range ds.Spec.Template.Spec.Volumes {
		if v.ConfigMap == nil || !mounts[v.Name] {
			continue
		}
		if v.ConfigMap.Name == record || configmap.IsCopyName(record, v.ConfigMap.Name) {
			return v.Name, v.ConfigMap.Name
		}
	}
	return "", ""
}
