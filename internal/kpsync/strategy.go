package kpsync

import (
	"context"
	"fmt"
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

// strategyFor adds the rollout's updateStrategy to the restart PATCH:
// for a canary the switch to OnDelete; for a rolling update
// maxUnavailable raised for the stuck nodes (see rollout.Change.RaiseFor),
// or a strategy an earlier run left saved put back.
func (rl *rolling) strategyFor(ch *rollout.Change, ds *appsv1.DaemonSet) error {
	e := rl.e
	if rl.strategy == StrategyCanary {
		return ch.OnDelete(ds)
	}
	stuck := rl.fleet.Stuck()
	raise, err := ch.RaiseFor(ds, stuck)
	rl.raisedFor = 0 // this attempt's PATCH decides (a retry after a conflict may not raise)
	if err != nil || !raise.Raised() {
		return err
	}
	rl.raisedFor = stuck
	e.d.Log.Infof("%d node(s) going away or already unready hold a kube-proxy pod that is not Ready: maxUnavailable of daemonset %s/%s raised from %s to %d for the rollout", stuck, e.o.Namespace, e.o.DaemonSet, raise.From, raise.To)
	return nil
}

// restoreStrategy puts back the updateStrategy an earlier run saved,
// unless an unfinished canary holds the DaemonSet on OnDelete (that one is
// resumed, or replaced by this run's restart). It says what it restored
// ("": nothing).
func restoreStrategy(ctx context.Context, e *env, ds *appsv1.DaemonSet) (*appsv1.DaemonSet, string, error) {
	o := e.o
	ch, saved, err := rollout.Restore(ds)
	if err != nil || !saved || rollout.CanaryLeftover(ds) {
		return ds, "", err
	}
	what := rollout.Describe(*ch.Strategy)
	e.d.Log.Infof("restoring the updateStrategy (%s) of daemonset %s/%s saved by an earlier run", what, o.Namespace, o.DaemonSet)
	restored, err := e.dss.Apply(ctx, ch)
	if err != nil {
		return ds, "", err
	}
	return restored, fmt.Sprintf("restored the updateStrategy (%s) of daemonset %s/%s that an earlier run saved in %s and did not put back", what, o.Namespace, o.DaemonSet, rollout.StrategyAnnotation), nil
}
