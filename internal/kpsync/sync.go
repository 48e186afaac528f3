// Package kpsync is the flow: capture the ConfigMap, apply the desired data,
// capture again and compare, then restart kube-proxy only when its config
// really changed (or a restart is still owed), wait, and report.
package kpsync

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/sirupsen/logrus"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/clock"
	"sigs.k8s.io/yaml"

	"github.com/kube-proxy-sync/kube-proxy-sync/internal/audit"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/configmap"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/kube"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/lock"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/nodes"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/rollout"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/verify"
)

// Restart policies.
const (
	RestartAuto   = "auto"
	RestartAlways = "always"
	RestartNever  = "never"
)

// Rollout strategies.
const (
	StrategyRolling = "rolling"
	StrategyCanary  = "canary"
)

// LeaseName is the coordination.k8s.io Lease that serialises runs.
const LeaseName = "kube-proxy-sync"

// Options is what the user asked for, already validated.
type Options struct {
	Namespace string
	ConfigMap string
	DaemonSet string
	Container string
	// Image, when set, is the image the container should run (kubeadm's
	// rendering of an upgrade): a different one is a template change,
	// rolled like a config change, and rolled back with it.
	Image            string
	Spec             configmap.Spec
	ProbePath        string
	KubeProxyVersion string
	Restart          string
	// Timeout bounds the whole rollout (0: none); reaching it rolls nothing back.
	Timeout time.Duration
	// ProgressDeadline fails the rollout when no node finished for this
	// long (0: derived from the pod's timings, see ProgressDeadline).
	ProgressDeadline time.Duration
	Check            bool
	Diff             bool
	LockTimeout      time.Duration
	Nodes            nodes.Policy
	Strategy         string
	CanaryNodes      int
	// ZoneLabel, with the canary strategy, makes it zonal: nodes grouped
	// by this label's value, restarted one zone at a time.
	ZoneLabel string
	// BatchSize is "N" or "P%" of the live nodes; empty means the
	// DaemonSet's own maxUnavailable.
	BatchSize string
	Verify    bool
	// VerifyEndpoints is how many live nodes --verify also asks for kube-proxy's
	// health endpoint through the API server's node proxy (0: none).
	VerifyEndpoints int
	// RollbackOnFailure (the default; --no-rollback turns it off) restores
	// the ConfigMap data and the pod template when the new template fails.
	RollbackOnFailure bool
	// Connectivity: checks of each node's kube-proxy before and after its restart.
	Connectivity ConnectivityOptions
	// History is how many copies of the config are kept besides those in
	// use (0: DefaultHistory).
	History int
	// Undo restores the config the fleet ran before the last change
	// (rollout.PreviousConfigAnnotation) instead of applying Spec.
	Undo bool
}

// Deps are passed in, so tests can use a fake clientset (kubefake) and clock.
type Deps struct {
	Kube     kube.Interface
	Clock    clock.WithTicker
	Log      *logrus.Entry
	Audit    audit.Log
	Server   string
	Requests func() int64
	// Step, when set, is called at each step boundary (StepConfigMapWritten,
	// StepDaemonSetPatched, StepWaiting, StepCanaryDone, StepRecordWrite);
	// crash tests block there and kill the process.
	Step func(ctx context.Context, step string)
	// NodeProxy builds the prober of kube-proxy's /healthz on a port, for
	// --verify-health.
	NodeProxy func(port int) (verify.Prober, error)
}

// Step boundaries passed to Deps.Step.
const (
	StepConfigMapWritten = "after-configmap-write"
	StepDaemonSetPatched = "after-daemonset-patch"
	StepWaiting          = "during-wait"
	// StepCanaryDone: the canary nodes run a Ready kube-proxy of the new
	// template and no other node's pod was deleted yet (canary strategy)
	StepCanaryDone = "after-canary"
	// StepRecordWrite: the rollout is done, the record not written yet
	StepRecordWrite = "before-record-write"
)

// Syncer runs the flow once.
type Syncer struct {
	o   Options
	d   Deps
	cms configmap.Client
	// copies are the immutable copies of the record the template mounts
	copies configmap.Copies
	dss    rollout.Client
	lease  *lock.Lease
	res    *Result
	// restoredStrategy says what restoreStrategy put back ("" : nothing),
	// a write of this run
	restoredStrategy string
	// wouldChange: check mode found a write a real run would make that
	// the facts do not show (a saved strategy to restore, a canary to resume)
	wouldChange bool
	// planned: the plan record is in the audit log, so an outcome follows
	// whatever the run then finds to do
	planned bool
}

// New prepares a run.
func New(o Options, d Deps) *Syncer {
	id := audit.NewID()
	host, _ := os.Hostname()
	return &Syncer{
		o:      o,
		d:      d,
		cms:    configmap.Client{ConfigMaps: d.Kube.ConfigMaps(o.Namespace), Namespace: o.Namespace, Name: o.ConfigMap},
		copies: configmap.Copies{ConfigMaps: d.Kube.ConfigMaps(o.Namespace), Namespace: o.Namespace, Record: o.ConfigMap},
		dss: rollout.Client{DaemonSets: d.Kube.DaemonSets(o.Namespace), Revisions: d.Kube.ControllerRevisions(o.Namespace), Pods: d.Kube.Pods(o.Namespace), Nodes: d.Kube.Nodes(),
			Namespace: o.Namespace, Name: o.DaemonSet, Clock: d.Clock, Log: d.Log},
		lease: &lock.Lease{Leases: d.Kube.Leases(o.Namespace), Namespace: o.Namespace, Name: LeaseName, Identity: fmt.Sprintf("%s/%d/%s", host, os.Getpid(), id),
			Duration: 30 * time.Second, Poll: time.Second, Clock: d.Clock, Log: d.Log},
		res: &Result{Facts: Facts{CheckMode: o.Check, AuditID: id, ChangedKeys: []string{}, ChangedKeysEffect: map[string]string{}, DeferredKeys: []string{}}},
	}
}

// Run runs the flow and reports it (audit log, Events). The result is filled
// as far as the run got, also when it returns an error.
func (s *Syncer) Run(ctx context.Context) (*Result, error) {
	err := s.run(ctx)
	if m := s.res.Facts.Migration; m != nil && len(s.res.Facts.Rollout.CanaryNodes) > 0 {
		m.CanaryNodes = s.res.Facts.Rollout.CanaryNodes // the ones the rollout picked
	}
	// also when the run failed half-way: what it wrote is a change Ansible must show
	s.Partial()
	if err != nil && ctx.Err() != nil && errors.Is(err, context.Canceled) {
		err = fmt.Errorf("interrupted, nothing rolled back: %w", err)
	}
	s.report(ctx, err)
	s.res.Facts.APIRequests = s.requests()
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
	s.res.Changed = f.ConfigMapChanged || f.Restarted || f.ProbeChanged || f.RolledBack || f.Adopted || f.RecordChanged || s.restoredStrategy != "" || s.wouldChange
	return s.res
}

// run is the whole algorithm, top to bottom.
func (s *Syncer) run(ctx context.Context) (err error) {
	// 1. capture the ConfigMap and the DaemonSet, compute everything; bad
	// input fails here, before anything is written
	p, err := s.plan(ctx)
	if err != nil {
		return err
	}
	// 2. writes happen under a Lease, on a fresh capture: a run that waited
	// for another may find there is nothing left to do; a run that loses
	// the lease is cancelled. What can fail before the first write is
	// checked before it.
	if !s.o.Check && p.writes() {
		var release func(*error)
		if ctx, p, release, err = s.lock(ctx, p); err != nil {
			return err
		}
		defer release(&err)
	}
	if _, saved, _ := rollout.SavedStrategy(p.ds); s.o.Check && saved && !rollout.CanaryLeftover(p.ds) {
		// what the real run's restoreStrategy would write
		s.wouldChange = true
	}
	f := &s.res.Facts
	f.ChangedKeys, f.ProbePath, f.KubeProxyVersion = p.keys, p.probe.path, p.probe.version
	f.ChangedKeysEffect = p.effects
	s.diff(p.before.Data, p.desired, p.effects)
	if err := s.previewMigration(ctx, p); err != nil {
		return err
	}

	// 3. the config the pods are to run, captured again
	p, after, afterName, err := s.apply(ctx, p)
	if err != nil {
		return err
	}

	// 4. restart at most once, in one PATCH with the probe, the hash and
	// the template's volume pointed at the copy of the data it restarts for
	p, target, err := s.prepareRestart(ctx, p, after)
	if err != nil {
		return err
	}
	rl, latest, err := s.restart(ctx, p, target)
	if err != nil {
		return err
	}

	// 5. roll and wait, node-aware; undo the change if the new template
	// failed (never on an interrupt or the overall --timeout)
	if rl, err = s.leftover(ctx, p, rl); err != nil {
		return err
	}
	if rl == nil {
		f.Rollout = rollout.StatusOf(p.ds)
		f.Rollout.SkippedNodes, f.Rollout.UnreadyBefore = []nodes.Skipped{}, []string{}
	} else if err := rl.roll(ctx, p); err != nil {
		return rl.undo(ctx, p, err)
	}
	f.UndoConfigMap = latest.Annotations[rollout.PreviousConfigAnnotation]
	// 6. the record holds what the fleet runs, once no pod mounts it
	if p.writes() || p.recordLags || f.Restarted {
		if err := s.settle(ctx, p, latest, afterName, after, rl.pods()); err != nil {
			return err
		}
	}
	s.res.Msg = s.summary()
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
	if err := s.d.Audit.Append(s.planRecord(p)); err != nil {
		return ctx, p, nil, fmt.Errorf("before any write: %w", err)
	}
	s.planned = true
	if err := s.checkAccess(ctx, p); err != nil {
		return ctx, p, nil, err
	}
	held, release, err := s.lease.Acquire(ctx, s.o.LockTimeout)
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
	if p, err = s.plan(held); err == nil {
		p.ds, s.restoredStrategy, err = s.restoreStrategy(held, p.ds)
	}
	if err != nil {
		done(&err)
		return ctx, p, nil, err
	}
	return held, p, done, nil
}

// apply makes the config the pods are to run: a change is a new immutable copy
// (no running kube-proxy reads it yet); a change with no effect on the
// running kube-proxies is written to the record, which the template
// does not mount then (see plan). Then capture it again.
func (s *Syncer) apply(ctx context.Context, p plan) (_ plan, after configmap.Snapshot, afterName string, err error) {
	f := &s.res.Facts
	afterName = s.o.ConfigMap // the ConfigMap after was captured from
	if len(p.keys) > 0 && p.noEffect && !s.o.Check {
		// the record on the DaemonSet comes first; it clears noEffect when
		// the DaemonSet moved so that its pods no longer run the data
		// before the change: then the change restarts as usual, on a copy
		if err := s.markNoEffect(ctx, &p); err != nil {
			return p, after, afterName, err
		}
	}
	switch {
	case s.o.Check:
		after = p.before
		if len(p.keys) > 0 && !p.noEffect {
			f.ConfigMapName = configmap.CopyName(s.o.ConfigMap, p.target)
		}
	case len(p.keys) > 0 && p.noEffect:
		if err := s.writeConfigMap(ctx, p.cm, p.desired); err != nil {
			return p, after, afterName, err
		}
		f.ConfigMapChanged, f.RecordChanged = true, true
		s.step(ctx, StepConfigMapWritten)
		cm, err := s.cms.Get(ctx)
		if err != nil {
			return p, after, afterName, err
		}
		after = configmap.NewSnapshot(cm)
		p.cm = cm // the record as this run wrote it
		f.ResourceVersionAfter = cm.ResourceVersion
	case len(p.keys) > 0:
		if err := s.ensureCopy(ctx, &p, p.desired); err != nil {
			return p, after, afterName, err
		}
		f.ConfigMapChanged = true // until the capture below says otherwise
		s.step(ctx, StepConfigMapWritten)
		afterName = configmap.CopyName(s.o.ConfigMap, p.target)
		cp, err := s.copies.Get(ctx, afterName)
		if err != nil {
			return p, after, afterName, err
		}
		after = configmap.NewSnapshot(cp)
	default:
		// nothing written: the ConfigMap the data came from, captured again
		afterName = p.base.Name
		cm, err := s.copies.Get(ctx, afterName)
		if err != nil {
			return p, after, afterName, err
		}
		after = configmap.NewSnapshot(cm)
		if p.base.Name == s.o.ConfigMap {
			f.ResourceVersionAfter = cm.ResourceVersion
		}
	}
	f.ResourceVersionChanged = f.ResourceVersionAfter != f.ResourceVersionBefore
	f.ConfigMapChanged = after.Hash != p.before.Hash || (s.o.Check && len(p.keys) > 0)
	if !s.o.Check && after.Hash != p.target {
		return p, after, afterName, s.changedUnder(p, after, afterName)
	}
	if f.ConfigMapName == "" {
		f.ConfigMapName = p.mounted
	}
	return p, after, afterName, nil
}

// prepareRestart is the hash the restart stamps; a restart gets the copy
// of the data it restarts for (every restart moves the template onto a
// copy), and the copy of the data it leaves, for an undo.
func (s *Syncer) prepareRestart(ctx context.Context, p plan, after configmap.Snapshot) (_ plan, target string, err error) {
	target = after.Hash
	if s.o.Check {
		target = p.target // what a real run would stamp
	} else if (p.reason != "" || p.probe.changes()) && s.o.Restart != RestartNever {
		// every restart moves the template onto a copy: kubeadm's layout
		// and clusters of an earlier version move with their next restart
		if err := s.ensureCopy(ctx, &p, after.Data); err != nil {
			return p, "", err
		}
		if p.copy != "" {
			if err := s.keepPrevious(ctx, &p); err != nil {
				return p, "", err
			}
		}
	}
	return p, target, nil
}

// leftover finishes an earlier canary rollout that stopped half-way on
// this template (when this run restarts nothing itself): what to roll
// (nil: nothing).
func (s *Syncer) leftover(ctx context.Context, p plan, rl *rolling) (*rolling, error) {
	f := &s.res.Facts
	switch {
	case rl != nil || !rollout.CanaryLeftover(p.ds):
		return rl, nil
	case s.o.Check || s.o.Restart == RestartNever:
		// an earlier canary stopped half-way: its old pods are a restart
		// owed, and --restart never deletes no pod (check mode: would resume)
		s.d.Log.Infof("daemonset %s/%s is on OnDelete from a canary rollout that did not finish: not resumed (--restart %s, check mode %t), the restart of its remaining old pods is owed", s.o.Namespace, s.o.DaemonSet, s.o.Restart, s.o.Check)
		if !f.RestartRequired {
			f.RestartRequired, f.RestartReason = true, ReasonPending
		}
		// check mode says what a real run would do: resume, a change
		s.wouldChange = s.wouldChange || (s.o.Check && s.o.Restart != RestartNever)
		return nil, nil
	}
	// an earlier canary stopped half-way on this template: finish it
	s.d.Log.Infof("daemonset %s/%s is on OnDelete from a canary rollout that did not finish: resuming it", s.o.Namespace, s.o.DaemonSet)
	fleet, err := s.observe(ctx, p.ds, true)
	if err != nil {
		return nil, err
	}
	if fleet.PendingCount() > 0 {
		// old pods to delete: a restart, reported and audited as one
		f.RestartRequired, f.Restarted = true, true
		if f.RestartReason == "" {
			f.RestartReason = ReasonPending
		}
		if err := s.d.Audit.Append(s.record(audit.PhaseIntent, nil)); err != nil {
			return nil, err
		}
	}
	return &rolling{s: s, fleet: fleet, strategy: StrategyCanary, resumed: true}, nil
}

// plan is everything one capture tells us.
type plan struct {
	// cm is the record ConfigMap (--configmap), base the ConfigMap whose
	// data the fleet runs (the record, or the copy the template mounts
	// when the record lags behind it, see Syncer.base), before its snapshot
	cm     *corev1.ConfigMap
	base   *corev1.ConfigMap
	ds     *appsv1.DaemonSet
	before configmap.Snapshot
	// volume is the template's volume of the config, mounted the
	// ConfigMap it names before the run ("" when it mounts neither the
	// record nor a copy), copy the copy this run points it at
	volume, mounted, copy string
	// recordLags: the record does not hold the data the fleet runs
	recordLags bool
	// previous is the copy of the data the fleet runs before this run
	// (see keepPrevious), recorded by the restart that moves the template
	previous string
	desired  map[string]string
	keys     []string
	// target is the hash the data will have once written.
	target string
	// effects: each changed key's effect on the running kube-proxies;
	// noEffect: none has any and the pods run the data before the change,
	// so the change is written without a restart (see effect.go)
	effects  map[string]string
	noEffect bool
	probe    probePlan
	// reason and adopt: what the DaemonSet needs given target
	reason string
	adopt  bool
	// resume: an earlier canary stopped half-way, and this run may finish it
	resume bool
	// image is the container image the restart sets ("" : unchanged)
	image string
}

// next is the DaemonSet as the restart leaves its template's image: the
// kube-proxy version the new pods run, whose rules validate the config
// and choose the probe.
func (p plan) next(container string) *appsv1.DaemonSet {
	return withImage(p.ds, container, p.image)
}

// withImage is ds with the container's image replaced by image (ds itself
// when image is "").
func withImage(ds *appsv1.DaemonSet, container, image string) *appsv1.DaemonSet {
	if image == "" {
		return ds
	}
	out := ds.DeepCopy()
	for i := range out.Spec.Template.Spec.Containers {
		if out.Spec.Template.Spec.Containers[i].Name == container {
			out.Spec.Template.Spec.Containers[i].Image = image
		}
	}
	return out
}

// imageChange is the image the restart sets given ds: --image when the
// container runs another one, else "".
func (s *Syncer) imageChange(ds *appsv1.DaemonSet) string {
	if s.o.Image == "" || s.o.Undo || rollout.ContainerImage(ds, s.o.Container) == s.o.Image {
		return ""
	}
	return s.o.Image
}

// writes reports whether the run has anything to write.
func (p plan) writes() bool {
	_, saved := p.ds.Annotations[rollout.StrategyAnnotation]
	return len(p.keys) > 0 || p.reason != "" || p.adopt || p.probe.changes() || (saved && !rollout.CanaryLeftover(p.ds)) || p.resume || p.recordLags
}

func (s *Syncer) plan(ctx context.Context) (plan, error) {
	var p plan
	cm, err := s.cms.Get(ctx)
	if err != nil {
		return p, err
	}
	p.cm = cm
	f := &s.res.Facts
	f.ResourceVersionBefore, f.ResourceVersionAfter = cm.ResourceVersion, cm.ResourceVersion
	if p.ds, err = s.dss.Get(ctx); err != nil {
		return p, err
	}
	p.volume, p.mounted = configVolume(p.ds, s.o.Container, s.o.ConfigMap)
	f.ImageBefore, f.Image, f.ImageChanged = rollout.ContainerImage(p.ds, s.o.Container), rollout.ContainerImage(p.ds, s.o.Container), false
	if p.image = s.imageChange(p.ds); p.image != "" {
		f.Image, f.ImageChanged = p.image, true
		if _, err := findContainer(p.ds, s.o.Container); err != nil {
			return p, err
		}
		if s.o.Restart == RestartNever {
			return p, fmt.Errorf("daemonset %s/%s: container %s runs %s, and the image asked is %s: an image change restarts every pod, which --restart never does not do; nothing was changed: run with --restart auto, or without the image",
				s.o.Namespace, s.o.DaemonSet, s.o.Container, rollout.ContainerImage(p.ds, s.o.Container), p.image)
		}
	}
	if p.base, err = s.base(ctx, cm, p.ds, p.mounted); err != nil {
		return p, err
	}
	p.before = configmap.NewSnapshot(p.base)
	p.recordLags = p.base != cm && p.before.Hash != configmap.Hash(cm.Data, cm.BinaryData)
	if s.o.Undo {
		if p.desired, p.keys, err = s.undoTo(ctx, p); err != nil {
			return p, err
		}
	} else if p.desired, p.keys, err = configmap.Desired(p.base.Data, s.o.Spec); err != nil {
		return p, fmt.Errorf("configmap %s/%s: %w", s.o.Namespace, p.base.Name, err)
	}
	if p.probe, err = s.planProbe(ctx, p.next(s.o.Container), p.desired); err != nil {
		return p, err
	}
	p.target = p.before.Hash
	if len(p.keys) > 0 {
		p.target = configmap.Hash(p.desired, cm.BinaryData)
	}
	var none bool
	p.effects, none = keyEffects(p.base.Data, p.desired, p.keys, s.effectTargets(p.ds))
	p.noEffect = none && s.o.Restart != RestartAlways && rollout.Runs(p.ds, p.before.Hash)
	if len(p.keys) > 0 && !p.noEffect && p.volume == "" {
		return p, fmt.Errorf("daemonset %s/%s: container %s mounts configmap %s/%s in no volume: kube-proxy-sync points that volume at a copy of the new config, so nothing was written; mount it as kubeadm does (a configMap volume) and run again",
			s.o.Namespace, s.o.DaemonSet, s.o.Container, s.o.Namespace, s.o.ConfigMap)
	}
	p.reason, p.adopt = decide(s.o.Restart, len(p.keys) > 0, p.ds, p.target, p.noEffect, s.mountsCopyOf(p.ds, p.volume, p.target))
	if p.reason == "" && p.image != "" {
		p.reason = ReasonImageChanged
	}
	p.resume = rollout.CanaryLeftover(p.ds) && s.o.Restart != RestartNever
	if err := s.validateConfig(p.next(s.o.Container), p); err != nil {
		return p, err
	}
	if err := s.planMigration(ctx, &p); err != nil {
		return p, err
	}
	s.warnInsecureTLS(p.desired)
	if p.noEffect && (p.mounted == s.o.ConfigMap || p.recordLags) && len(p.keys) > 0 {
		// validated, but the record is what the pods mount (or lags
		// behind them): no write; the change waits for the next run that
		// restarts
		s.warn(fmt.Sprintf("configmap %s/%s: %s changed with no effect on the running kube-proxies; not written while daemonset %s/%s mounts it: the next run that restarts kube-proxy carries it",
			s.o.Namespace, s.o.ConfigMap, strings.Join(p.keys, ", "), s.o.Namespace, s.o.DaemonSet))
		f.DeferredKeys = p.keys
		p.keys, p.desired, p.effects, p.target = nil, p.base.Data, map[string]string{}, p.before.Hash
	}
	if (p.reason != "" || p.probe.changes()) && s.o.Strategy == StrategyRolling &&
		p.ds.Spec.UpdateStrategy.Type == appsv1.OnDeleteDaemonSetStrategyType && p.ds.Annotations[rollout.StrategyAnnotation] == "" {
		return p, fmt.Errorf("daemonset %s/%s uses updateStrategy OnDelete, so a rollout restart would replace no pod; use --strategy canary (kube-proxy-sync deletes the pods in batches) or switch it to RollingUpdate", s.o.Namespace, s.o.DaemonSet)
	}
	return p, nil
}

// decide says whether and why to restart, given the DaemonSet as it is now
// and the hash of the data its pods should run with. noEffect: the change
// has no effect on the running kube-proxies, which run the data before it.
// mountsTarget: the template mounts the copy of that data already (after
// `kubectl rollout undo`, say): the DaemonSet controller rolls it, and the
// DaemonSet is stamped for it without a restart.
func decide(policy string, configChanged bool, ds *appsv1.DaemonSet, hash string, noEffect, mountsTarget bool) (reason string, adopt bool) {
	_, ok := ds.Annotations[rollout.HashAnnotation]
	switch {
	case policy == RestartAlways:
		return ReasonForced, false
	case rollout.Runs(ds, hash):
		// pods were already restarted for exactly this data (maybe by a
		// concurrent run that won the race), or run it as well: never
		// twice for one change
		return "", false
	case configChanged && noEffect:
		return "", false // the caller records that the pods run it as well
	case mountsTarget:
		return "", true
	case configChanged:
		return ReasonConfigChanged, false
	case ok:
		return ReasonPending, false
	}
	return "", true
}

// applyFresh sends the change that build makes of the DaemonSet and, on a
// conflict (the controller writes status all the time), reads it again and
// asks build again (reread is then true). When build returns false nothing
// is sent. It returns the DaemonSet as last read or written.
func (s *Syncer) applyFresh(ctx context.Context, ds *appsv1.DaemonSet, build func(ds *appsv1.DaemonSet, reread bool) (rollout.Change, bool)) (*appsv1.DaemonSet, error) {
	reread := false
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if reread {
			latest, err := s.dss.Get(ctx)
			if err != nil {
				return err
			}
			ds = latest
		}
		ch, send := build(ds, reread)
		reread = true
		if !send {
			return nil
		}
		patched, err := s.dss.Apply(ctx, ch)
		if err == nil {
			ds = patched
		}
		return err
	})
	return ds, err
}

// writeConfigMap writes the desired data, the whole of it, with an update
// carrying the resourceVersion of the capture it was computed from; on a
// conflict it computes it again on top of the other writer's version. A
// --manifest is written this way too: with server-side apply the API
// server removes every key our field manager applied before and now leaves
// out, so a manifest with only kubeconfig.conf deleted the config.conf an
// earlier manifest had set. An update removes no key it carries, and it
// carries them all.
func (s *Syncer) writeConfigMap(ctx context.Context, cm *corev1.ConfigMap, desired map[string]string) error {
	// one update carrying the resourceVersion the data was validated on:
	// another writer in between makes it a conflict, and the run stops
	// rather than write on top of data nobody validated
	_, err := s.cms.Update(ctx, cm, desired)
	if apierrors.IsConflict(err) {
		return fmt.Errorf("%w; configmap %s/%s changed after this run read and validated it (another writer): this run wrote nothing; run again, it validates and applies on top of the new data", err, s.o.Namespace, s.o.ConfigMap)
	}
	return err
}

// changedUnder reports a capture whose data is not what the run validated
// and wrote (or, writing nothing, left): another writer's, or a key the
// write did not keep. Every key that differs from the capture before goes
// into changed_keys, the diff and so the audit log, and nothing restarts
// onto data that was never validated: the DaemonSet's stamp is still the
// data's before, so the restart is owed and the next run validates the
// data as it is then.
func (s *Syncer) changedUnder(p plan, after configmap.Snapshot, name string) error {
	keys := append([]string{}, p.keys...)
	var what []string
	all := map[string]bool{}
	for _, m := range []map[string]string{p.before.Data, p.desired, after.Data} {
		for k := range m {
			all[k] = true
		}
	}
	for k := range all {
		want, wrote := p.desired[k]
		got, there := after.Data[k]
		switch {
		case wrote && !there:
			what = append(what, "key "+k+" removed")
		case !wrote && there:
			what = append(what, "key "+k+" added")
		case want != got:
			what = append(what, "key "+k+" changed")
		}
		old, was := p.before.Data[k]
		covered := slices.ContainsFunc(keys, func(c string) bool { return c == k || strings.HasPrefix(c, k+":") })
		if was != there || (old != got && !covered) {
			keys = append(keys, k)
		}
	}
	if configmap.Hash(nil, p.before.BinaryData) != configmap.Hash(nil, after.BinaryData) {
		what = append(what, "binaryData changed")
	}
	sort.Strings(what)
	sort.Strings(keys)
	s.res.Facts.ChangedKeys = slices.Compact(keys)
	s.diff(p.before.Data, after.Data, p.effects)
	verb := "wrote"
	if len(p.keys) == 0 {
		verb = "found"
	}
	return fmt.Errorf("configmap %s/%s is not what this run %s: %s (another writer, or a write that did not keep it); nothing restarted onto data that was not validated: the restart is owed, and the next run validates the data as it is then and does it",
		s.o.Namespace, name, verb, strings.Join(what, ", "))
}

// restart decides and sends the one PATCH (hash, restart, probe, and for a
// canary the switch to OnDelete). It returns the DaemonSet as last read or
// written and, when pods are to roll, what the rollout needs: the fleet as
// observed just before the PATCH, and what the PATCH did.
func (s *Syncer) restart(ctx context.Context, p plan, hash string) (*rolling, *appsv1.DaemonSet, error) {
	if ctx.Err() != nil {
		// interrupted, or the lease was lost: never restart then (the
		// restart is owed, and the next run does it)
		return nil, p.ds, context.Cause(ctx)
	}
	f := &s.res.Facts
	ds := p.ds
	rl := &rolling{s: s, strategy: s.o.Strategy}
	var sent *rollout.Change       // the restart PATCH last sent
	var observed *appsv1.DaemonSet // the DaemonSet the fleet was listed for
	first := true
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if !first {
			// another writer moved the DaemonSet (maybe another run restarted it): decide again
			latest, err := s.dss.Get(ctx)
			if err != nil {
				return err
			}
			ds = latest
			if sent != nil && sent.AppliedTo(ds) {
				// our own PATCH: applied, but its response was lost and the
				// transport's repeat got the conflict (writes are under the
				// lease, so no other run wrote this restartedAt and hash)
				s.d.Log.Infof("daemonset %s/%s already has this run's restart (restartedAt %s): its response was lost", s.o.Namespace, s.o.DaemonSet, sent.RestartedAt())
				if sent.SaveStrategy != "" {
					rl.strategyChanged = true // its raise or OnDelete is in too
				}
				f.Restarted = true
				return nil
			}
			if p.probe, err = s.planProbe(ctx, withImage(ds, s.o.Container, s.imageChange(ds)), p.desired); err != nil {
				return err
			}
		}
		first = false
		ch, reason, adopted := s.patchFor(p, ds, hash)
		if s.o.Restart == RestartNever && reason != "" && p.copy != "" && ds.Annotations[rollout.PendingConfigAnnotation] != p.copy && !s.o.Check {
			// the config is in its copy, which no pod mounts: the restart
			// onto it is owed, and the DaemonSet says so for the next run
			patched, err := s.dss.Apply(ctx, rollout.Change{ResourceVersion: ds.ResourceVersion, Pending: p.copy})
			if err == nil {
				ds = patched
			}
			return err
		}
		if ch.Hash == "" || s.o.Check {
			f.Adopted = adopted && s.o.Check // what a real run would write
			return nil
		}
		if ch.Restarts() {
			var err error
			if observed, err = s.readyToRestart(ctx, p, ds, &ch, rl, observed); err != nil {
				return err
			}
			sent = &ch
		}
		patched, err := s.dss.Apply(ctx, ch)
		if err != nil {
			return err
		}
		if ch.Restarts() && rollout.TemplateGeneration(patched) < ch.TemplateGeneration {
			if ch.SaveStrategy != "" {
				rl.finishStrategy(ctx)
			}
			return fmt.Errorf("daemonset %s/%s: the restart PATCH left its pod template as it was (template generation still %d), so no pod is replaced; something (an admission webhook or policy?) dropped the change from it (%s %q, or the probe): the restart stays owed (the stamped %s holds only once the template moves), fix that and run again",
				s.o.Namespace, s.o.DaemonSet, rollout.TemplateGeneration(patched), rollout.RestartedAtAnnotation, ch.RestartedAt(), rollout.HashAnnotation)
		}
		if ch.SaveStrategy != "" { // saved only once the PATCH is in
			rl.strategyChanged = true
		}
		ds = patched
		f.Restarted, f.Adopted = ch.Restarts(), adopted
		if ch.ConfigMap != "" {
			f.ConfigMapName, f.PreviousConfigMap = ch.ConfigMap, p.mounted
		}
		if adopted {
			s.d.Log.Infof("adopted daemonset %s/%s: stamped %s, no restart", s.o.Namespace, s.o.DaemonSet, rollout.HashAnnotation)
		}
		return nil
	})
	if err != nil || !f.Restarted {
		return nil, ds, err
	}
	rl.fleet.SetGeneration(rollout.TemplateGeneration(ds))
	rl.ds = ds
	return rl, ds, nil
}

// readyToRestart makes the restart PATCH ch ready to send on ds: the
// fleet observed before it, the connectivity baseline, the rollout's
// updateStrategy, the intent in the audit log, the template generation it
// moves to. observed is the DaemonSet the fleet was listed for, returned
// as it is then: a conflict is most often the DaemonSet controller writing
// status, and the pods listed for the same spec still hold (the watch
// replays everything since that list), while listing 5000 nodes and pods
// again would take long enough for the next status write to conflict too.
func (s *Syncer) readyToRestart(ctx context.Context, p plan, ds *appsv1.DaemonSet, ch *rollout.Change, rl *rolling, observed *appsv1.DaemonSet) (*appsv1.DaemonSet, error) {
	var err error
	if rl.fleet == nil || observed.UID != ds.UID || observed.Generation != ds.Generation {
		if rl.fleet, err = s.observe(ctx, ds, false); err != nil {
			return observed, err
		}
		observed = ds
	}
	if rl.conn == nil {
		if rl.conn, err = s.baseline(ctx, rl.fleet, p.probe.port); err != nil {
			return observed, err
		}
	}
	if err := s.strategy(ch, ds, rl); err != nil {
		return observed, err
	}
	if err := s.d.Audit.Append(s.record(audit.PhaseIntent, nil)); err != nil {
		return observed, err
	}
	// the PATCH carries the resourceVersion ds was read at: the template
	// generation it moves to is known, and the hash holds only once the
	// template has reached it
	ch.TemplateGeneration = rollout.TemplateGeneration(ds) + 1
	rl.conn.markRestart(s.d.Clock.Now())
	return observed, nil
}

// patchFor decides the one PATCH on ds as read: the hash it stamps, the
// restart, the probe, the image, and the template's volume pointed at the
// copy of the config; the facts say so. adopted: it stamps the hash on
// pods that run it already, restarting none.
func (s *Syncer) patchFor(p plan, ds *appsv1.DaemonSet, hash string) (ch rollout.Change, reason string, adopted bool) {
	f := &s.res.Facts
	reason, adopt := decide(s.o.Restart, f.ConfigMapChanged, ds, hash, p.noEffect && hash == p.target, s.mountsCopyOf(ds, p.volume, hash))
	image := s.imageChange(ds)
	if reason == "" && image != "" {
		reason = ReasonImageChanged
	}
	f.RestartRequired, f.RestartReason = reason != "", reason
	ch = rollout.Change{ResourceVersion: ds.ResourceVersion, Container: p.probe.container}
	if s.o.Restart != RestartNever {
		if reason != "" || adopt || p.probe.changes() {
			ch.Hash = hash
		}
		if reason != "" {
			at := rollout.NextRestartAt(ds, s.d.Clock.Now())
			ch.RestartAt = &at
		}
		ch.Probe, ch.LivenessProbe, ch.Image = p.probe.probe, p.probe.liveness, image
		if (reason != "" || ch.Probe != nil || ch.LivenessProbe != nil) && p.copy != "" && rollout.ConfigVolumeOf(ds, p.volume) != p.copy {
			ch.ConfigVolume, ch.ConfigMap, ch.Previous = p.volume, p.copy, p.previous
		}
	}
	f.ProbeChanged = ch.Probe != nil || ch.LivenessProbe != nil
	f.ImageBefore, f.ImageChanged = rollout.ContainerImage(ds, s.o.Container), image != ""
	f.Image = f.ImageBefore
	if image != "" && s.o.Restart != RestartNever {
		f.Image = image
	}
	if !f.RestartRequired && f.ProbeChanged {
		f.RestartRequired, f.RestartReason = true, ReasonProbeChanged
	}
	if !f.RestartRequired && p.noEffect && f.ConfigMapChanged {
		f.RestartReason = ReasonNoEffect
	}
	return ch, reason, adopt && ch.Hash != "" && !ch.Restarts()
}

// strategy adds the rollout's updateStrategy to the restart PATCH: for a
// canary the switch to OnDelete; for a rolling update maxUnavailable raised
// for the stuck nodes (see rollout.Change.RaiseFor), or a strategy an
// earlier run left saved put back.
func (s *Syncer) strategy(ch *rollout.Change, ds *appsv1.DaemonSet, rl *rolling) error {
	if s.o.Strategy == StrategyCanary {
		return ch.OnDelete(ds)
	}
	stuck := rl.fleet.Stuck()
	raise, err := ch.RaiseFor(ds, stuck)
	rl.raisedFor = 0 // this attempt's PATCH decides (a retry after a conflict may not raise)
	if err != nil || !raise.Raised() {
		return err
	}
	rl.raisedFor = stuck
	s.d.Log.Infof("%d node(s) going away or already unready hold a kube-proxy pod that is not Ready: maxUnavailable of daemonset %s/%s raised from %s to %d for the rollout", stuck, s.o.Namespace, s.o.DaemonSet, raise.From, raise.To)
	return nil
}

// observe surveys the nodes and lists the pods, before the restart. Live
// nodes whose pod is not Ready are left out of the wait (resuming a
// canary: only those whose pod is of an older template).
func (s *Syncer) observe(ctx context.Context, ds *appsv1.DaemonSet, resume bool) (*rollout.Fleet, error) {
	// the node survey and the pod list are independent: both before the
	// restart, side by side (at 5000 nodes each is ten LIST pages)
	var skipped map[string]string
	var live []string
	var surveyErr error
	surveyed := make(chan struct{})
	go func() {
		defer close(surveyed)
		skipped, live, surveyErr = nodes.Survey(ctx, s.d.Kube.Nodes(), s.d.Clock.Now(), s.o.Nodes, &ds.Spec.Template.Spec)
	}()
	fleet, err := s.dss.Observe(ctx, ds, map[string]string{})
	<-surveyed
	if surveyErr != nil {
		return nil, surveyErr
	}
	if err != nil {
		return nil, err
	}
	for n, reason := range skipped {
		fleet.Skip(n, reason)
	}
	r := &s.res.Facts.Rollout
	r.SkippedNodes, r.UnreadyBefore = nodes.List(skipped), fleet.UnreadyLive()
	if resume {
		r.UnreadyBefore = []string{}
		for _, n := range fleet.UnreadyLive() {
			if _, _, old := fleet.OldPod(n); old {
				r.UnreadyBefore = append(r.UnreadyBefore, n)
			}
		}
	}
	fleet.Exempt(r.UnreadyBefore)
	if len(r.UnreadyBefore) > 0 {
		s.d.Log.Infof("%d live node(s) had no Ready kube-proxy before the restart: left out of the wait and of the batches: %v", len(r.UnreadyBefore), r.UnreadyBefore)
	}
	// live nodes the DaemonSet belongs on but that have no pod of it: when
	// a canary resumes, an earlier run may have deleted theirs, and the
	// rollout is not done before they run one of the new template
	switch missing := fleet.Missing(live); {
	case len(missing) == 0:
	case resume:
		fleet.Expect(missing)
		s.d.Log.Infof("%d live node(s) have no kube-proxy pod (an earlier run may have deleted theirs): waiting for the DaemonSet controller to create them: %v", len(missing), missing)
	default:
		s.warn(fmt.Sprintf("%d live node(s) have no kube-proxy pod of daemonset %s/%s before the restart: %v; the restart does not wait for them, the DaemonSet controller creates theirs (see its events if it does not)", len(missing), s.o.Namespace, s.o.DaemonSet, missing))
	}
	if len(skipped) > 0 {
		s.d.Log.Infof("%d node(s) going away are skipped: %v", len(skipped), r.SkippedNodes)
	}
	return fleet, nil
}

func (s *Syncer) step(ctx context.Context, name string) {
	if s.d.Step != nil {
		s.d.Step(ctx, name)
	}
}

func (s *Syncer) requests() int64 {
	if s.d.Requests == nil {
		return 0
	}
	return s.d.Requests()
}

func (s *Syncer) diff(before, after, effects map[string]string) {
	if !s.o.Diff {
		return
	}
	render := func(data map[string]string) string {
		b, _ := yaml.Marshal(configmap.RedactData(data))
		return string(b)
	}
	name := fmt.Sprintf("configmap %s/%s data", s.o.Namespace, s.o.ConfigMap)
	s.res.Diff = &Diff{Before: render(before), After: render(after), BeforeHeader: name + " (before)", AfterHeader: name + " (after)"}
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
		s.res.Diff.AfterHeader = fmt.Sprintf("%s (after; effect on the running kube-proxy: %s)", name, strings.Join(parts, ", "))
	}
}

func (s *Syncer) summary() string {
	f := s.res.Facts
	obj := fmt.Sprintf("%s/%s", s.o.Namespace, s.o.ConfigMap)
	var parts []string
	verb := map[bool]string{true: "would change", false: "changed"}[s.o.Check]
	if f.ConfigMapChanged {
		parts = append(parts, fmt.Sprintf("configmap %s %s (%s)", obj, verb, strings.Join(f.ChangedKeys, ", ")))
	} else {
		parts = append(parts, fmt.Sprintf("configmap %s unchanged", obj))
	}
	switch {
	case f.Restarted:
		msg := fmt.Sprintf("restarted daemonset %s/%s (%s): %d/%d updated and available", s.o.Namespace, s.o.DaemonSet, f.RestartReason, f.Rollout.Available, f.Rollout.Desired)
		if n := len(f.Rollout.SkippedNodes); n > 0 {
			msg += fmt.Sprintf(", %d node(s) going away skipped", n)
		}
		parts = append(parts, msg)
	case f.RestartRequired && s.o.Check:
		parts = append(parts, fmt.Sprintf("would restart daemonset %s/%s (%s)", s.o.Namespace, s.o.DaemonSet, f.RestartReason))
	case f.RestartRequired:
		parts = append(parts, fmt.Sprintf("restart of daemonset %s/%s owed (%s) but --restart=never; a later run with --restart=auto does it", s.o.Namespace, s.o.DaemonSet, f.RestartReason))
	case f.RestartReason == ReasonNoEffect:
		parts = append(parts, fmt.Sprintf("no restart: no changed key has an effect on the running kube-proxy; daemonset %s/%s records that its pods run this data as well, and the next restart for another reason picks it up", s.o.Namespace, s.o.DaemonSet))
	default:
		parts = append(parts, "no restart needed")
	}
	if s.restoredStrategy != "" {
		parts = append(parts, s.restoredStrategy)
	}
	return strings.Join(parts, "; ")
}

// planRecord is the audit record of what the run means to write, from
// its first capture (the one under the lease may find less to do).
func (s *Syncer) planRecord(p plan) audit.Record {
	r := s.record(audit.PhasePlan, nil)
	r.ChangedKeys, r.ChangedKeysEffect, r.ProbePath = p.keys, p.effects, p.probe.path
	r.Restart, r.RestartReason = p.reason != "", p.reason
	return r
}

func (s *Syncer) record(phase string, runErr error) audit.Record {
	f := s.res.Facts
	r := audit.Record{
		Time: s.d.Clock.Now().UTC(), AuditID: f.AuditID, Phase: phase, Server: configmap.RedactURL(s.d.Server),
		Object:                "configmap/" + s.o.Namespace + "/" + s.o.ConfigMap,
		DaemonSet:             "daemonset/" + s.o.Namespace + "/" + s.o.DaemonSet,
		ResourceVersionBefore: f.ResourceVersionBefore, ResourceVersionAfter: f.ResourceVersionAfter,
		ChangedKeys: f.ChangedKeys, ChangedKeysEffect: f.ChangedKeysEffect, Restart: f.RestartRequired, RestartReason: f.RestartReason,
		ProbePath: f.ProbePath, CheckMode: f.CheckMode,
	}
	if f.Migration != nil {
		r.Migration = f.Migration
	}
	if phase == audit.PhaseOutcome {
		r.Outcome, r.Rollout = "succeeded", f.Rollout
		r.RolledBack, r.RollbackReason = f.RolledBack, f.RollbackReason
		if runErr != nil {
			r.Outcome, r.Error = "failed", runErr.Error()
		}
	}
	return r
}
