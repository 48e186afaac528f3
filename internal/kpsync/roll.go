package kpsync

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
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

var (
	errNoProgress     = errors.New("progress deadline exceeded")
	errOverallTimeout = errors.New("--timeout exceeded")
)

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
func (s *Syncer) roll(ctx context.Context, p plan, fleet *rollout.Fleet, strategy string) error {
	if s.o.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, s.o.Timeout, errOverallTimeout)
		defer cancel()
	}
	ctx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	deadline := s.o.ProgressDeadline
	if deadline <= 0 {
		deadline = ProgressDeadline(p.ds, p.probe.container)
	}
	lastDone := s.watchProgress(ctx, deadline, stop)
	r := &s.res.Facts.Rollout
	r.Strategy = strategy
	start := s.d.Clock.Now()
	var lastLog time.Time
	// the during-wait step comes once, whichever way the wait follows
	midway := true
	waiting := func() {
		if midway {
			midway = false
			s.step(ctx, StepWaiting)
		}
	}
	pending := fleet.PendingCount()
	progress := func() error {
		if n := fleet.PendingCount(); n < pending {
			lastDone.Store(s.d.Clock.Now().UnixNano())
			pending = n
		}
		if u := fleet.Unavailable(); u > r.MaxUnavailable {
			r.MaxUnavailable = u
		}
		if s.d.Clock.Since(lastLog) >= 2*time.Second || fleet.PendingCount() == 0 {
			st := fleet.Status()
			s.d.Log.Infof("rollout of daemonset %s/%s: updated %d/%d, available %d/%d, %d node(s) skipped",
				s.o.Namespace, s.o.DaemonSet, st.Updated, st.Desired, st.Available, st.Desired, len(fleet.Skipped))
			lastLog = s.d.Clock.Now()
			if st.Updated > 0 && fleet.PendingCount() > 0 {
				waiting()
			}
		}
		if b := fleet.Broken(); len(b) > 0 {
			return &failure{&brokenError{b}}
		}
		return nil
	}
	s.step(ctx, StepDaemonSetPatched)

	var step func() (bool, error)
	if strategy == StrategyCanary {
		c, err := s.newCanary(ctx, p.ds, fleet)
		if err != nil {
			return err
		}
		step = func() (bool, error) {
			if err := progress(); err != nil {
				return false, err
			}
			if err := s.checkDone(ctx, fleet); err != nil {
				return false, &failure{err} // a restarted kube-proxy that does not serve
			}
			return c.step(ctx)
		}
	} else {
		// a raised maxUnavailable goes back however the wait ends (any
		// later run restores it too); nothing to do if none was raised
		defer func() {
			if s.strategyChanged {
				s.finishStrategy(ctx)
			}
		}()
		step = func() (bool, error) {
			if err := progress(); err != nil {
				return false, err
			}
			if err := s.checkDone(ctx, fleet); err != nil {
				return false, &failure{err} // a restarted kube-proxy that does not serve
			}
			if fleet.PendingCount() == 0 {
				return true, nil
			}
			s.raiseForStuck(ctx, fleet)
			return false, nil
		}
	}
	var err error
	followed := false
	if strategy != StrategyCanary && s.followsStatus(fleet) {
		followed, err = s.followStatus(ctx, fleet, lastDone, waiting)
	}
	if !followed && err == nil {
		err = s.dss.Track(ctx, fleet, s.o.Nodes, recheckEvery, step)
	}
	s.fillRollout(fleet, start)
	switch cause := context.Cause(ctx); {
	case err == nil:
	case errors.Is(cause, errNoProgress):
		return &failure{fmt.Errorf("no node finished for %s (progress deadline, --progress-deadline): %w", deadline, err)}
	case errors.Is(cause, errOverallTimeout):
		return fmt.Errorf("%w (%s) while the rollout was still progressing: nothing rolled back, the DaemonSet keeps its new template: %w", errOverallTimeout, s.o.Timeout, err)
	default:
		return err
	}
	if s.o.Verify {
		if err := s.verify(ctx, p, fleet); err != nil {
			return &failure{err}
		}
	}
	if strategy == StrategyCanary {
		s.finishStrategy(ctx)
	}
	return nil
}

// followsStatus reports whether the rolling update can be followed through
// the DaemonSet's status (see rollout.FollowStatus): only when the status
// means what the wait means. Nodes going away, nodes unready before the
// restart and a per-node connectivity check all need the pods.
func (s *Syncer) followsStatus(fleet *rollout.Fleet) bool {
	return s.restarted != nil && s.restarted.Spec.UpdateStrategy.Type == appsv1.RollingUpdateDaemonSetStrategyType &&
		s.conn == nil && fleet.PendingCount() > 0 &&
		len(fleet.Skipped) == 0 && len(s.res.Facts.Rollout.UnreadyBefore) == 0
}

// followStatus follows the rolling update through the DaemonSet's status
// until it is complete or stalls, then lists the pods once: a complete
// rollout is confirmed pod by pod, and facts come from the pods as
// always. It returns true if the pods confirm it; false, the pods are to
// be followed from that list on (Track), which finds what holds the
// rollout: a pod that cannot run, a node that went away.
func (s *Syncer) followStatus(ctx context.Context, fleet *rollout.Fleet, lastDone *atomic.Int64, waiting func()) (bool, error) {
	r := &s.res.Facts.Rollout
	var lastLog time.Time
	seen := func(ds *appsv1.DaemonSet, progress bool) {
		if progress {
			lastDone.Store(s.d.Clock.Now().UnixNano())
		}
		st := ds.Status
		if st.ObservedGeneration < ds.Generation {
			return // the controller has not seen the restart yet
		}
		if u := int(st.DesiredNumberScheduled - st.NumberReady); u > r.MaxUnavailable {
			r.MaxUnavailable = u
		}
		if s.d.Clock.Since(lastLog) >= 2*time.Second || rollout.Complete(ds) {
			s.d.Log.Infof("rollout of daemonset %s/%s: updated %d/%d, available %d/%d",
				s.o.Namespace, s.o.DaemonSet, st.UpdatedNumberScheduled, st.DesiredNumberScheduled, st.NumberAvailable, st.DesiredNumberScheduled)
			lastLog = s.d.Clock.Now()
		}
		if st.UpdatedNumberScheduled > 0 && !rollout.Complete(ds) {
			waiting()
		}
	}
	complete, err := s.dss.FollowStatus(ctx, s.restarted, statusStall, seen)
	switch {
	case err != nil && ctx.Err() != nil:
		// interrupted or out of time: one look at the pods, for the facts
		// and to name the nodes not back
		look, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if lerr := s.dss.Relist(look, fleet); lerr != nil {
			return false, fmt.Errorf("kube-proxy pods did not all come back (%v): %w", lerr, err)
		}
		return false, fleet.NotBack(err)
	case errors.Is(err, rollout.ErrDeleted):
		return false, err
	case err != nil:
		s.d.Log.Warnf("following the rollout through the daemonset's status: %v; following its pods instead", err)
	case !complete:
		s.d.Log.Infof("the status of daemonset %s/%s made no progress for %s: following its pods to see what holds it", s.o.Namespace, s.o.DaemonSet, statusStall)
	}
	if err := s.dss.Relist(ctx, fleet); err != nil {
		return false, err
	}
	if complete && fleet.PendingCount() > 0 {
		s.d.Log.Infof("daemonset %s/%s says its rollout is complete, but %d node(s) do not run a Ready kube-proxy of the new template yet: following the pods", s.o.Namespace, s.o.DaemonSet, fleet.PendingCount())
	}
	return complete && fleet.PendingCount() == 0 && len(fleet.Broken()) == 0, nil
}

// watchProgress cancels ctx with errNoProgress once deadline passes with no
// node finished; the returned time (unix nanoseconds) is when one last did.
func (s *Syncer) watchProgress(ctx context.Context, deadline time.Duration, stop context.CancelCauseFunc) *atomic.Int64 {
	last := &atomic.Int64{}
	last.Store(s.d.Clock.Now().UnixNano())
	tick := min(max(deadline/10, 100*time.Millisecond), 5*time.Second)
	ticker := s.d.Clock.NewTicker(tick)
	go func() {
		defer ticker.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-ticker.C():
				if s.d.Clock.Since(time.Unix(0, last.Load())) >= deadline {
					stop(errNoProgress)
					return
				}
			}
		}
	}()
	return last
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

func (s *Syncer) fillRollout(fleet *rollout.Fleet, start time.Time) {
	r := &s.res.Facts.Rollout
	st := fleet.Status()
	r.Desired, r.Updated, r.Available, r.SkippedNodes = st.Desired, st.Updated, st.Available, st.SkippedNodes
	r.Duration = s.d.Clock.Since(start).Seconds()
}

// verify looks at the pods afresh (not through the watch): every live node
// whose pod was Ready before the restart must have a Ready pod of the new
// template now.
func (s *Syncer) verify(ctx context.Context, p plan, before *rollout.Fleet) error {
	now, err := s.dss.Observe(ctx, p.ds, before.Skipped)
	if err != nil {
		return fmt.Errorf("verify: %w", err)
	}
	now.SetGeneration(before.Generation)
	unreadyBefore := map[string]bool{}
	for _, n := range s.res.Facts.Rollout.UnreadyBefore {
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
	s.d.Log.Infof("verified: every live node that was Ready before runs a Ready kube-proxy of the new template")
	return s.verifyEndpoints(ctx, now, p.probe.healthPath, p.probe.port)
}

// verifyEndpoints asks kube-proxy's health endpoint on a sample of live nodes
// through the API server's node proxy (GET /api/v1/nodes/NODE:PORT/proxy/PATH).
func (s *Syncer) verifyEndpoints(ctx context.Context, fleet *rollout.Fleet, path string, port int) error {
	if s.o.VerifyEndpoints <= 0 {
		return nil
	}
	var failed []string
	checked := 0
	for _, n := range fleet.Live() {
		if checked == s.o.VerifyEndpoints {
			break
		}
		if !fleet.Done(n) {
			continue
		}
		checked++
		_, err := s.d.Kube.GetRaw(ctx, fmt.Sprintf("/api/v1/nodes/%s:%d/proxy/%s", n, port, strings.TrimPrefix(path, "/")))
		if err != nil {
			failed = append(failed, fmt.Sprintf("%s (%v)", n, err))
		}
	}
	if len(failed) > 0 {
		return fmt.Errorf("verify: kube-proxy's %s on port %d did not answer OK through the API server's node proxy on: %s (the kubeconfig user needs get on nodes/proxy)", path, port, strings.Join(failed, "; "))
	}
	s.d.Log.Infof("verified: kube-proxy's %s answers OK on %d sampled node(s)", path, checked)
	return nil
}

// savedStrategy is the DaemonSet's own updateStrategy: the one an earlier
// run saved in StrategyAnnotation while it had it changed, else the current one.
func (s *Syncer) savedStrategy(ds *appsv1.DaemonSet) (orig appsv1.DaemonSetUpdateStrategy, saved bool, err error) {
	raw := ds.Annotations[rollout.StrategyAnnotation]
	if raw == "" {
		return ds.Spec.UpdateStrategy, false, nil
	}
	if err := json.Unmarshal([]byte(raw), &orig); err != nil {
		return orig, true, fmt.Errorf("daemonset %s/%s annotation %s is not an updateStrategy: %w; fix it by hand", s.o.Namespace, s.o.DaemonSet, rollout.StrategyAnnotation, err)
	}
	return orig, true, nil
}

// canaryLeftover reports whether an earlier canary run stopped half-way:
// the DaemonSet is on OnDelete with its own strategy saved. Its template
// is not verified on every node, so nothing may give it back to the
// controller before a run has finished the canary or replaced the template.
func canaryLeftover(ds *appsv1.DaemonSet) bool {
	return ds.Annotations[rollout.StrategyAnnotation] != "" && ds.Spec.UpdateStrategy.Type == appsv1.OnDeleteDaemonSetStrategyType
}

// canaryStrategy adds the switch to OnDelete to the restart PATCH, keeping
// the original strategy in an annotation so that it is restored even if this
// run dies.
func (s *Syncer) canaryStrategy(ch *rollout.Change, ds *appsv1.DaemonSet) error {
	orig, _, err := s.savedStrategy(ds)
	if err != nil {
		return err
	}
	b, err := json.Marshal(orig)
	if err != nil {
		return err
	}
	ch.SaveStrategy = string(b)
	ch.Strategy = &appsv1.DaemonSetUpdateStrategy{Type: appsv1.OnDeleteDaemonSetStrategyType}
	return nil
}

// rollingStrategy adds to the restart PATCH what the DaemonSet controller
// needs to roll the new template through the live nodes within their
// budget. The controller counts every node without an available pod
// against maxUnavailable, so with maxUnavailable 1 a single stuck pod on a
// node going away (or one already unready before) stops it. For the
// duration of the rollout maxUnavailable is raised by the number of those
// stuck pods, so the live nodes get exactly the DaemonSet's own budget; the
// original is saved in StrategyAnnotation, put back at the end, on failure,
// on interrupt, and by any later run if this one died.
func (s *Syncer) rollingStrategy(ch *rollout.Change, ds *appsv1.DaemonSet, fleet *rollout.Fleet) error {
	orig, saved, err := s.savedStrategy(ds)
	if err != nil {
		return err
	}
	stuck := fleet.Stuck()
	s.raisedFor = 0 // this attempt's PATCH decides (a retry after a conflict may not raise)
	if !raisable(orig) || stuck == 0 {
		if saved { // a leftover: this PATCH restores it
			ch.Strategy, ch.ClearStrategy = &orig, true
		}
		return nil
	}
	raised, from, to, err := s.raised(ds, orig, stuck)
	if err != nil {
		return err
	}
	b, err := json.Marshal(orig)
	if err != nil {
		return err
	}
	ch.Strategy, ch.SaveStrategy = raised, string(b)
	s.raisedFor = stuck
	s.d.Log.Infof("%d node(s) going away or already unready hold a kube-proxy pod that is not Ready: maxUnavailable of daemonset %s/%s raised from %s to %d for the rollout", stuck, s.o.Namespace, s.o.DaemonSet, from, to)
	return nil
}

// raisable: the DaemonSet controller counts a node whose pod is not Ready
// against maxUnavailable only for a RollingUpdate without surge (with
// surge it starts the new pod next to the old one).
func raisable(orig appsv1.DaemonSetUpdateStrategy) bool {
	ru := orig.RollingUpdate
	surge := ru != nil && ru.MaxSurge != nil && ru.MaxSurge.String() != "0" && ru.MaxSurge.String() != "0%"
	return orig.Type == appsv1.RollingUpdateDaemonSetStrategyType && !surge
}

// raised is the DaemonSet's own strategy with maxUnavailable raised by
// stuck: the budget resolved the way the DaemonSet controller does, over
// the nodes that should run a pod, plus one for each stuck node.
func (s *Syncer) raised(ds *appsv1.DaemonSet, orig appsv1.DaemonSetUpdateStrategy, stuck int) (*appsv1.DaemonSetUpdateStrategy, string, int, error) {
	budget := intstr.FromInt32(1)
	if ru := orig.RollingUpdate; ru != nil && ru.MaxUnavailable != nil {
		budget = *ru.MaxUnavailable
	}
	n, err := intstr.GetScaledValueFromIntOrPercent(&budget, int(ds.Status.DesiredNumberScheduled), true)
	if err != nil {
		return nil, "", 0, fmt.Errorf("daemonset %s/%s maxUnavailable %q: %w", s.o.Namespace, s.o.DaemonSet, budget.String(), err)
	}
	raised := orig.DeepCopy()
	if raised.RollingUpdate == nil {
		raised.RollingUpdate = &appsv1.RollingUpdateDaemonSet{}
	}
	raised.RollingUpdate.MaxUnavailable = ptr.To(intstr.FromInt32(int32(n + stuck)))
	return raised, budget.String(), n + stuck, nil
}

// raiseForStuck keeps the raise of rollingStrategy true during the wait: a
// node that started going away after the restart (the wait's recheck skips
// it) and holds a kube-proxy pod that is not Ready still counts against
// maxUnavailable for the DaemonSet controller, which would then replace no
// other pod (with kubeadm's budget of 1) until the progress deadline rolls
// everything back. So maxUnavailable is raised once more for each such
// node, saving the DaemonSet's own strategy if no run has; finishStrategy
// puts it back however the wait ends, and any later run does too. A
// failed raise is logged, not fatal: the wait goes on as it would.
func (s *Syncer) raiseForStuck(ctx context.Context, fleet *rollout.Fleet) {
	stuck := fleet.Stuck()
	if stuck <= s.raisedFor {
		return
	}
	ds, err := s.dss.Get(ctx)
	if err != nil {
		s.d.Log.Warnf("raise maxUnavailable for %d node(s) gone away during the rollout: %v", stuck, err)
		return
	}
	var to int
	var from string
	sent := false
	_, err = s.applyFresh(ctx, ds, func(ds *appsv1.DaemonSet, _ bool) (rollout.Change, bool) {
		orig, saved, err := s.savedStrategy(ds)
		if err != nil || !raisable(orig) || ds.Spec.UpdateStrategy.Type != appsv1.RollingUpdateDaemonSetStrategyType {
			return rollout.Change{}, false
		}
		raised, f, n, err := s.raised(ds, orig, stuck)
		if err != nil {
			return rollout.Change{}, false
		}
		ch := rollout.Change{ResourceVersion: ds.ResourceVersion, Strategy: raised}
		if !saved {
			b, err := json.Marshal(orig)
			if err != nil {
				return rollout.Change{}, false
			}
			ch.SaveStrategy = string(b)
		}
		from, to, sent = f, n, true
		return ch, true
	})
	if err != nil {
		s.d.Log.Warnf("raise maxUnavailable of daemonset %s/%s for %d node(s) gone away during the rollout: %v", s.o.Namespace, s.o.DaemonSet, stuck, err)
		return
	}
	s.raisedFor = stuck
	if sent {
		s.strategyChanged = true
		s.d.Log.Infof("%d node(s) going away hold a kube-proxy pod that is not Ready: maxUnavailable of daemonset %s/%s raised from %s to %d for the rest of the rollout", stuck, s.o.Namespace, s.o.DaemonSet, from, to)
	}
}

// restoreStrategy puts back the updateStrategy an earlier run saved,
// unless an unfinished canary holds the DaemonSet on OnDelete (that one is
// resumed, or replaced by this run's restart).
func (s *Syncer) restoreStrategy(ctx context.Context, ds *appsv1.DaemonSet) (*appsv1.DaemonSet, error) {
	orig, saved, err := s.savedStrategy(ds)
	if err != nil || !saved || canaryLeftover(ds) {
		return ds, err
	}
	what := string(orig.Type)
	if ru := orig.RollingUpdate; ru != nil && ru.MaxUnavailable != nil {
		what += ", maxUnavailable " + ru.MaxUnavailable.String()
	}
	s.d.Log.Infof("restoring the updateStrategy (%s) of daemonset %s/%s saved by an earlier run", what, s.o.Namespace, s.o.DaemonSet)
	restored, err := s.dss.Apply(ctx, rollout.Change{Strategy: &orig, ClearStrategy: true})
	if err == nil {
		s.restoredStrategy = fmt.Sprintf("restored the updateStrategy (%s) of daemonset %s/%s that an earlier run saved in %s and did not put back", what, s.o.Namespace, s.o.DaemonSet, rollout.StrategyAnnotation)
	}
	return restored, err
}

// finishStrategy restores the strategy after a rollout: a canary that
// succeeded, a raised maxUnavailable however the rollout ended.
func (s *Syncer) finishStrategy(ctx context.Context) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	err := retry.OnError(retry.DefaultBackoff, func(error) bool { return true }, func() error {
		ds, err := s.dss.Get(ctx)
		if err != nil {
			return err
		}
		orig, saved, err := s.savedStrategy(ds)
		if err != nil || !saved {
			return err
		}
		_, err = s.dss.Apply(ctx, rollout.Change{Strategy: &orig, ClearStrategy: true})
		return err
	})
	if err != nil {
		s.d.Log.Errorf("restore updateStrategy of daemonset %s/%s: %v; the next run restores it", s.o.Namespace, s.o.DaemonSet, err)
	}
}

// isGone: the pod is already gone, or is not the one we meant to delete.
func isGone(err error) bool {
	return apierrors.IsNotFound(err) || apierrors.IsConflict(err)
}

// rollback restores the ConfigMap data captured before the change and the
// DaemonSet's pod template as it was before the restart (restartedAt, probe)
// together with its updateStrategy and its stamp (what its pods run). The
// controller then sees its previous revision again: pods never restarted
// stay as they are, pods of the failed template (broken or not) are
// replaced by ones reading the restored data. The run still fails, saying why.
func (s *Syncer) rollback(ctx context.Context, p plan, fleet *rollout.Fleet, cause error) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	f := &s.res.Facts
	s.d.Log.Warnf("rolling back: %v", cause)
	// the config travels with the template: no ConfigMap was written
	// before the rollout (the record is written once it succeeded), and
	// pointing the template back at the ConfigMap it mounted restores the
	// config
	// the DaemonSet controller writes status all the while: retry on conflict
	var restored *appsv1.DaemonSet
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		ds, err := s.dss.Get(ctx)
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
			ch.Image = rollout.ContainerImage(p.ds, s.o.Container)
		}
		if orig, saved, err := s.savedStrategy(ds); err == nil && saved {
			ch.Strategy, ch.ClearStrategy = &orig, true
		}
		restored, err = s.dss.Apply(ctx, ch)
		return err
	})
	if err != nil {
		return fmt.Errorf("%w; rollback failed too: restoring the template of daemonset %s/%s (pointing it back at configmap %s): %v; run `kubectl rollout undo daemonset/%s -n %s`, or run again with the previous values", cause, s.o.Namespace, s.o.DaemonSet, p.mounted, err, s.o.DaemonSet, s.o.Namespace)
	}
	if restored.Spec.UpdateStrategy.Type == appsv1.OnDeleteDaemonSetStrategyType {
		// nothing replaces them on its own: delete the failed template's pods
		for uid, name := range fleet.NewPods() {
			err := s.d.Kube.Pods(s.o.Namespace).Delete(ctx, name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: ptr.To(uid)}})
			if err != nil && !isGone(err) {
				s.d.Log.Warnf("rollback: delete kube-proxy pod %s of the failed template: %v; delete it by hand", name, err)
			}
		}
	}
	f.RolledBack, f.RollbackReason = true, cause.Error()
	if p.image != "" {
		f.Image = f.ImageBefore
	}
	if p.copy != "" {
		f.ConfigMapName, f.PreviousConfigMap = p.mounted, p.copy
	}
	s.event(ctx, "Warning", "RolledBack", fmt.Sprintf("restored the kube-proxy pod template (configmap %s/%s): %v (audit id %s)", s.o.Namespace, p.mounted, cause, f.AuditID))
	return fmt.Errorf("rolled back (pod template restored, on configmap %s/%s; kube-proxy pods of the new template replaced): %w", s.o.Namespace, p.mounted, cause)
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
