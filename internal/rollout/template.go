package rollout

import (
	"context"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/util/retry"
)

// A DaemonSet's pod template can be taken whole from kubeadm's rendering of
// the kube-proxy addon (`--template kubeadm`): what a new kubeadm changes in
// it across minors (arguments, volumes, security context) reaches the
// DaemonSet in the same rollout as the image and the config, as kubeadm's
// own addon phase would write it. kubeadm replaces the whole template;
// so does this, keeping the fields kube-proxy-sync owns.

// OwnTemplate is rendered, kubeadm's pod template, carrying the fields of
// live's template that kube-proxy-sync owns, as they are there: the
// container's image and probes, the ConfigMap the config volume mounts, the
// template's restartedAt, and the node affinity that keeps it off the
// pools' nodes. A Change with Template set to it changes
// those only as the change's own fields say.
func OwnTemplate(rendered *corev1.PodTemplateSpec, live *appsv1.DaemonSet, container, volume string) (*corev1.PodTemplateSpec, error) {
	t := rendered.DeepCopy()
	var from *corev1.Container
	for i := range live.Spec.Template.Spec.Containers {
		if live.Spec.Template.Spec.Containers[i].Name == container {
			from = &live.Spec.Template.Spec.Containers[i]
		}
	}
	to := templateContainer(t, container)
	if from == nil || to == nil {
		return nil, fmt.Errorf("container %s: not in both kubeadm's pod template and daemonset %s/%s's", container, live.Namespace, live.Name)
	}
	to.Image, to.ReadinessProbe, to.LivenessProbe = from.Image, from.ReadinessProbe.DeepCopy(), from.LivenessProbe.DeepCopy()
	if volume != "" {
		v := templateVolume(t, volume)
		if v == nil {
			return nil, fmt.Errorf("volume %s, which mounts kube-proxy's config in daemonset %s/%s, is not a ConfigMap volume of kubeadm's pod template", volume, live.Namespace, live.Name)
		}
		v.ConfigMap.Name = ConfigVolumeOf(live, volume)
	}
	if KeepsOffPools(&live.Spec.Template.Spec) {
		// kubeadm's DaemonSet keeps off the pools' nodes (see PoolLabel):
		// dropped, it would put a second kube-proxy on each of them
		KeepOffPools(&t.Spec)
	}
	delete(t.Annotations, RestartedAtAnnotation)
	if at, ok := live.Spec.Template.Annotations[RestartedAtAnnotation]; ok {
		if t.Annotations == nil {
			t.Annotations = map[string]string{}
		}
		t.Annotations[RestartedAtAnnotation] = at
	}
	return t, nil
}

// templateContainer is t's container name (nil: none).
func templateContainer(t *corev1.PodTemplateSpec, name string) *corev1.Container {
	for i := range t.Spec.Containers {
		if t.Spec.Containers[i].Name == name {
			return &t.Spec.Containers[i]
		}
	}
	return nil
}

// templateVolume is t's ConfigMap volume name (nil: none).
func templateVolume(t *corev1.PodTemplateSpec, name string) *corev1.Volume {
	for i := range t.Spec.Volumes {
		if t.Spec.Volumes[i].Name == name && t.Spec.Volumes[i].ConfigMap != nil {
			return &t.Spec.Volumes[i]
		}
	}
	return nil
}

// template is the pod template the change writes when it takes one whole
// (Template): Template with the change's own template fields set on it.
func (c Change) template() *corev1.PodTemplateSpec {
	t := c.Template.DeepCopy()
	setAnnotation := func(v *string) {
		if v == nil || *v == "" {
			delete(t.Annotations, RestartedAtAnnotation)
			return
		}
		if t.Annotations == nil {
			t.Annotations = map[string]string{}
		}
		t.Annotations[RestartedAtAnnotation] = *v
	}
	if at := c.RestartedAt(); at != "" {
		setAnnotation(&at)
	} else if c.RestoreRestartedAt != nil {
		setAnnotation(c.RestoreRestartedAt)
	}
	if ctr := templateContainer(t, c.Container); ctr != nil {
		if c.Image != "" {
			ctr.Image = c.Image
		}
		if c.RemoveProbe {
			ctr.ReadinessProbe = nil
		}
		if c.Probe != nil {
			ctr.ReadinessProbe = c.Probe.DeepCopy()
		}
		if c.LivenessProbe != nil {
			ctr.LivenessProbe = c.LivenessProbe.DeepCopy()
		}
	}
	if c.ConfigMap != "" {
		if v := templateVolume(t, c.ConfigVolume); v != nil {
			v.ConfigMap.Name = c.ConfigMap
		}
	}
	return t
}

// TemplateDiffers asks the API server (a dry-run PATCH, which writes
// nothing) whether taking the pod template t whole would change ds's
// template: the server defaults t as it would store it, so fields it
// fills in (a pull policy, a termination message path) are no change.
func (c Client) TemplateDiffers(ctx context.Context, ds *appsv1.DaemonSet, t *corev1.PodTemplateSpec) (bool, error) {
	var differs bool
	first := true
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if !first {
			// the DaemonSet controller wrote status since ds was read
			latest, err := c.Get(ctx)
			if err != nil {
				return err
			}
			ds = latest
		}
		first = false
		after, err := c.Apply(ctx, Change{ResourceVersion: ds.ResourceVersion, Template: t, DryRun: true})
		if err != nil {
			return err
		}
		differs = TemplateGeneration(after) != TemplateGeneration(ds)
		return nil
	})
	if err != nil {
		return false, fmt.Errorf("compare daemonset %s/%s's pod template with kubeadm's (a dry run): %w", c.Namespace, c.Name, err)
	}
	return differs, nil
}
