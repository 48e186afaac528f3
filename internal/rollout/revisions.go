package rollout

import (
	"context"
	"encoding/json"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kube-proxy-sync/kube-proxy-sync/internal/kube"
)

// RevisionConfigMaps lists the DaemonSet's ControllerRevisions, the
// templates `kubectl rollout undo` can restore, and returns every
// ConfigMap their pod templates mount: a ConfigMap one of them mounts is
// in use, since an undo to that revision starts pods that mount it. The
// DaemonSet controller keeps revisionHistoryLimit revisions (10 by
// default), so the set is bounded by the DaemonSet's own history.
func (c Client) RevisionConfigMaps(ctx context.Context, ds *appsv1.DaemonSet) (map[string]bool, error) {
	revs, err := c.revisions(ctx, ds)
	if err != nil {
		return nil, err
	}
	out := map[string]bool{}
	for _, r := range revs {
		for _, name := range templateConfigMaps(r.template) {
			out[name] = true
		}
	}
	return out, nil
}

// ownRevision is a ControllerRevision of a DaemonSet: its number and template.
type ownRevision struct {
	number   int64
	created  metav1.Time
	template *corev1.PodTemplateSpec
}

// revisions lists the ControllerRevisions ds controls (by its selector,
// then by owner), with their templates.
func (c Client) revisions(ctx context.Context, ds *appsv1.DaemonSet) ([]ownRevision, error) {
	if c.Revisions == nil {
		return nil, fmt.Errorf("list the revisions of daemonset %s/%s: no client for controllerrevisions", c.Namespace, c.Name)
	}
	opts := metav1.ListOptions{}
	if ds.Spec.Selector != nil {
		sel, err := metav1.LabelSelectorAsSelector(ds.Spec.Selector)
		if err != nil {
			return nil, fmt.Errorf("the selector of daemonset %s/%s: %w", c.Namespace, c.Name, err)
		}
		opts.LabelSelector = sel.String()
	}
	list, err := c.Revisions.List(ctx, opts)
	if err != nil {
		return nil, kube.Request{What: fmt.Sprintf("list the controllerrevisions of daemonset %s/%s", c.Namespace, c.Name),
			Needs: "list on controllerrevisions.apps"}.Explain(err)
	}
	var out []ownRevision
	for i := range list.Items {
		cr := &list.Items[i]
		if !ownedBy(cr.OwnerReferences, ds) {
			continue
		}
		tmpl, err := revisionTemplate(cr)
		if err != nil {
			return nil, fmt.Errorf("controllerrevision %s/%s of daemonset %s: %w", cr.Namespace, cr.Name, c.Name, err)
		}
		out = append(out, ownRevision{number: cr.Revision, created: cr.CreationTimestamp, template: tmpl})
	}
	return out, nil
}

// ownedBy: the revision's controller is ds (by UID; by kind and name where
// ds carries no UID, as in a fake clientset).
func ownedBy(refs []metav1.OwnerReference, ds *appsv1.DaemonSet) bool {
	for _, r := range refs {
		if r.Controller == nil || !*r.Controller {
			continue
		}
		if ds.UID != "" {
			if r.UID == ds.UID {
				return true
			}
			continue
		}
		if r.Kind == "DaemonSet" && r.Name == ds.Name {
			return true
		}
	}
	return false
}

// revisionTemplate decodes a DaemonSet revision's data: the patch the
// DaemonSet controller stores, {"spec":{"template":{...}}}.
func revisionTemplate(cr *appsv1.ControllerRevision) (*corev1.PodTemplateSpec, error) {
	raw := cr.Data.Raw
	if len(raw) == 0 && cr.Data.Object != nil {
		var err error
		if raw, err = json.Marshal(cr.Data.Object); err != nil {
			return nil, fmt.Errorf("encode its data: %w", err)
		}
	}
	var data struct {
		Spec struct {
			Template corev1.PodTemplateSpec `json:"template"`
		} `json:"spec"`
	}
	if len(raw) > 0 {
		if err := json.Unmarshal(raw, &data); err != nil {
			return nil, fmt.Errorf("decode its data as a daemonset template: %w", err)
		}
	}
	return &data.Spec.Template, nil
}

// templateConfigMaps are the ConfigMaps a pod template mounts, as volumes
// or projected sources.
func templateConfigMaps(t *corev1.PodTemplateSpec) []string {
	var out []string
	for _, v := range t.Spec.Volumes {
		if v.ConfigMap != nil {
			out = append(out, v.ConfigMap.Name)
		}
		if v.Projected != nil {
			for _, src := range v.Projected.Sources {
				if src.ConfigMap != nil {
					out = append(out, src.ConfigMap.Name)
				}
			}
		}
	}
	return out
}

// Sharing is another DaemonSet of the namespace whose pods use the same
// ConfigMaps (a Windows kube-proxy, a DaemonSet per pool): the ConfigMaps
// its template, its pods and its revisions mount.
type Sharing struct {
	DaemonSet string
	// Template: its pod template mounts these; Pods: its pods mount these,
	// by pod ("namespace/name"); Revisions: its revisions' templates
	Template  []string
	Pods      map[string][]string
	Revisions map[string]bool
}

// Sharing lists the other DaemonSets of the namespace (not ours) whose
// pod template mounts a ConfigMap that uses accepts, with what their
// pods and revisions mount: their config is ours to keep too.
func (c Client) Sharing(ctx context.Context, ours *appsv1.DaemonSet, uses func(name string) bool) ([]Sharing, error) {
	list, err := c.DaemonSets.List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, kube.Request{What: fmt.Sprintf("list the daemonsets of namespace %s, to find the others that mount the config of daemonset %s", c.Namespace, c.Name),
			Needs: "list on daemonsets.apps"}.Explain(err)
	}
	var out []Sharing
	for i := range list.Items {
		ds := &list.Items[i]
		if ds.Name == ours.Name || (ours.UID != "" && ds.UID == ours.UID) {
			continue
		}
		var mounted []string
		for _, name := range templateConfigMaps(&ds.Spec.Template) {
			if uses(name) {
				mounted = append(mounted, name)
			}
		}
		if len(mounted) == 0 {
			continue
		}
		s := Sharing{DaemonSet: ds.Name, Template: mounted, Pods: map[string][]string{}}
		pods, err := c.Mounts(ctx, ds)
		if err != nil {
			return nil, fmt.Errorf("daemonset %s/%s, which mounts %v: %w", c.Namespace, ds.Name, mounted, err)
		}
		for name := range pods.ConfigMaps() {
			if uses(name) {
				by, _ := pods.MountedBy(name)
				s.Pods[name] = by
			}
		}
		if s.Revisions, err = c.RevisionConfigMaps(ctx, ds); err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, nil
}

// Revision is a template of a DaemonSet's history: its revision number
// and a container's image.
type Revision struct {
	Number int64
	Image  string
}

// FirstMounting is the oldest revision of the DaemonSet's history (by
// creation: the DaemonSet controller renumbers a revision a rollback
// goes back to) whose template mounts configmap cm in volume: the
// template the change onto cm made, with the image it ran then. nil when
// the history holds none (revisionHistoryLimit 0, a history pruned).
func (c Client) FirstMounting(ctx context.Context, ds *appsv1.DaemonSet, container, volume, cm string) (*Revision, error) {
	revs, err := c.revisions(ctx, ds)
	if err != nil {
		return nil, err
	}
	var first *ownRevision
	for i := range revs {
		r := &revs[i]
		old := &appsv1.DaemonSet{Spec: appsv1.DaemonSetSpec{Template: *r.template}}
		if ConfigVolumeOf(old, volume) != cm {
			continue
		}
		if first == nil || r.created.Before(&first.created) || (r.created.Equal(&first.created) && r.number < first.number) {
			first = r
		}
	}
	if first == nil {
		return nil, nil
	}
	old := &appsv1.DaemonSet{Spec: appsv1.DaemonSetSpec{Template: *first.template}}
	return &Revision{Number: first.number, Image: ContainerImage(old, container)}, nil
}

// Mounting names the other DaemonSets of the namespace (not ours) whose
// pod template mounts configmap name: one LIST.
func (c Client) Mounting(ctx context.Context, ours *appsv1.DaemonSet, name string) ([]string, error) {
	list, err := c.DaemonSets.List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list the daemonsets of namespace %s, to find the others that mount configmap %s: %w", c.Namespace, name, err)
	}
	var out []string
	for i := range list.Items {
		ds := &list.Items[i]
		if ds.Name == ours.Name || (ours.UID != "" && ds.UID == ours.UID) {
			continue
		}
		for _, cm := range templateConfigMaps(&ds.Spec.Template) {
			if cm == name {
				out = append(out, ds.Name)
				break
			}
		}
	}
	return out, nil
}

// ConfigVolumeOf is the ConfigMap the template's volume name mounts ("" if
// it mounts none).
func ConfigVolumeOf(ds *appsv1.DaemonSet, name string) string {
	for _, v := range ds.Spec.Template.Spec.Volumes {
		if v.Name == name && v.ConfigMap != nil {
			return v.ConfigMap.Name
		}
	}
	return ""
}

// ContainerImage is the image of the template's container name ("" if
// there is no such container).
func ContainerImage(ds *appsv1.DaemonSet, name string) string {
	for _, c := range ds.Spec.Template.Spec.Containers {
		if c.Name == name {
			return c.Image
		}
	}
	return ""
}
