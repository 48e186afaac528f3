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

// Revision is a template of a DaemonSet's history: its revision number
// and a container's image.
type Revision struct {
	Number int64
	Image  string
}

// History is a DaemonSet's revisions (its ControllerRevisions), read
// once: a run that asks several questions of the history lists it once.
type History struct {
	revs []ownRevision
}

// History lists the revisions of ds.
func (c Client) History(ctx context.Context, ds *appsv1.DaemonSet) (History, error) {
	revs, err := c.revisions(ctx, ds)
	return History{revs: revs}, err
}

// FirstMounting is the oldest revision of the history (by creation: the
// DaemonSet controller renumbers a revision a rollback goes back to)
// whose template mounts configmap cm in volume: the template the change
// onto cm made, with the image it ran then. nil when the history holds
// none (revisionHistoryLimit 0, a history pruned).
func (h History) FirstMounting(container, volume, cm string) *Revision {
	var first *ownRevision
	for i := range h.revs {
		r := &h.revs[i]
		old := &appsv1.DaemonSet{Spec: appsv1.DaemonSetSpec{Template: *r.template}}
		if ConfigVolumeOf(old, volume) != cm {
			continue
		}
		if first == nil || r.created.Before(&first.created) || (r.created.Equal(&first.created) && r.number < first.number) {
			first = r
		}
	}
	if first == nil {
		return nil
	}
	old := &appsv1.DaemonSet{Spec: appsv1.DaemonSetSpec{Template: *first.template}}
	return &Revision{Number: first.number, Image: ContainerImage(old, container)}
}

// LastMounting is the newest revision of the history whose template
// mounts, in volume, the first of cms that any revision mounts there: the
// template the fleet ran that ConfigMap with last, with the image it ran
// then. Newest by number: the DaemonSet controller gives a revision a
// rollback goes back to the next number, so the highest is the one the
// fleet ran last. nil when no revision mounts any of cms
// (revisionHistoryLimit, a history pruned).
func (h History) LastMounting(container, volume string, cms ...string) *Revision {
	for _, cm := range cms {
		var last *ownRevision
		for i := range h.revs {
			r := &h.revs[i]
			old := &appsv1.DaemonSet{Spec: appsv1.DaemonSetSpec{Template: *r.template}}
			if ConfigVolumeOf(old, volume) != cm {
				continue
			}
			if last == nil || r.number > last.number || (r.number == last.number && last.created.Before(&r.created)) {
				last = r
			}
		}
		if last != nil {
			old := &appsv1.DaemonSet{Spec: appsv1.DaemonSetSpec{Template: *last.template}}
			return &Revision{Number: last.number, Image: ContainerImage(old, container)}
		}
	}
	return nil
}
