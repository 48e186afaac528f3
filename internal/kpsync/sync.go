// Package kpsync is the flow: capture the ConfigMap, apply the desired data,
// capture again and compare, then restart kube-proxy only when its config
// really changed (or a restart is still owed), wait, and report.
//
// Each step is a phase of its own file, built from the run's env (what
// every phase may use: the options, the clients, the clock, the log) and
// returning its part of the result, which run merges (result.go):
//
//	plan     (plan.go)     capture once, decide everything, refuse bad input
//	apply    (apply.go)    the config the pods are to run, captured again
//	restart  (restart.go)  the one PATCH that restarts, or a canary to resume
//	roll     (roll.go)     the wait, node-aware; the rollback (rollback.go)
//	settle   (settle.go)   the record holds what the fleet runs; the history
package kpsync

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/kube-proxy-sync/kube-proxy-sync/internal/audit"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/configmap"
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
	s.res.Changed = f.ConfigMapChanged || f.Restarted || f.ProbeChanged || f.RolledBack || f.Adopted || f.RecordChanged || s.res.restored != "" || s.res.wouldChange
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
	if !e.o.Check && p.writes() {
		var release func(*error)
		if ctx, p, release, err = s.lock(ctx, p); err != nil {
			return err
		}
		defer release(&err)
	}
	res.decided(e, p)
	if err := pl.previewMigration(ctx, p); err != nil {
		return err
	}
	// the traffic check's own Service, made before the first write and
	// deleted when the run ends (see probeservice.go)
	if p.roll.ownPort != 0 && !e.o.Check {
		remove, err := probeService{e: e}.create(ctx, p)
		if err != nil {
			return err
		}
		defer remove()
	}

	// 3. the config the pods are to run, captured again; the copies the
	// restart points the template at
	p, a, err := ap.apply(ctx, p)
	res.mergeApply(e, p, a)
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
		err := rl.roll(ctx, p)
		if err != nil {
			err = rl.undo(ctx, p, err)
		}
		res.mergeRoll(rl.out)
		if err != nil {
			return err
		}
	}
	res.Facts.UndoConfigMap = r.ds.Annotations[rollout.PreviousConfigAnnotation]
	// 6. the record holds what the fleet runs, once no pod mounts it
	if p.writes() || p.recordLags || res.Facts.Restarted {
		out, err := st.settle(ctx, p, r.ds, a, rl.pods(), res.Facts.ResourceVersionBefore)
		res.mergeSettle(out)
		if err != nil {
			return err
		}
	}
	res.Msg = s.summary()
	return nil
}

// lock takes the Lease for a run that writes: the plan record goes to the
// audit log and the access is checked first (a full disk or a missing verb
// is found while the cluster is untouched), then the Lease, then the plan
// made again on a fresh capture (a run that waited for another may find
// nothing left to do), and a strategy an earlier run left saved is put
// back. ctx is cancelled if the Lease is lost; release gives it back and
// says so in the run's error.
func (s *Syncer) lock(ctx context.Context, p plan) (context.Context, plan, func(*error), error) {
	e := s.e
	if err := e.d.Audit.Append(s.planRecord(p)); err != nil {
		return ctx, p, nil, fmt.Errorf("before any write: %w", err)
	}
	s.res.audited = true
	if err := checkAccess(ctx, e, p); err != nil {
		return ctx, p, nil, err
	}
	held, release, err := s.lease.Acquire(ctx, e.o.LockTimeout)
	if err != nil {
		return ctx, p, nil, err
	}
	done := func(err *error) {
		defer release()
		cause := context.Cause(held)
		switch {
		case *err == nil || !errors.Is(cause, lock.ErrLost):
		case errors.Is(*err, lock.ErrLost):
			*err = fmt.Errorf("%w; stopped so that two runs never write at once; a restart not done is owed and the next run does it", *err)
		default:
			*err = fmt.Errorf("%w; stopped so that two runs never write at once: %w", cause, *err)
		}
	}
	p, err = planner{e: e}.plan(held)
	s.res.mergePlan(p)
	if err == nil {
		p.ds, s.res.restored, err = restoreStrategy(held, e, p.ds)
	}
	if err != nil {
		done(&err)
		return ctx, p, nil, err
	}
	return held, p, done, nil
}

// intent writes the audit record of a restart about to be sent, with the
// restart phase's facts so far.
func (s *Syncer) intent(r restartOutcome) error {
	s.res.mergeRestart(r)
	return s.e.d.Audit.Append(s.record(audit.PhaseIntent, nil))
}

// Each phase returns its part of the result; these merge them, as far as
// the phase got, so that a failed run reports what it did.

// mergePlan takes what the plan captured and decided.
func (r *Result) mergePlan(p plan) {
	f := &r.Facts
	if p.record != nil {
		f.ResourceVersionBefore, f.ResourceVersionAfter = p.record.ResourceVersion, p.record.ResourceVersion
	}
	if p.ds != nil {
		r.mountedBefore = p.mounted
		f.ImageBefore, f.Image, f.ImageChanged = p.imageBefore, p.imageBefore, p.image != ""
		if p.image != "" {
			f.Image = p.image
		}
	}
	if p.deferred != nil {
		f.DeferredKeys = p.deferred
	}
	if p.modeDecided {
		f.Migration = p.migration
	}
}

// decided takes what the plan the run goes on with says it changes.
func (r *Result) decided(e *env, p plan) {
	f := &r.Facts
	if _, saved, _ := rollout.SavedStrategy(p.ds); e.o.Check && saved && !rollout.CanaryLeftover(p.ds) {
		// what the real run's restoreStrategy would write
		r.wouldChange = true
	}
	f.ChangedKeys, f.ProbePath, f.KubeProxyVersion = p.keys, p.probe.path, p.probe.version
	f.ChangedKeysEffect = p.effects
	r.Diff = diffOf(e, p.before.Data, p.desired, p.effects)
}

func (r *Result) mergeApply(e *env, p plan, a applied) {
	f := &r.Facts
	f.ConfigMapChanged = a.configMapChanged
	f.RecordChanged = f.RecordChanged || a.recordChanged
	if a.rvAfter != "" {
		f.ResourceVersionAfter = a.rvAfter
	}
	f.ResourceVersionChanged = f.ResourceVersionAfter != f.ResourceVersionBefore
	if a.configMapName != "" {
		f.ConfigMapName = a.configMapName
	}
	if p.copy != "" {
		f.ConfigMapName = p.copy // the copy the restart points the template at
	}
	if a.deferred != nil {
		f.DeferredKeys, f.ChangedKeys, f.ChangedKeysEffect = a.deferred, p.keys, p.effects
		r.Diff = diffOf(e, p.before.Data, p.desired, p.effects)
		if p.keys == nil {
			f.ChangedKeys = []string{}
		}
	}
	if a.changedKeys != nil {
		f.ChangedKeys, r.Diff = a.changedKeys, diffOf(e, p.before.Data, a.after.Data, p.effects)
	}
}

func (r *Result) mergeRestart(o restartOutcome) {
	f := &r.Facts
	if o.decided {
		f.RestartRequired, f.RestartReason = o.required, o.reason
		f.Restarted, f.Adopted, f.ProbeChanged = o.restarted, o.adopted, o.probeChanged
		f.Image, f.ImageBefore, f.ImageChanged = o.image, o.imageBefore, o.imageChanged
	}
	if o.configMapName != "" {
		f.ConfigMapName, f.PreviousConfigMap = o.configMapName, o.previousConfigMap
	}
	if o.observed {
		f.Rollout.SkippedNodes, f.Rollout.UnreadyBefore = o.skipped, o.unreadyBefore
	}
	r.mergeResume(o.resume)
	if o.idle != nil {
		f.Rollout = *o.idle
	}
}

func (r *Result) mergeResume(o resumeOutcome) {
	f := &r.Facts
	if o.owed && !f.RestartRequired {
		f.RestartRequired, f.RestartReason = true, ReasonPending
	}
	if o.restarted {
		f.RestartRequired, f.Restarted = true, true
		if f.RestartReason == "" {
			f.RestartReason = ReasonPending
		}
	}
	r.wouldChange = r.wouldChange || o.wouldChange
	if o.observed {
		f.Rollout.SkippedNodes, f.Rollout.UnreadyBefore = o.skipped, o.unreadyBefore
	}
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

func (r *Result) mergeSettle(o settled) {
	f := &r.Facts
	if o.configMapName != "" {
		f.ConfigMapName = o.configMapName
	}
	f.RecordChanged = f.RecordChanged || o.recordChanged
	if o.rvAfter != "" {
		f.ResourceVersionAfter = o.rvAfter
		f.ResourceVersionChanged = o.rvAfter != f.ResourceVersionBefore
	}
}

// diffOf is Ansible's diff of the data before and after (nil without --diff).
func diffOf(e *env, before, after, effects map[string]string) *Diff {
	if !e.o.Diff {
		return nil
	}
	render := func(data map[string]string) string {
		b, _ := yaml.Marshal(configmap.RedactData(data))
		return string(b)
	}
	name := fmt.Sprintf("configmap %s/%s data", e.o.Namespace, e.o.ConfigMap)
	d := &Diff{Before: render(before), After: render(after), BeforeHeader: name + " (before)", AfterHeader: name + " (after)"}
	if len(effects) > 0 {
		keys := make([]string, 0, len(effects))
		for k := range effects {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		var parts []string
		for _, k := range keys {
			parts = append(parts, k+": "+effects[k])
		}
		d.AfterHeader = fmt.Sprintf("%s (after; effect on the running kube-proxy: %s)", name, strings.Join(parts, ", "))
	}
	return d
}
