package kpsync

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kube-proxy-sync/kube-proxy-sync/internal/audit"
)

// report writes the outcome to the audit log and Events on the DaemonSet,
// for runs that changed something or failed, and for every run that wrote
// a plan record (one queued behind another run's Lease may find nothing
// left to do: its outcome says so, or the plan would look like a run that
// died). Reporting problems are logged, never turned into a failed run.
func (s *Syncer) report(ctx context.Context, runErr error) {
	f := s.res.Facts
	if s.o.Check || (runErr == nil && !s.res.Changed && !s.planned) {
		return
	}
	if err := s.d.Audit.Append(s.record(audit.PhaseOutcome, runErr)); err != nil {
		s.d.Log.Warnf("%v", err)
	}
	if f.ConfigMapChanged {
		s.event(ctx, corev1.EventTypeNormal, "ConfigChanged", fmt.Sprintf("configmap %s/%s changed: %s (audit id %s)", s.o.Namespace, s.o.ConfigMap, strings.Join(f.ChangedKeys, ", "), f.AuditID))
	}
	if f.Restarted {
		typ, msg := corev1.EventTypeNormal, fmt.Sprintf("rollout restart (%s): %d/%d updated (audit id %s)", f.RestartReason, f.Rollout.Updated, f.Rollout.Desired, f.AuditID)
		if runErr != nil {
			typ, msg = corev1.EventTypeWarning, msg+": "+runErr.Error()
		}
		s.event(ctx, typ, "RolloutRestarted", msg)
	}
}

func (s *Syncer) event(ctx context.Context, typ, reason, msg string) {
	now := metav1.NewTime(s.d.Clock.Now())
	ev := &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{GenerateName: s.o.DaemonSet + ".", Namespace: s.o.Namespace},
		InvolvedObject: corev1.ObjectReference{
			APIVersion: "apps/v1", Kind: "DaemonSet", Namespace: s.o.Namespace, Name: s.o.DaemonSet,
		},
		Reason: reason, Message: msg, Type: typ, Count: 1,
		FirstTimestamp: now, LastTimestamp: now,
		Source:              corev1.EventSource{Component: "kube-proxy-sync"},
		ReportingController: "kube-proxy-sync",
		ReportingInstance:   "kube-proxy-sync",
	}
	// a context of its own: the run's may be the one that just ran out
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if _, err := s.d.Kube.Events(s.o.Namespace).Create(ctx, ev, metav1.CreateOptions{}); err != nil {
		s.d.Log.Warnf("record event %s on daemonset %s/%s: %v", reason, s.o.Namespace, s.o.DaemonSet, err)
	}
}
