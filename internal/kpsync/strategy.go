package kpsync

import (
	"context"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/client-go/util/retry"

	"github.com/kube-proxy-sync/kube-proxy-sync/internal/rollout"
)

// raiseForStuck keeps the raise of the restart PATCH true during the wait:
// a node that started going away after the restart (the wait's recheck
// skips it) and holds a kube-proxy pod that is not Ready still counts
// against maxUnavailable for the DaemonSet controller, which would then
// replace no other pod (with kubeadm's budget of 1) until the progress
// deadline rolls everything back. So maxUnavailable is raised once more
// for each such node (see rollout.RaiseDuring); finishStrategy puts it
// back however the wait ends, and any later run does too. A failed raise
// is logged, not fatal: the wait goes on as it would.
func (rl *rolling) raiseForStuck(ctx context.Context) {
	e := rl.e

	stuck := rl.fleet.Stuck()
	if stuck <= rl.raisedFor {
		return
	}
	ds, err := e.dss.Get(ctx)
	if err != nil {
		e.d.Log.Warnf("raise maxUnavailable for %d node(s) gone away during the rollout: %v", stuck, err)
		return
	}
	var raise rollout.Raise
	_, err = e.dss.ApplyFresh(ctx, ds, func(ds *appsv1.DaemonSet, _ bool) (rollout.Change, bool) {
		ch, r, ok, _ := rollout.RaiseDuring(ds, stuck)
		raise = r
		return ch, ok
	})
	if err != nil {
		e.d.Log.Warnf("raise maxUnavailable of daemonset %s/%s for %d node(s) gone away during the rollout: %v", e.o.Namespace, e.o.DaemonSet, stuck, err)
		return
	}
	rl.raisedFor = stuck
	if raise.Raised() {
		rl.strategyChanged = true
		e.d.Log.Infof("%d node(s) going away hold a kube-proxy pod that is not Ready: maxUnavailable of daemonset %s/%s raised from %s to %d for the rest of the rollout", stuck, e.o.Namespace, e.o.DaemonSet, raise.From, raise.To)
	}
}

// finishStrategy restores the strategy after a rollout: a canary that
// succeeded, a raised maxUnavailable however the rollout ended.
func (rl *rolling) finishStrategy(ctx context.Context) {
	e := rl.e

	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	err := retry.OnError(retry.DefaultBackoff, func(error) bool { return true }, func() error {
		ds, err := e.dss.Get(ctx)
		if err != nil {
			return err
		}
		ch, saved, err := rollout.Restore(ds)
		if err != nil || !saved {
			return err
		}
		_, err = e.dss.Apply(ctx, ch)
		return err
	})
	if err != nil {
		e.d.Log.Errorf("restore updateStrategy of daemonset %s/%s: %v; the next run restores it", e.o.Namespace, e.o.DaemonSet, err)
	}
}
