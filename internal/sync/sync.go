// Package sync is the flow: capture the ConfigMap, apply the desired data,
// capture again and compare, then restart kube-proxy only when its config
// really changed (or a restart is still owed), wait, and report.
package sync

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/sirupsen/logrus"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/clock"
	"sigs.k8s.io/yaml"

	"github.com/kube-proxy-sync/kube-proxy-sync/internal/audit"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/configmap"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/rollout"
)

// Restart policies.
const (
	RestartAuto   = "auto"
	RestartAlways = "always"
	RestartNever  = "never"
)

// Options is what the user asked for, already validated.
type Options struct {
	Namespace        string
	ConfigMap        string
	DaemonSet        string
	Container        string
	Spec             configmap.Spec
	ProbePath        string
	KubeProxyVersion string
	Restart          string
	Timeout          time.Duration
	Check            bool
	Diff             bool
}

// Deps are passed in, so tests can use a fake clientset and clock.
type Deps struct {
	Kube     kubernetes.Interface
	Clock    clock.Clock
	Log      *logrus.Entry
	Audit    audit.Log
	Server   string
	Requests func() int64
	// Step, when set, is called at each step boundary (StepConfigMapWritten,
	// StepDaemonSetPatched, StepWaiting); crash tests block there and kill
	// the process.
	Step func(ctx context.Context, step string)
}

// Step boundaries passed to Deps.Step.
const (
	StepConfigMapWritten = "after-configmap-write"
	StepDaemonSetPatched = "after-daemonset-patch"
	StepWaiting          = "during-wait"
)

// Syncer runs the flow once.
type Syncer struct {
	o   Options
	d   Deps
	cms configmap.Client
	dss rollout.Client
	res *Result
	// desired is the ConfigMap data this run converges to.
	desired map[string]string
}

// New prepares a run.
func New(o Options, d Deps) *Syncer {
	return &Syncer{
		o:   o,
		d:   d,
		cms: configmap.Client{Kube: d.Kube, Namespace: o.Namespace, Name: o.ConfigMap},
		dss: rollout.Client{Kube: d.Kube, Namespace: o.Namespace, Name: o.DaemonSet, Clock: d.Clock, Log: d.Log, ProgressEvery: 2 * time.Second},
		res: &Result{Facts: Facts{CheckMode: o.Check, AuditID: audit.NewID(), ChangedKeys: []string{}}},
	}
}

// Run runs the flow and reports it (audit log, Events). The result is filled
// as far as the run got, also when it returns an error.
func (s *Syncer) Run(ctx context.Context) (*Result, error) {
	err := s.run(ctx)
	s.report(ctx, err)
	s.res.Facts.APIRequests = s.requests()
	if err != nil {
		s.res.Msg = err.Error()
	}
	return s.res, err
}

// run is the whole algorithm, top to bottom.
func (s *Syncer) run(ctx context.Context) error {
	f := &s.res.Facts

	// 1. capture the ConfigMap and the DaemonSet
	cm, err := s.cms.Get(ctx)
	if err != nil {
		return err
	}
	before := configmap.NewSnapshot(cm)
	f.ResourceVersionBefore, f.ResourceVersionAfter = before.ResourceVersion, before.ResourceVersion
	ds, err := s.dss.Get(ctx)
	if err != nil {
		return err
	}

	// 2. compute everything before the first write: bad input changes nothing
	desired, keys, err := configmap.Desired(cm.Data, s.o.Spec)
	if err != nil {
		return fmt.Errorf("configmap %s/%s: %w", s.o.Namespace, s.o.ConfigMap, err)
	}
	s.desired = desired
	probePlan, err := s.planProbe(ctx, ds, desired)
	if err != nil {
		return err
	}
	f.ChangedKeys = keys
	f.ProbePath, f.KubeProxyVersion = probePlan.path, probePlan.version
	s.diff(before.Data, desired)

	// 3. write the ConfigMap only if its data differs, then capture it again
	after := before
	if len(keys) > 0 && !s.o.Check {
		if ds, err = s.oweRestart(ctx, ds, before.Hash); err != nil {
			return err
		}
		if err := s.writeConfigMap(ctx, cm, desired, keys); err != nil {
			return err
		}
		s.step(ctx, StepConfigMapWritten)
	}
	if !s.o.Check {
		cm, err = s.cms.Get(ctx)
		if err != nil {
			return err
		}
		after = configmap.NewSnapshot(cm)
	}
	f.ResourceVersionAfter = after.ResourceVersion
	f.ResourceVersionChanged = after.ResourceVersion != before.ResourceVersion
	f.ConfigMapChanged = after.Hash != before.Hash || (s.o.Check && len(keys) > 0)

	// 4. restart at most once, in one PATCH with the probe and the hash
	target := after.Hash
	if s.o.Check {
		target = configmap.Hash(desired, cm.BinaryData) // what a real run would stamp
	}
	ds, err = s.restart(ctx, ds, target, probePlan)
	if err != nil {
		return err
	}

	// 5. wait for the rollout
	if f.Restarted {
		s.step(ctx, StepDaemonSetPatched)
		if err := s.wait(ctx, ds); err != nil {
			return err
		}
	} else {
		f.Rollout = rollout.StatusOf(ds)
	}
	s.res.Changed = f.ConfigMapChanged || f.Restarted || f.ProbeChanged
	s.res.Msg = s.summary()
	return nil
}

// oweRestart stamps the pre-change hash on a DaemonSet we have never
// stamped, so that a crash between the ConfigMap write and the restart
// leaves a mismatch, i.e. a restart the next run still owes.
func (s *Syncer) oweRestart(ctx context.Context, ds *appsv1.DaemonSet, hash string) (*appsv1.DaemonSet, error) {
	if _, ok := ds.Annotations[rollout.HashAnnotation]; ok {
		return ds, nil
	}
	return s.dss.Apply(ctx, rollout.Change{ResourceVersion: ds.ResourceVersion, Hash: hash})
}

func (s *Syncer) writeConfigMap(ctx context.Context, cm *corev1.ConfigMap, desired map[string]string, keys []string) error {
	if s.o.Spec.Manifest != nil {
		owned := append([]string{}, keys...)
		for k := range s.o.Spec.Manifest.Data {
			owned = append(owned, k)
		}
		_, err := s.cms.Apply(ctx, desired, topKeys(owned))
		return err
	}
	first := true
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if !first {
			// someone else wrote it: recompute on top of their version
			latest, err := s.cms.Get(ctx)
			if err != nil {
				return err
			}
			cm = latest
			if desired, keys, err = configmap.Desired(cm.Data, s.o.Spec); err != nil || len(keys) == 0 {
				return err
			}
		}
		first = false
		_, err := s.cms.Update(ctx, cm, desired)
		return err
	})
}

// topKeys turns "config.conf:mode" into "config.conf", deduplicated.
func topKeys(keys []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, k := range keys {
		top, _, _ := strings.Cut(k, ":")
		if !seen[top] {
			seen[top] = true
			out = append(out, top)
		}
	}
	return out
}

// decide says whether and why to restart, given the DaemonSet as it is now.
func (s *Syncer) decide(ds *appsv1.DaemonSet, hash string) (reason string, adopt bool) {
	stamped, ok := ds.Annotations[rollout.HashAnnotation]
	switch {
	case s.o.Restart == RestartAlways:
		return ReasonForced, false
	case ok && stamped == hash:
		// pods were already restarted for exactly this data (maybe by a
		// concurrent run that won the race): never twice for one change
		return "", false
	case s.res.Facts.ConfigMapChanged:
		return ReasonConfigChanged, false
	case ok && stamped != hash:
		return ReasonPending, false
	case !ok:
		return "", true
	}
	return "", false
}

func (s *Syncer) restart(ctx context.Context, ds *appsv1.DaemonSet, hash string, plan probePlan) (*appsv1.DaemonSet, error) {
	f := &s.res.Facts
	first := true
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if !first {
			// another writer moved the DaemonSet (maybe another run restarted it): decide again
			latest, err := s.dss.Get(ctx)
			if err != nil {
				return err
			}
			ds = latest
			if plan, err = s.planProbe(ctx, ds, s.desired); err != nil {
				return err
			}
		}
		first = false
		reason, adopt := s.decide(ds, hash)
		f.RestartRequired = reason != ""
		f.RestartReason = reason
		ch := rollout.Change{ResourceVersion: ds.ResourceVersion, Container: plan.container}
		if s.o.Restart != RestartNever {
			if reason != "" || adopt || plan.probe != nil {
				ch.Hash = hash
			}
			if reason != "" {
				now := s.d.Clock.Now()
				ch.RestartAt = &now
			}
			ch.Probe = plan.probe
		}
		f.ProbeChanged = ch.Probe != nil
		if !f.RestartRequired && ch.Probe != nil {
			f.RestartRequired, f.RestartReason = true, ReasonProbeChanged
		}
		if ch.Hash == "" || s.o.Check {
			return nil
		}
		if ch.Restarts() {
			if err := s.d.Audit.Append(s.record("intent", nil)); err != nil {
				return err
			}
		}
		patched, err := s.dss.Apply(ctx, ch)
		if err != nil {
			return err
		}
		ds = patched
		f.Restarted = ch.Restarts()
		if adopt && !ch.Restarts() {
			s.d.Log.Infof("adopted daemonset %s/%s: stamped %s, no restart", s.o.Namespace, s.o.DaemonSet, rollout.HashAnnotation)
		}
		return nil
	})
	return ds, err
}

func (s *Syncer) wait(ctx context.Context, ds *appsv1.DaemonSet) error {
	ctx, cancel := context.WithTimeout(ctx, s.o.Timeout)
	defer cancel()
	s.dss.Midway = func() { s.step(ctx, StepWaiting) }
	st, err := s.dss.Wait(ctx, ds.Generation)
	s.res.Facts.Rollout = st
	return err
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

func (s *Syncer) diff(before, after map[string]string) {
	if !s.o.Diff {
		return
	}
	render := func(data map[string]string) string {
		b, _ := yaml.Marshal(configmap.RedactData(data))
		return string(b)
	}
	name := fmt.Sprintf("configmap %s/%s data", s.o.Namespace, s.o.ConfigMap)
	s.res.Diff = &Diff{Before: render(before), After: render(after), BeforeHeader: name + " (before)", AfterHeader: name + " (after)"}
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
		parts = append(parts, fmt.Sprintf("restarted daemonset %s/%s (%s): %d/%d updated and available", s.o.Namespace, s.o.DaemonSet, f.RestartReason, f.Rollout.Updated, f.Rollout.Desired))
	case f.RestartRequired && s.o.Check:
		parts = append(parts, fmt.Sprintf("would restart daemonset %s/%s (%s)", s.o.Namespace, s.o.DaemonSet, f.RestartReason))
	case f.RestartRequired:
		parts = append(parts, fmt.Sprintf("restart of daemonset %s/%s owed (%s) but --restart=never; a later run with --restart=auto does it", s.o.Namespace, s.o.DaemonSet, f.RestartReason))
	default:
		parts = append(parts, "no restart needed")
	}
	return strings.Join(parts, "; ")
}

func (s *Syncer) record(phase string, runErr error) audit.Record {
	f := s.res.Facts
	r := audit.Record{
		Time: s.d.Clock.Now().UTC(), AuditID: f.AuditID, Phase: phase, Server: s.d.Server,
		Object:                "configmap/" + s.o.Namespace + "/" + s.o.ConfigMap,
		DaemonSet:             "daemonset/" + s.o.Namespace + "/" + s.o.DaemonSet,
		ResourceVersionBefore: f.ResourceVersionBefore, ResourceVersionAfter: f.ResourceVersionAfter,
		ChangedKeys: f.ChangedKeys, Restart: f.RestartRequired, RestartReason: f.RestartReason,
		ProbePath: f.ProbePath, CheckMode: f.CheckMode,
	}
	if phase == "outcome" {
		r.Outcome, r.Rollout = "succeeded", f.Rollout
		if runErr != nil {
			r.Outcome, r.Error = "failed", runErr.Error()
		}
	}
	return r
}
