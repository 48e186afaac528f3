package kpsync

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/kube-proxy-sync/kube-proxy-sync/internal/audit"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/configmap"
)

// report writes the outcome to the audit log and Events on the DaemonSet,
// for runs that changed something or failed, and for every run that wrote
// a plan record (one queued behind another run's Lease may find nothing
// left to do: its outcome says so, or the plan would look like a run that
// died). Reporting problems are logged, never turned into a failed run.
func (s *Syncer) report(ctx context.Context, runErr error) {
	e, f := s.e, s.res.Facts
	if e.o.Check || (runErr == nil && !s.res.Changed && !s.res.audited) {
		return
	}
	if err := e.d.Audit.Append(s.record(audit.PhaseOutcome, runErr)); err != nil {
		e.d.Log.Warnf("%v", err)
	}
	if f.ConfigMapChanged {
		e.event(ctx, corev1.EventTypeNormal, "ConfigChanged", fmt.Sprintf("configmap %s/%s changed: %s (audit id %s)", e.o.Namespace, e.o.ConfigMap, strings.Join(f.ChangedKeys, ", "), f.AuditID))
	}
	if f.Restarted {
		typ, msg := corev1.EventTypeNormal, fmt.Sprintf("rollout restart (%s): %d/%d updated (audit id %s)", f.RestartReason, f.Rollout.Updated, f.Rollout.Desired, f.AuditID)
		if runErr != nil {
			typ, msg = corev1.EventTypeWarning, msg+": "+runErr.Error()
		}
		e.event(ctx, typ, "RolloutRestarted", msg)
	}
}

func (s *Syncer) summary() string {
	o, f := s.e.o, s.res.Facts
	obj := fmt.Sprintf("%s/%s", o.Namespace, o.ConfigMap)
	var parts []string
	verb := map[bool]string{true: "would change", false: "changed"}[o.Check]
	if f.ConfigMapChanged {
		parts = append(parts, fmt.Sprintf("configmap %s %s (%s)", obj, verb, strings.Join(f.ChangedKeys, ", ")))
	} else {
		parts = append(parts, fmt.Sprintf("configmap %s unchanged", obj))
	}
	switch {
	case f.Restarted:
		msg := fmt.Sprintf("restarted daemonset %s/%s (%s): %d/%d updated and available", o.Namespace, o.DaemonSet, f.RestartReason, f.Rollout.Available, f.Rollout.Desired)
		if n := len(f.Rollout.SkippedNodes); n > 0 {
			msg += fmt.Sprintf(", %d node(s) going away skipped", n)
		}
		parts = append(parts, msg)
	case f.RestartRequired && o.Check && o.Restart != RestartNever:
		parts = append(parts, fmt.Sprintf("would restart daemonset %s/%s (%s)", o.Namespace, o.DaemonSet, f.RestartReason))
	case f.RestartRequired:
		parts = append(parts, fmt.Sprintf("restart of daemonset %s/%s owed (%s) but --restart=never; a later run with --restart=auto does it", o.Namespace, o.DaemonSet, f.RestartReason))
	case f.RestartReason == ReasonNoEffect:
		parts = append(parts, fmt.Sprintf("no restart: no changed key has an effect on the running kube-proxy; daemonset %s/%s records that its pods run this data as well, and the next restart for another reason picks it up", o.Namespace, o.DaemonSet))
	default:
		parts = append(parts, "no restart needed")
	}
	if f.TemplateChanged && (f.Restarted || o.Check) && !f.RolledBack {
		from := o.TemplateFrom
		if from == "" {
			from = "kubeadm's (--template)"
		}
		parts = append(parts, fmt.Sprintf("pod template %s %s", map[bool]string{true: "would be", false: "is now"}[o.Check], from))
	}
	if s.res.restored != "" {
		parts = append(parts, s.res.restored)
	}
	return strings.Join(parts, "; ")
}

// planRecord is the audit record of what the run means to write, from
// its first capture (the one under the lease may find less to do).
func (s *Syncer) planRecord(p plan) audit.Record {
	r := s.record(audit.PhasePlan, nil)
	r.ChangedKeys, r.ChangedKeysEffect, r.ProbePath = p.keys, p.effects, p.probe.path
	r.Restart, r.RestartReason = p.reason != "", p.reason
	// what the plan means to do, not yet in the facts
	r.Kind = runKind(s.e.o.Undo, p.migration != nil, p.image != "", p.templateChanged, len(p.access) > 0, len(p.keys) > 0, p.reason != "" || p.probe.changes())
	r.ImageAfter, r.ConfigMapAfter = p.imageBefore, p.mounted
	if p.image != "" {
		r.ImageAfter = p.image
	}
	if (p.reason != "" || p.probe.changes()) && p.volume != "" && s.e.o.Restart != RestartNever {
		r.ConfigMapAfter = p.targetCopy // every restart moves the template onto a copy
	}
	return r
}

func (s *Syncer) record(phase string, runErr error) audit.Record {
	o, f := s.e.o, s.res.Facts
	r := audit.Record{
		Time: s.e.d.Clock.Now().UTC(), AuditID: f.AuditID, Phase: phase, Server: configmap.RedactURL(s.e.d.Server),
		Object:                "configmap/" + o.Namespace + "/" + o.ConfigMap,
		DaemonSet:             "daemonset/" + o.Namespace + "/" + o.DaemonSet,
		ResourceVersionBefore: f.ResourceVersionBefore, ResourceVersionAfter: f.ResourceVersionAfter,
		ChangedKeys: f.ChangedKeys, ChangedKeysEffect: f.ChangedKeysEffect, Restart: f.RestartRequired, RestartReason: f.RestartReason,
		ProbePath: f.ProbePath, CheckMode: f.CheckMode,
	}
	if f.Migration != nil {
		r.Migration = f.Migration
	}
	r.Kind = s.kind()
	r.ImageBefore, r.ImageAfter = f.ImageBefore, f.Image
	r.ConfigMapBefore, r.ConfigMapAfter = s.res.mountedBefore, f.ConfigMapName
	if r.ConfigMapAfter == "" {
		r.ConfigMapAfter = r.ConfigMapBefore
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

// kind says what the run does, for the audit log (see audit.Record.Kind).
func (s *Syncer) kind() string {
	f := s.res.Facts
	return runKind(s.e.o.Undo, f.Migration != nil, f.ImageChanged, f.TemplateChanged, len(f.AccessChanged) > 0, len(f.ChangedKeys) > 0, f.RestartRequired || f.Restarted)
}

// runKind joins the parts of what a run does with "+": undo, migration,
// image, template (kubeadm's), access (kubeadm's RBAC), change; restart
// when it does none of these; none.
func runKind(undo, migration, image, template, access, changed, restart bool) string {
	var parts []string
	if undo {
		parts = append(parts, "undo")
	}
	if migration {
		parts = append(parts, "migration")
	}
	if image {
		parts = append(parts, "image")
	}
	if template {
		parts = append(parts, "template")
	}
	if access {
		parts = append(parts, "access")
	}
	if changed && !undo {
		parts = append(parts, "change")
	}
	if (len(parts) == 0 || (len(parts) == 1 && access)) && restart {
		parts = append(parts, "restart")
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, "+")
}
