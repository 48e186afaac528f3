package rollout

import (
	"errors"
	"time"

	"k8s.io/utils/clock"
)

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
