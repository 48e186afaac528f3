package rollout

import (
	"context"

	appsv1 "k8s.io/api/apps/v1"
)

// LastMounting is the newest revision of the DaemonSet's history whose
// template mounts, in volume, the first of cms that any revision mounts
// there: the template the fleet ran that ConfigMap with last, with the
// image it ran then. Newest by number: the DaemonSet controller gives a
// revision a rollback goes back to the next number, so the highest is
// the one the fleet ran last. nil when no revision mounts any of cms
// (revisionHistoryLimit, a history pruned).
func (c Client) LastMounting(ctx context.Context, ds *appsv1.DaemonSet, container, volume string, cms ...string) (*Revision, error) {
	revs, err := c.revisions(ctx, ds)
	if err != nil {
		return nil, err
	}
	for _, cm := range cms {
		var last *ownRevision
		for i := range revs {
			r := &revs[i]
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
			return &Revision{Number: last.number, Image: ContainerImage(old, container)}, nil
		}
	}
	return nil, nil
}
