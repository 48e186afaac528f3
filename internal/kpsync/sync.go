// Package kpsync is the flow: capture the ConfigMap, apply the desired data,
// capture again and compare, then restart kube-proxy only when its config
// really changed (or a restart is still owed), wait, and report.
//
// Each step is a phase of its own file, built from the run's env (what
// every phase may use: the options, the clients, the clock, the log) and
// returning its part of the result, which run merges (each phase's file
// holds its merge; the result's types are in result.go):
//
//	plan     (plan.go)     capture once, decide everything, refuse bad input;
//	                       a mode change's plan and checks (migration.go)
//	lock     (lock.go)     the plan audited, the access checked, the Lease
//	apply    (apply.go)    the config the pods are to run, captured again
//	restart  (restart.go)  the one PATCH that restarts, with the fleet and
//	                       the connectivity baseline before it, or a canary
//	                       to resume
//	roll     (roll.go)     the wait, node-aware; what the run does to the
//	                       updateStrategy and the rollback (rollback.go)
//	settle   (settle.go)   the record holds what the fleet runs; the history
package kpsync

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/kube-proxy-sync/kube-proxy-sync/internal/audit"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/lock"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/rollout"
)

// Syncer runs the flow once.
type Syncer struct {
	e     *env
	lease *lock.Lease
	res   *Result
}

// New prepares a run.
func New(o Options, d Deps) *Syncer {
	id := audit.NewID()
	host, _ := os.Hostname()
	return &Syncer{
		e: newEnv(o, d, id),
		lease: &lock.Lease{Leases: d.Kube.Leases(o.Namespace), Namespace: o.Namespace, Name: LeaseName, Identity: fmt.Sprintf("%s/%d/%s", host, os.Getpid(), id),
			Duration: 30 * time.Second, Poll: time.Second, Clock: d.Clock, Log: d.Log},
		res: &Result{Facts: Facts{CheckMode: o.Check, AuditID: id, ChangedKeys: []string{}, ChangedKeysEffect: map[string]string{}, DeferredKeys: []string{}}},
	}
}

// Run runs the flow and reports it (audit log, Events). The result is filled
// as far as the run got, also when it returns an error.
func (s *Syncer) Run(ctx context.Context) (*Result, error) {
	err := s.run(ctx)
	// also when the run failed half-way: what it wrote is a change Ansible must show
	s.Partial()
	if err != nil && ctx.Err() != nil && errors.Is(err, context.Canceled) {
		err = fmt.Errorf("interrupted, nothing rolled back: %w", err)
	}
	s.report(ctx, err)
	if s.e.d.Requests != nil {
		s.res.Facts.APIRequests = s.e.d.Requests()
	}
	if err != nil {
		s.res.Msg = err.Error()
	}
	return s.res, err
}

// Partial is the result as far as the run got, with changed set from
// what it wrote: what Run returns, and what a caller reports when the run
// stopped without returning (a panic).
func (s *Syncer) Partial() *Result {
	f := s.res.Facts
	s.res.Warnings = s.e.warns.list()
	s.res.Changed = f.ConfigMapChanged || f.Restarted || f.ProbeChanged || f.RolledBack || f.Adopted || f.RecordChanged || len(f.AccessChanged) > 0 || s.res.restored != "" || s.res.wouldChange || len(s.e.healed) > 0
	return s.res
}

// run is the whole algorithm, top to bottom; each phase returns its part
// of the result, merged here as far as the run got.
func (s *Syncer) run(ctx context.Context) (err error) {
	e, res := s.e, s.res
	pl, ap, st := planner{e: e}, applier{e: e}, settler{e: e}
	rs := restarter{e: e, intent: s.intent}
	// 1. capture the ConfigMap and the DaemonSet once, decide everything;
	// bad input fails here, before anything is written
	p, err := pl.plan(ctx)
	res.mergePlan(p)
	if err != nil {
		return err
	}
	// 2. writes happen under a Lease, on a fresh capture: a run that waited
	// for another may find there is nothing left to do; a run that loses
	// the lease is cancelled. What can fail before the first write is
	// checked before it.
	switch {
	case !e.o.Check && p.writes():
		var release func(*error)
		if ctx, p, release, err = s.lock(ctx, p); err != nil {
			return err
		}
		defer release(&err)
	case p.writes():
		// check mode refuses what the lock refuses, with no audit record
		// and no Lease: a verb the run may use that RBAC denies
		if err := checkAccess(ctx, e, p); err != nil {
			return err
		}
	}
	res.decided(e, p)
	if err := pl.previewMigration(ctx, p); err != nil {
		return err
	}
	// the traffic check's own Service, made before the first write and
	// deleted when the run ends (see probeservice.go); check mode makes
	// none, and refuses what making it would refuse without it
	if p.roll.ownPort != 0 {
		ps := probeService{e: e}
		if e.o.Check {
			if _, err := ps.leftover(ctx); err != nil {
				return err
			}
		} else {
			remove, at, err := ps.create(ctx, p)
			if err != nil {
				return err
			}
			defer remove()
			p.roll.conn.serviceMade = at
		}
	}

	// 3. the config the pods are to run, captured again; the copies the
	// restart points the template at
	rvBefore := p.record.ResourceVersion // the record as the plan captured it
	p, a, err := ap.apply(ctx, p)
	res.mergeApply(e, p, a)
	if err != nil {
		return err
	}
	// kubeadm's ServiceAccount and RBAC for kube-proxy (--template
	// kubeadm), in place before any pod of the new template starts
	res.Facts.AccessChanged, err = writeAccess(ctx, e, p)
	if err != nil {
		return err
	}

	// 4. restart at most once, in one PATCH with the probe, the hash and
	// the template's volume pointed at the copy of the data it restarts
	// for; or find a canary an earlier run left half-way
	rl, r, err := rs.restart(ctx, p, a.configMapChanged)
	res.mergeRestart(r)
	if err != nil {
		return err
	}

	// 5. roll and wait, node-aware; undo the change if the new template
	// failed (never on an interrupt or the overall --timeout)
	if rl != nil {
		err := rollOut(ctx, rl, p)
		res.mergeRoll(rl.out)
		if err != nil {
			return err
		}
	}
	res.Facts.UndoConfigMap = r.ds.Annotations[rollout.PreviousConfigAnnotation]
	// 6. the record holds what the fleet runs, once no pod mounts it
	if p.writes() || p.recordLags || r.restartedPods() {
		out, err := st.settle(ctx, p, r.ds, a, rl.pods(), rvBefore)
		res.mergeSettle(out)
		if err != nil {
			return err
		}
	}
	res.Msg = s.summary()
	return nil
}

// intent writes the audit record of a restart about to be sent, with the
// restart phase's facts so far.
func (s *Syncer) intent(r restartOutcome) error {
	s.res.mergeRestart(r)
	return s.e.d.Audit.Append(s.record(audit.PhaseIntent, nil))
}
