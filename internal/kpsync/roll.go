package kpsync

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

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

// rollOut is step 5 of the run: roll, and undo the change if the new
// template failed (never on an interrupt or the overall --timeout).
func rollOut(ctx context.Context, rl *rolling, p plan) error {
	err := rl.roll(ctx, p)
	if err != nil {
		err = rl.undo(ctx, p, err)
	}
	return err
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
	if e.o.VerifyEndpoints <= 0 {
		return nil
	}
	return verifyEndpoints(ctx, e, now.DoneLive(e.o.VerifyEndpoints), p.probe.healthPath, p.probe.port)
}

// verifyEndpoints asks kube-proxy's health endpoint on the sampled nodes
// through the API server's node proxy (GET /api/v1/nodes/NODE:PORT/proxy/PATH).
func verifyEndpoints(ctx context.Context, e *env, sample []string, path string, port int) error {
	var failed []string
	for _, n := range sample {
		_, err := e.d.Kube.GetRaw(ctx, fmt.Sprintf("/api/v1/nodes/%s:%d/proxy/%s", n, port, strings.TrimPrefix(path, "/")))
		if err != nil {
			failed = append(failed, fmt.Sprintf("%s (%v)", n, err))
		}
	}
	if len(failed) > 0 {
		return fmt.Errorf("verify: kube-proxy's %s on port %d did not answer OK through the API server's node proxy on: %s (the kubeconfig user needs get on nodes/proxy)", path, port, strings.Join(failed, "; "))
	}
	e.d.Log.Infof("verified: kube-proxy's %s answers OK on %d sampled node(s)", path, len(sample))
	return nil
}

func (r *Result) mergeRoll(o rollOutcome) {
	f := &r.Facts
	f.Rollout = o.rollout
	if o.connectivity != nil {
		f.Connectivity = o.connectivity
	}
	if m := f.Migration; m != nil && len(o.rollout.CanaryNodes) > 0 {
		m.CanaryNodes = o.rollout.CanaryNodes // the ones the rollout picked
	}
	if m := f.Migration; m != nil && o.connectivity != nil && len(m.VerifyTrafficPaths) > 0 && len(o.connectivity.TrafficPaths) > 0 {
		m.VerifyTrafficPaths = o.connectivity.TrafficPaths // a path left out before any restart
	}
	if o.rolledBack {
		f.RolledBack, f.RollbackReason = true, o.rollbackReason
	}
	if o.imageRestored {
		f.Image = f.ImageBefore
	}
	if o.configMapName != "" {
		f.ConfigMapName, f.PreviousConfigMap = o.configMapName, o.previousConfigMap
	}
}
