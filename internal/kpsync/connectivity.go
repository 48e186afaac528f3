package kpsync

import (
	"context"
	"sort"
	"time"

	"github.com/kube-proxy-sync/kube-proxy-sync/internal/verify"
)

// healthPollInterval is how often a restarted node's /healthz is asked.
const healthPollInterval = time.Second

// connectivity state of a run
type connectivity struct {
	checker   *verify.Checker
	unchecked map[string]bool
	// pending: the fleet's pending count at the last look; first: no look yet
	pending int
	first   bool
}

// markRestart records when the restart was sent: each node's kube-proxy
// must show a sync after it.
func (c *connectivity) markRestart(at time.Time) {
	if c != nil {
		c.checker.Since = at
	}
}

// markNode records when the run deleted node's old pod: its kube-proxy
// must show a sync after that, also in a canary this run resumed (which
// sent no PATCH to count from).
func (c *connectivity) markNode(node string, at time.Time) {
	if c != nil {
		c.checker.Restarted(node, at)
	}
}

// checkDone checks every node that finished (Ready on the new template)
// since the last call, before the rollout goes on: a node that fails stops
// its canary or zone.
func (rl *rolling) checkDone(ctx context.Context) error {
	c, fleet := rl.conn, rl.fleet
	if c == nil {
		return nil
	}
	// a node finishing or going away lowers the pending count: look only then
	pending := fleet.PendingCount()
	if pending == c.pending && !c.first {
		return nil
	}
	c.pending, c.first = pending, false
	defer func() {
		r := c.checker.Report()
		rl.out.connectivity = &r
	}()
	var finished []string
	for n := range c.unchecked {
		if _, skipped := fleet.Skipped[n]; skipped {
			delete(c.unchecked, n)
		} else if fleet.Done(n) {
			finished = append(finished, n)
		}
	}
	sort.Strings(finished)
	for _, n := range finished {
		delete(c.unchecked, n)
		if err := c.checker.After(ctx, n); err != nil {
			return err
		}
	}
	return nil
}
