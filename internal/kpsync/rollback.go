package kpsync

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"github.com/kube-proxy-sync/kube-proxy-sync/internal/rollout"
)

// isGone: the pod is already gone, or is not the one we meant to delete.
func isGone(err error) bool {
	return apierrors.IsNotFound(err) || apierrors.IsConflict(err)
}

// undo is what a failed rollout leaves. Only the new template's own
// failure (a pod that cannot run, no progress for the deadline, a failed
// check) that this run restarted onto is rolled back, unless
// --no-rollback; an interrupt, the overall --timeout or an API error, and
// an earlier run's template, are left as they are, saying what the next
// run does.
func (rl *rolling) undo(ctx context.Context, p plan, err error) error {
	e := rl.e
	var failed *failure
	switch {
	case ctx.Err() != nil || !errors.As(err, &failed):
		return fmt.Errorf("%w; %s", err, rl.nextRun())
	case !rl.restarted || rl.resumed:
		return fmt.Errorf("%w; nothing rolled back: this run did not restart kube-proxy, the template in place is an earlier run's; run with the previous values to replace it", err)
	case !e.o.RollbackOnFailure:
		return fmt.Errorf("%w; not rolled back (--no-rollback): %s", err, rl.nextRun())
	}
	return rl.rollback(ctx, p, err)
}

// nextRun says what a rerun does after a rollout that stopped without a
// rollback.
func (rl *rolling) nextRun() string {
	e := rl.e
	if rl.strategy == StrategyCanary {
		return fmt.Sprintf("daemonset %s/%s stays on OnDelete with the remaining old pods untouched: the next run with the same values resumes the canary rollout, a run with other values restarts on those", e.o.Namespace, e.o.DaemonSet)
	}
	return fmt.Sprintf("configmap and daemonset %s/%s are consistent (the new template is in place, the DaemonSet controller keeps rolling it): the next run with the same values restarts nothing, a run with other values restarts on those", e.o.Namespace, e.o.DaemonSet)
}

// rollback restores the ConfigMap data captured before the change and the
// DaemonSet's pod template as it was before the restart (restartedAt, probe)
// together with its updateStrategy and its stamp (what its pods run). The
// controller then sees its previous revision again: pods never restarted
// stay as they are, pods of the failed template (broken or not) are
// replaced by ones reading the restored data. The run still fails, saying why.
func (rl *rolling) rollback(ctx context.Context, p plan, cause error) error {
	e, fleet := rl.e, rl.fleet

	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	e.d.Log.Warnf("rolling back: %v", cause)
	// the config travels with the template: no ConfigMap was written
	// before the rollout (the record is written once it succeeded), and
	// pointing the template back at the ConfigMap it mounted restores the
	// config
	// the DaemonSet controller writes status all the while: retry on conflict
	var restored *appsv1.DaemonSet
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		ds, err := e.dss.Get(ctx)
		if err != nil {
			return err
		}
		prev := p.ds.Spec.Template.Annotations[rollout.RestartedAtAnnotation]
		// the stamp as it was before this run, not the hash of the data
		// restored: after a restart this run owed (pending), the pods
		// not reached run older data, and the restart stays owed
		ch := rollout.Change{ResourceVersion: ds.ResourceVersion, RestoreStamp: restoredStamp(p.ds), RestoreRestartedAt: &prev, Container: p.probe.container}
		// the config before the last change stays what --undo restores: the
		// change rolled back is no change
		ch.RestoreStamp[rollout.PreviousConfigAnnotation] = annotation(p.ds, rollout.PreviousConfigAnnotation)
		if p.copy != "" {
			ch.ConfigVolume, ch.ConfigMap = p.volume, p.mounted
		}
		if p.probe.probe != nil {
			old := containerProbe(p.ds, p.probe.container)
			ch.Probe, ch.RemoveProbe = old, old == nil
		}
		if p.probe.liveness != nil {
			ch.LivenessProbe = containerLiveness(p.ds, p.probe.container)
		}
		if p.image != "" {
			ch.Image = rollout.ContainerImage(p.ds, e.o.Container)
		}
		if rl.templateBefore != nil {
			// kubeadm's template went in whole: the one it replaced goes
			// back whole, as it was (none of the fields above on top)
			ch.Template = rl.templateBefore
			ch.RestoreRestartedAt, ch.Probe, ch.RemoveProbe, ch.LivenessProbe, ch.Image, ch.ConfigMap = nil, nil, false, nil, "", ""
		}
		if restore, saved, err := rollout.Restore(ds); err == nil && saved {
			ch.Strategy, ch.ClearStrategy = restore.Strategy, true
		}
		restored, err = e.dss.Apply(ctx, ch)
		return err
	})
	if err != nil {
		return fmt.Errorf("%w; rollback failed too: restoring the template of daemonset %s/%s (pointing it back at configmap %s): %v; run `kubectl rollout undo daemonset/%s -n %s`, or run again with the previous values", cause, e.o.Namespace, e.o.DaemonSet, p.mounted, err, e.o.DaemonSet, e.o.Namespace)
	}
	if restored.Spec.UpdateStrategy.Type == appsv1.OnDeleteDaemonSetStrategyType {
		// nothing replaces them on its own: delete the failed template's pods
		for uid, name := range fleet.NewPods() {
			err := e.d.Kube.Pods(e.o.Namespace).Delete(ctx, name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: ptr.To(uid)}})
			if err != nil && !isGone(err) {
				e.d.Log.Warnf("rollback: delete kube-proxy pod %s of the failed template: %v; delete it by hand", name, err)
			}
		}
	}
	rl.out.rolledBack, rl.out.rollbackReason = true, cause.Error()
	rl.out.imageRestored = p.image != ""
	if p.copy != "" {
		rl.out.configMapName, rl.out.previousConfigMap = p.mounted, p.copy
	}
	e.event(ctx, "Warning", "RolledBack", fmt.Sprintf("restored the kube-proxy pod template (configmap %s/%s): %v (audit id %s)", e.o.Namespace, p.mounted, cause, e.auditID))
	return fmt.Errorf("rolled back (pod template restored, on configmap %s/%s; kube-proxy pods of the new template replaced): %w", e.o.Namespace, p.mounted, cause)
}

// restoredStamp is the stamp a rollback puts back: the DaemonSet's as it
// was before the run. A stamp that did not hold then (its restart left the
// template as it was: the template generation it waits for is ahead of
// the template) must not hold after either, but the rollback's own
// template changes move the template past it; so it is put back waiting
// for a generation no template reaches, and the restart stays owed until
// a run restarts and stamps afresh.
func restoredStamp(before *appsv1.DaemonSet) map[string]*string {
	stamp := rollout.Stamp(before)
	if g, err := strconv.ParseInt(before.Annotations[rollout.RestartGenerationAnnotation], 10, 64); err == nil && rollout.TemplateGeneration(before) < g {
		never := strconv.FormatInt(math.MaxInt64, 10)
		stamp[rollout.RestartGenerationAnnotation] = &never
	}
	return stamp
}

// annotation is ds's annotation key, nil when it has none.
func annotation(ds *appsv1.DaemonSet, key string) *string {
	if v, ok := ds.Annotations[key]; ok {
		return &v
	}
	return nil
}

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
