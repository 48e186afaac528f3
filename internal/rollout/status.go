package rollout

import (
	"context"
	"errors"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
	"k8s.io/utils/clock"
)

// ErrDeleted: the DaemonSet was deleted while its rollout was followed.
var ErrDeleted = errors.New("daemonset deleted during the rollout")

// Complete reports what `kubectl rollout status` waits for: the controller
// has seen the DaemonSet's latest spec, and every node that should run a
// pod runs an updated and available one.
func Complete(ds *appsv1.DaemonSet) bool {
	s := ds.Status
	return s.ObservedGeneration >= ds.Generation &&
		s.UpdatedNumberScheduled >= s.DesiredNumberScheduled &&
		s.NumberAvailable >= s.DesiredNumberScheduled
}

// progressMark is how far a rollout's status has come: a later status is
// progress if the controller saw a newer spec, or, for the same spec, more
// nodes are updated or available than ever before (a count that drops and
// climbs back to where it was is no progress).
type progressMark struct {
	observed             int64
	updatedMax, availMax int32
}

func markOf(ds *appsv1.DaemonSet) progressMark {
	s := ds.Status
	return progressMark{observed: s.ObservedGeneration, updatedMax: s.UpdatedNumberScheduled, availMax: s.NumberAvailable}
}

// advance takes a new status and reports whether it is progress.
func (m *progressMark) advance(ds *appsv1.DaemonSet) bool {
	s := ds.Status
	switch {
	case s.ObservedGeneration > m.observed:
		*m = markOf(ds)
		return true
	case s.ObservedGeneration < m.observed:
		return false
	}
	moved := s.UpdatedNumberScheduled > m.updatedMax || s.NumberAvailable > m.availMax
	m.updatedMax, m.availMax = max(m.updatedMax, s.UpdatedNumberScheduled), max(m.availMax, s.NumberAvailable)
	return moved
}

// FollowStatus follows a rolling update through the DaemonSet alone, from
// the resourceVersion of from (the DaemonSet the restart PATCH returned),
// the way `kubectl rollout status` does: the controller sums the pods up in
// one small object. Following the pods instead means one watch event per
// pod change, about seven per node (at 1000 nodes, 7000 events and 24 MB
// per rollout), which on a busy control plane costs the rollout a tenth of
// its wall time.
//
// seen gets every status the watch brings, and whether it is progress (see
// progressMark), recorded on t. FollowStatus returns true once the status
// is complete, false once it has made no progress for t's stall time: a
// pod of the new template that cannot run, or a node that went away, holds
// the controller, and only the pods say which. The caller then follows the
// pods (see Track). With no progress for the progress deadline it ends
// with ErrNoProgress.
func (c Client) FollowStatus(ctx context.Context, from *appsv1.DaemonSet, t *Timers, seen func(ds *appsv1.DaemonSet, progress bool)) (bool, error) {
	if Complete(from) {
		return true, nil
	}
	sel := fields.OneTermEqualSelector("metadata.name", c.Name).String()
	dss := c.DaemonSets
	w, err := watchtools.NewRetryWatcherWithContext(ctx, from.ResourceVersion, &cache.ListWatch{
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = sel
			return dss.Watch(ctx, o)
		},
	})
	if err != nil {
		return false, fmt.Errorf("watch daemonset %s/%s: %w", c.Namespace, c.Name, err)
	}
	defer w.Stop()
	mark := markOf(from)
	for {
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case <-t.tick():
			if t.Overdue() {
				return false, ErrNoProgress
			}
			if t.stalled() {
				return false, nil
			}
		case ev, ok := <-w.ResultChan():
			if !ok {
				if ctx.Err() != nil { // the watch ends with the context
					return false, ctx.Err()
				}
				return false, fmt.Errorf("watch daemonset %s/%s: closed", c.Namespace, c.Name)
			}
			switch ev.Type {
			case watch.Error:
				return false, fmt.Errorf("watch daemonset %s/%s: %w", c.Namespace, c.Name, apierrors.FromObject(ev.Object))
			case watch.Deleted:
				return false, fmt.Errorf("daemonset %s/%s: %w", c.Namespace, c.Name, ErrDeleted)
			}
			ds, ok := ev.Object.(*appsv1.DaemonSet)
			if !ok {
				continue
			}
			progress := mark.advance(ds)
			if progress {
				t.Progress()
			}
			seen(ds, progress)
			if Complete(ds) {
				return true, nil
			}
		}
	}
}

// ErrNoProgress ends a wait in which no node finished for the progress
// deadline.
var ErrNoProgress = errors.New("progress deadline exceeded")

// Timers is the one clock of a rollout's wait, whichever way it follows
// the rollout (the DaemonSet's status, then its pods). Progress (a node
// finished, the status advanced) starts every timer again:
//   - the progress deadline: no progress for that long, the rollout failed
//     (ErrNoProgress);
//   - the recheck: no progress for that long, the pending nodes are looked
//     at again (and again after each recheck period), in case they started
//     going away;
//   - the stall: following the status, no progress for that long, the
//     pods are followed instead, which say what holds the rollout.
//
// One ticker drives them all; the wait loop that owns the Timers asks, at
// each tick, what fell due. It is used by one goroutine at a time.
type Timers struct {
	clock                     clock.WithTicker
	deadline, recheck, stall  time.Duration
	lastProgress, lastRecheck time.Time
	ticker                    clock.Ticker
}

// NewTimers starts the timers of a wait; Stop them when it ends. The tick
// is a tenth of the shortest, between 100ms and a second.
func NewTimers(c clock.WithTicker, deadline, recheck, stall time.Duration) *Timers {
	tick := min(max(min(deadline, recheck, stall)/10, 100*time.Millisecond), time.Second)
	now := c.Now()
	return &Timers{clock: c, deadline: deadline, recheck: recheck, stall: stall,
		lastProgress: now, lastRecheck: now, ticker: c.NewTicker(tick)}
}

// Stop stops the ticker.
func (t *Timers) Stop() { t.ticker.Stop() }

// Deadline is the progress deadline.
func (t *Timers) Deadline() time.Duration { return t.deadline }

// Progress records progress: every timer starts again.
func (t *Timers) Progress() { t.lastProgress = t.clock.Now() }

// tick delivers the ticks at which to ask what fell due.
func (t *Timers) tick() <-chan time.Time { return t.ticker.C() }

// Overdue: no progress for the progress deadline. The wait loops end on
// it at their next tick; work between ticks that must not go on past the
// deadline (a canary's next batch) asks it itself.
func (t *Timers) Overdue() bool { return t.clock.Since(t.lastProgress) >= t.deadline }

// stalled: no progress for the stall time.
func (t *Timers) stalled() bool { return t.clock.Since(t.lastProgress) >= t.stall }

// recheckDue: no progress for the recheck period, nor a recheck; true
// once per period.
func (t *Timers) recheckDue() bool {
	now := t.clock.Now()
	if now.Sub(t.lastProgress) < t.recheck || now.Sub(t.lastRecheck) < t.recheck {
		return false
	}
	t.lastRecheck = now
	return true
}
