package kpsync

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"github.com/kube-proxy-sync/kube-proxy-sync/internal/rollout"
)

// recheckEvery: with no progress for this long, pending nodes are looked at
// again in case they started going away.
const recheckEvery = 15 * time.Second

// statusStall: a rolling update followed through the DaemonSet's status
// whose status makes no progress for this long is followed through its
// pods from then on, which say what holds it.
const statusStall = 10 * time.Second

var errOverallTimeout = errors.New("--timeout exceeded")

// failure is a rollout failure that is the new template's doing (pods that
// cannot run, no node finishing within the progress deadline, a failed
// verify): the one kind of failure that is rolled back. An interrupt, the
// overall --timeout or an API error is not one.
type failure struct{ err error }

func (f *failure) Error() string { return f.err.Error() }
func (f *failure) Unwrap() error { return f.err }

// brokenError names the pods of the new template that cannot run.
type brokenError struct{ broken []rollout.Broken }

func (e *brokenError) Error() string {
	var parts []string
	for i, b := range e.broken {
		if i == 5 {
			parts = append(parts, fmt.Sprintf("and %d more", len(e.broken)-5))
			break
		}
		parts = append(parts, b.String())
	}
	return fmt.Sprintf("kube-proxy cannot run on the new template on %d node(s): %s", len(e.broken), strings.Join(parts, "; "))
}

// roll waits for the restart to reach every live node. With the rolling
// strategy the DaemonSet controller replaces the pods within its
// maxUnavailable; with canary we delete them ourselves: the canary nodes
// first, then the rest, never more than the batch size at once. A pod of
// the new template that cannot run stops it at once; so does a progress
// deadline with no node finishing.
func (rl *rolling) roll(ctx context.Context, p plan) error {
	e := rl.e

	fleet, strategy := rl.fleet, rl.strategy
	if e.o.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, e.o.Timeout, errOverallTimeout)
		defer cancel()
	}
	deadline := e.o.ProgressDeadline
	if deadline <= 0 {
		deadline = ProgressDeadline(p.ds, p.probe.container)
	}
	// the deadline, recheck and stall timers of the whole wait, whichever
	// way it follows the rollout
	timers := rollout.NewTimers(e.d.Clock, deadline, recheckEvery, statusStall)
	defer timers.Stop()
	rl.out.rollout.Strategy = strategy
	start := e.d.Clock.Now()
	w := &waitLog{e: e, r: &rl.out.rollout, ctx: ctx}
	e.step(ctx, StepDaemonSetPatched)

	// after each change: the strategy's own move (the canary deletes the
	// pods its schedule asks for; a rolling update raises maxUnavailable
	// for nodes gone away) once the fleet is healthy so far
	var next func() (bool, error)
	if strategy == StrategyCanary {
		c, err := rl.newCanary(ctx, p.ds)
		if err != nil {
			return err
		}
		next = func() (bool, error) { return c.step(ctx) }
	} else {
		// a raised maxUnavailable goes back however the wait ends (any
		// later run restores it too); nothing to do if none was raised
		defer func() {
			if rl.strategyChanged {
				rl.finishStrategy(ctx)
			}
		}()
		next = func() (bool, error) {
			if fleet.PendingCount() == 0 {
				return true, nil
			}
			rl.raiseForStuck(ctx)
			return false, nil
		}
	}
	step := func() (bool, error) {
		if err := w.progress(fleet); err != nil {
			return false, err
		}
		if err := rl.checkDone(ctx); err != nil {
			return false, &failure{err} // a restarted kube-proxy that does not serve
		}
		if timers.Overdue() {
			// the checks above ran past the deadline: no next batch
			return false, fleet.NotBack(rollout.ErrNoProgress)
		}
		return next()
	}
	var err error
	followed := false
	if strategy != StrategyCanary && rl.followsStatus(len(rl.out.rollout.UnreadyBefore) > 0) {
		followed, err = rl.followStatus(ctx, timers, w.waiting)
	}
	if !followed && err == nil {
		err = e.dss.Track(ctx, fleet, e.o.Nodes, timers, step)
	}
	rl.fillRollout(start)
	if err != nil {
		return rl.waitError(ctx, err, deadline)
	}
	if e.o.Verify {
		if err := rl.verify(ctx, p); err != nil {
			return &failure{err}
		}
	}
	if strategy == StrategyCanary {
		rl.finishStrategy(ctx)
	}
	return nil
}

// waitLog logs a rollout's progress every 2 seconds, keeps its maximum of
// unavailable nodes, and passes StepWaiting once, whichever way the wait
// follows the rollout.
type waitLog struct {
	e       *env
	r       *rollout.Status
	ctx     context.Context
	last    time.Time
	stepped bool
}

// waiting passes StepWaiting, once.
func (w *waitLog) waiting() {
	if !w.stepped {
		w.stepped = true
		w.e.step(w.ctx, StepWaiting)
	}
}

// progress looks at the fleet after a change: logged, and a pod of the
// new template that cannot run is the rollout's failure.
func (w *waitLog) progress(fleet *rollout.Fleet) error {
	e, r := w.e, w.r
	if u := fleet.Unavailable(); u > r.MaxUnavailable {
		r.MaxUnavailable = u
	}
	if e.d.Clock.Since(w.last) >= 2*time.Second || fleet.PendingCount() == 0 {
		st := fleet.Status()
		e.d.Log.Infof("rollout of daemonset %s/%s: updated %d/%d, available %d/%d, %d node(s) skipped",
			e.o.Namespace, e.o.DaemonSet, st.Updated, st.Desired, st.Available, st.Desired, len(fleet.Skipped))
		w.last = e.d.Clock.Now()
		if st.Updated > 0 && fleet.PendingCount() > 0 {
			w.waiting()
		}
	}
	if b := fleet.Broken(); len(b) > 0 {
		return &failure{&brokenError{b}}
	}
	return nil
}

// waitError says what ended a wait before the rollout finished. No node
// finishing for the progress deadline is the new template's failure (so
// is a pod that cannot run, already one); the overall --timeout, an
// interrupt or an API error are not.
func (rl *rolling) waitError(ctx context.Context, err error, deadline time.Duration) error {
	e := rl.e

	switch {
	case errors.Is(err, rollout.ErrNoProgress):
		return &failure{fmt.Errorf("no node finished for %s (progress deadline, --progress-deadline): %w", deadline, err)}
	case errors.Is(context.Cause(ctx), errOverallTimeout):
		return fmt.Errorf("%w (%s) while the rollout was still progressing: nothing rolled back, the DaemonSet keeps its new template: %w", errOverallTimeout, e.o.Timeout, err)
	}
	return err
}

// rolling is the rollout phase of a run: what the restart hands it (the
// fleet as observed before the restart PATCH, the DaemonSet as that PATCH
// left it, what it did to the DaemonSet's updateStrategy, the
// connectivity checker), and the wait, the strategy's bookkeeping, the
// verify and the rollback on it.
type rolling struct {
	e        *env
	fleet    *rollout.Fleet
	strategy string
	// canaryNodes: how many nodes a canary restarts first
	canaryNodes int
	// ds is the DaemonSet as the restart PATCH left it (nil: a canary an
	// earlier run left, resumed): a rolling update is followed through
	// its status from there
	ds *appsv1.DaemonSet
	// resumed: the template is an earlier run's (a canary left over),
	// never rolled back by this one; restarted: this run's restart PATCH
	// put the template in place
	resumed, restarted bool
	// strategyChanged: the DaemonSet's own updateStrategy is saved in its
	// annotation and changed (OnDelete, or a raised maxUnavailable), to be
	// put back however the rollout ends
	strategyChanged bool
	// raisedFor is how many stuck nodes the raised maxUnavailable covers
	raisedFor int
	// conn checks each node after its restart (nil: no check)
	conn *connectivity
	// out is the rollout phase's part of the result, as far as it got
	out rollOutcome
}

// pods is the fleet to roll, nil when there is nothing to roll.
func (rl *rolling) pods() *rollout.Fleet {
	if rl == nil {
		return nil
	}
	return rl.fleet
}

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

// ProgressDeadline is how long a rollout may go without any node finishing
// before it counts as failed, derived from how long one healthy node can
// take: the old pod's termination grace period, the DaemonSet's
// minReadySeconds, and the readiness probe's initial delay, period times
// (success + failure threshold) and timeout, doubled, plus a minute for
// pulling and starting the image; at least 2 minutes.
func ProgressDeadline(ds *appsv1.DaemonSet, container string) time.Duration {
	grace := int64(corev1.DefaultTerminationGracePeriodSeconds)
	if g := ds.Spec.Template.Spec.TerminationGracePeriodSeconds; g != nil {
		grace = *g
	}
	node := grace + int64(ds.Spec.MinReadySeconds)
	if c, err := findContainer(ds, container); err == nil && c.ReadinessProbe != nil {
		rp := c.ReadinessProbe
		period, success, failure, timeout := int64(rp.PeriodSeconds), int64(rp.SuccessThreshold), int64(rp.FailureThreshold), int64(rp.TimeoutSeconds)
		// the API server's defaults for zero values
		if period == 0 {
			period = 10
		}
		if success == 0 {
			success = 1
		}
		if failure == 0 {
			failure = 3
		}
		if timeout == 0 {
			timeout = 1
		}
		node += int64(rp.InitialDelaySeconds) + period*(success+failure) + timeout
	}
	return max(2*time.Minute, time.Duration(2*node)*time.Second+time.Minute)
}

func (rl *rolling) fillRollout(start time.Time) {
	e, fleet := rl.e, rl.fleet

	r := &rl.out.rollout
	st := fleet.Status()
	r.Desired, r.Updated, r.Available, r.SkippedNodes = st.Desired, st.Updated, st.Available, st.SkippedNodes
	r.Duration = e.d.Clock.Since(start).Seconds()
}

// verify looks at the pods afresh (not through the watch): every live node
// whose pod was Ready before the restart must have a Ready pod of the new
// template now.
func (rl *rolling) verify(ctx context.Context, p plan) error {
	e, before := rl.e, rl.fleet

	now, err := e.dss.Observe(ctx, p.ds, before.Skipped)
	if err != nil {
		return fmt.Errorf("verify: %w", err)
	}
	now.SetGeneration(before.Generation)
	unreadyBefore := map[string]bool{}
	for _, n := range rl.out.rollout.UnreadyBefore {
		unreadyBefore[n] = true
	}
	var bad []string
	for _, n := range before.Live() {
		if _, skipped := now.Skipped[n]; !skipped && !unreadyBefore[n] && !now.Done(n) {
			bad = append(bad, n)
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("verify: kube-proxy was Ready before the restart but is not Ready on the new template on %d node(s): %v", len(bad), bad)
	}
	e.d.Log.Infof("verified: every live node that was Ready before runs a Ready kube-proxy of the new template")
	return verifyEndpoints(ctx, e, now, p.probe.healthPath, p.probe.port)
}

// verifyEndpoints asks kube-proxy's health endpoint on a sample of live nodes
// through the API server's node proxy (GET /api/v1/nodes/NODE:PORT/proxy/PATH).
func verifyEndpoints(ctx context.Context, e *env, fleet *rollout.Fleet, path string, port int) error {
	if e.o.VerifyEndpoints <= 0 {
		return nil
	}
	var failed []string
	checked := 0
	for _, n := range fleet.Live() {
		if checked == e.o.VerifyEndpoints {
			break
		}
		if !fleet.Done(n) {
			continue
		}
		checked++
		_, err := e.d.Kube.GetRaw(ctx, fmt.Sprintf("/api/v1/nodes/%s:%d/proxy/%s", n, port, strings.TrimPrefix(path, "/")))
		if err != nil {
			failed = append(failed, fmt.Sprintf("%s (%v)", n, err))
		}
	}
	if len(failed) > 0 {
		return fmt.Errorf("verify: kube-proxy's %s on port %d did not answer OK through the API server's node proxy on: %s (the kubeconfig user needs get on nodes/proxy)", path, port, strings.Join(failed, "; "))
	}
	e.d.Log.Infof("verified: kube-proxy's %s answers OK on %d sampled node(s)", path, checked)
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
	_, err = applyFresh(ctx, e.dss, ds, func(ds *appsv1.DaemonSet, _ bool) (rollout.Change, bool) {
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
