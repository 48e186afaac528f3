package kpsync

import (
	"context"
	"errors"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"

	"github.com/kube-proxy-sync/kube-proxy-sync/internal/rollout"
)

// followsStatus reports whether the rolling update can be followed through
// the DaemonSet's status (see rollout.FollowStatus): only when the status
// means what the wait means. Nodes going away, nodes unready before the
// restart and a per-node connectivity check all need the pods.
func (rl *rolling) followsStatus(unreadyBefore bool) bool {
	return rl.ds != nil && rl.ds.Spec.UpdateStrategy.Type == appsv1.RollingUpdateDaemonSetStrategyType &&
		rl.conn == nil && rl.fleet.PendingCount() > 0 && len(rl.fleet.Skipped) == 0 && !unreadyBefore
}

// followStatus follows the rolling update through the DaemonSet's status
// until it is complete or stalls, then lists the pods once: a complete
// rollout is confirmed pod by pod, and facts come from the pods as
// always. It returns true if the pods confirm it; false, the pods are to
// be followed from that list on (Track), which finds what holds the
// rollout: a pod that cannot run, a node that went away.
func (rl *rolling) followStatus(ctx context.Context, timers *rollout.Timers, waiting func()) (bool, error) {
	e := rl.e

	fleet := rl.fleet
	r := &rl.out.rollout
	var lastLog time.Time
	seen := func(ds *appsv1.DaemonSet, _ bool) {
		st := ds.Status
		if st.ObservedGeneration < ds.Generation {
			return // the controller has not seen the restart yet
		}
		if u := int(st.DesiredNumberScheduled - st.NumberReady); u > r.MaxUnavailable {
			r.MaxUnavailable = u
		}
		if e.d.Clock.Since(lastLog) >= 2*time.Second || rollout.Complete(ds) {
			e.d.Log.Infof("rollout of daemonset %s/%s: updated %d/%d, available %d/%d",
				e.o.Namespace, e.o.DaemonSet, st.UpdatedNumberScheduled, st.DesiredNumberScheduled, st.NumberAvailable, st.DesiredNumberScheduled)
			lastLog = e.d.Clock.Now()
		}
		if st.UpdatedNumberScheduled > 0 && !rollout.Complete(ds) {
			waiting()
		}
	}
	complete, err := e.dss.FollowStatus(ctx, rl.ds, timers, seen)
	switch {
	case errors.Is(err, rollout.ErrNoProgress) || (err != nil && ctx.Err() != nil):
		// no progress for the deadline, interrupted or out of time: one
		// look at the pods, for the facts and to name the nodes not back
		look, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if lerr := e.dss.Relist(look, fleet); lerr != nil {
			return false, fmt.Errorf("kube-proxy pods did not all come back (%v): %w", lerr, err)
		}
		return false, fleet.NotBack(err)
	case errors.Is(err, rollout.ErrDeleted):
		return false, err
	case err != nil:
		e.d.Log.Warnf("following the rollout through the daemonset's status: %v; following its pods instead", err)
	case !complete:
		e.d.Log.Infof("the status of daemonset %s/%s made no progress for %s: following its pods to see what holds it", e.o.Namespace, e.o.DaemonSet, statusStall)
	}
	if err := e.dss.Relist(ctx, fleet); err != nil {
		return false, err
	}
	if complete && fleet.PendingCount() > 0 {
		e.d.Log.Infof("daemonset %s/%s says its rollout is complete, but %d node(s) do not run a Ready kube-proxy of the new template yet: following the pods", e.o.Namespace, e.o.DaemonSet, fleet.PendingCount())
	}
	return complete && fleet.PendingCount() == 0 && len(fleet.Broken()) == 0, nil
}
