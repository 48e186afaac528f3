package rollout

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kube-proxy-sync/kube-proxy-sync/internal/kube"
)

// Mounts lists the DaemonSet's pods page by page for what they mount
// (Fleet.MountedBy, Fleet.ConfigMaps), without a rollout to follow.
func (c Client) Mounts(ctx context.Context, ds *appsv1.DaemonSet) (*Fleet, error) {
	sel, err := metav1.LabelSelectorAsSelector(ds.Spec.Selector)
	if err != nil {
		return nil, fmt.Errorf("daemonset %s/%s selector: %w", c.Namespace, c.Name, err)
	}
	f := emptyFleet(sel.String(), ds.UID, map[string]string{})
	f.expected, f.exempt = map[string]bool{}, map[string]bool{}
	if err := c.list(ctx, f, false); err != nil {
		return nil, fmt.Errorf("%w, to see which ConfigMaps they mount", err)
	}
	return f, nil
}

// MountedBy lists the pods that mount the ConfigMap name ("node/pod",
// sorted), as the fleet last saw them. current is false when one of them
// was being deleted then: it may be gone since, and only the API server
// knows whether it still is.
func (f *Fleet) MountedBy(name string) (by []string, current bool) {
	current = true
	for _, p := range f.pods {
		if slices.Contains(p.configMaps, name) {
			by = append(by, p.node+"/"+p.name)
			current = current && !p.deleting
		}
	}
	sort.Strings(by)
	return by, current
}

// UnmountGrace is how long after a pod's grace period ends WaitUnmounted
// still waits for the pod to go (the kubelet's confirmation).
const UnmountGrace = 10 * time.Second

// WaitUnmounted follows the fleet's pods from its last list until no pod
// mounts the ConfigMap name, while every pod that does is being deleted:
// one that is not deleting is not going away, and ends the wait at once.
// The wait ends, too, UnmountGrace after the last of their grace periods
// ends (a node gone leaves its pods terminating). It returns the pods that
// still mount name, as MountedBy does.
func (c Client) WaitUnmounted(ctx context.Context, f *Fleet, name string) ([]string, error) {
	by, current := f.MountedBy(name)
	if len(by) == 0 || current {
		return by, nil
	}
	var end time.Time
	for _, p := range f.pods {
		if p.deleting && slices.Contains(p.configMaps, name) && p.deleteBy.After(end) {
			end = p.deleteBy
		}
	}
	wait := end.Add(UnmountGrace).Sub(c.Clock.Now())
	if wait <= 0 {
		return by, nil
	}
	c.Log.Infof("waiting up to %s for %d terminating pod(s) to go: %s mount configmap %s/%s", wait.Round(time.Second), len(by), strings.Join(by, ", "), c.Namespace, name)
	w, err := c.watch(ctx, f)
	if err != nil {
		return by, err
	}
	defer w.Stop()
	timer := c.Clock.NewTimer(wait)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return by, ctx.Err()
		case <-timer.C():
			return by, nil
		case ev, ok := <-w.ResultChan():
			if !ok {
				return by, fmt.Errorf("watch pods of daemonset %s/%s: closed", c.Namespace, c.Name)
			}
			if err := c.apply(f, ev); err != nil {
				return by, err
			}
		}
		if by, current = f.MountedBy(name); len(by) == 0 || current {
			return by, nil
		}
	}
}

// ConfigMaps are the ConfigMaps some pod of the fleet mounts, as last seen.
func (f *Fleet) ConfigMaps() map[string]bool {
	out := map[string]bool{}
	for _, p := range f.pods {
		for _, name := range p.configMaps {
			out[name] = true
		}
	}
	return out
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
	// by pod ("NODE/POD", as MountedBy names them); Revisions: its
	// revisions' templates
	Template  []string
	Pods      map[string][]string
	Revisions map[string]bool
}

// Sharing lists the other DaemonSets of the namespace (not ours) whose
// pod template or pods mount a ConfigMap that uses accepts, with what
// their revisions mount: their config is ours to keep too. Each one's pods
// are read whatever its template mounts: pods of an older template (an
// OnDelete DaemonSet, a rollout not finished) still mount what the
// template has moved off.
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
		s := Sharing{DaemonSet: ds.Name, Template: mounted, Pods: map[string][]string{}}
		pods, err := c.Mounts(ctx, ds)
		if err != nil {
			return nil, fmt.Errorf("daemonset %s/%s, whose pods may mount the config of daemonset %s/%s: %w", c.Namespace, ds.Name, c.Namespace, c.Name, err)
		}
		for name := range pods.ConfigMaps() {
			if uses(name) {
				by, _ := pods.MountedBy(name)
				s.Pods[name] = by
			}
		}
		if len(mounted) == 0 && len(s.Pods) == 0 {
			continue
		}
		if s.Revisions, err = c.RevisionConfigMaps(ctx, ds); err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, nil
}

// Uses is what mounts a DaemonSet's config and its copies (the ConfigMaps
// that of accepts): the DaemonSet's pods and the other DaemonSets of the
// namespace whose template or pods mount one of them (with their
// revisions), each read when first asked for, and once; and, read by
// InUse, the DaemonSet's own revisions. Whether a config may be written or
// deleted is decided from what the cluster holds, whoever put it there.
type Uses struct {
	c          Client
	ds         *appsv1.DaemonSet
	of         func(name string) bool
	pods       *Fleet
	others     []Sharing
	othersRead bool
}

// Uses starts from pods, the DaemonSet's pods as a rollout followed them
// to its end (nil: listed when first asked for).
func (c Client) Uses(ds *appsv1.DaemonSet, pods *Fleet, of func(name string) bool) *Uses {
	return &Uses{c: c, ds: ds, of: of, pods: pods}
}

// Pods are the DaemonSet's pods with the ConfigMaps they mount.
func (u *Uses) Pods(ctx context.Context) (*Fleet, error) {
	if u.pods == nil {
		pods, err := u.c.Mounts(ctx, u.ds)
		if err != nil {
			return nil, err
		}
		u.pods = pods
	}
	return u.pods, nil
}

// Others are the other DaemonSets that mount one of the ConfigMaps.
func (u *Uses) Others(ctx context.Context) ([]Sharing, error) {
	if !u.othersRead {
		others, err := u.c.Sharing(ctx, u.ds, u.of)
		if err != nil {
			return nil, err
		}
		u.others, u.othersRead = others, true
	}
	return u.others, nil
}

// OthersMounting names the other DaemonSets whose template mounts
// configmap name ("daemonset NAME") and their pods that do ("pod
// NODE/POD").
func (u *Uses) OthersMounting(ctx context.Context, name string) ([]string, error) {
	others, err := u.Others(ctx)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, sh := range others {
		if slices.Contains(sh.Template, name) {
			out = append(out, "daemonset "+sh.DaemonSet)
		}
		for _, pod := range sh.Pods[name] {
			out = append(out, "pod "+pod)
		}
	}
	return out, nil
}

// InUse is every ConfigMap something mounts or can mount again: what the
// DaemonSet's pods mount; of the ConfigMaps accepted, what the other
// DaemonSets' templates, pods and revisions mount; and what the
// DaemonSet's own revisions mount (`kubectl rollout undo --to-revision`
// starts pods that mount it). An error reading the DaemonSet's pods comes
// from Pods, read first.
func (u *Uses) InUse(ctx context.Context) (map[string]bool, error) {
	pods, err := u.Pods(ctx)
	if err != nil {
		return nil, err
	}
	inUse := pods.ConfigMaps()
	others, err := u.Others(ctx)
	if err != nil {
		return nil, err
	}
	for _, sh := range others {
		for _, name := range sh.Template {
			inUse[name] = true
		}
		for name := range sh.Pods {
			inUse[name] = true
		}
		for name := range sh.Revisions {
			inUse[name] = true
		}
	}
	revs, err := u.c.RevisionConfigMaps(ctx, u.ds)
	if err != nil {
		return nil, err
	}
	for name := range revs {
		inUse[name] = true
	}
	return inUse, nil
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
