package kpsync

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kube-proxy-sync/kube-proxy-sync/internal/lock"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/rollout"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/verify"
)

// access is one verb on one resource that the run will use.
type access struct {
	verb, group, resource, subresource, name string
	namespaced                               bool
	// namespace, when set, is another namespace than the run's
	namespace string
}

func (a access) String() string {
	what := a.resource
	if a.subresource != "" {
		what += "/" + a.subresource
	}
	if a.group != "" {
		what += "." + a.group
	}
	if a.name != "" {
		what += fmt.Sprintf(" %q", a.name)
	}
	return a.verb + " on " + what
}

// neededAccess lists every verb a run with this plan can use, the
// rollback's and the canary's included, so that a missing one fails the
// run before its first write rather than half-way.
func neededAccess(o Options, p plan) []access {
	ns := func(verb, group, resource, name string) access {
		return access{verb: verb, group: group, resource: resource, name: name, namespaced: true}
	}
	cm, ds := o.ConfigMap, o.DaemonSet
	out := []access{
		ns("get", "", "configmaps", cm),
		ns("get", "apps", "daemonsets", ds),
		ns("patch", "apps", "daemonsets", ds),
		ns("get", "coordination.k8s.io", "leases", LeaseName),
		ns("create", "coordination.k8s.io", "leases", ""),
		ns("update", "coordination.k8s.io", "leases", LeaseName),
		ns("create", "", "events", ""),
	}
	// the copies: read, listed and deleted beyond the history; the record
	// written once no pod mounts it
	out = append(out, ns("update", "", "configmaps", cm), ns("get", "", "configmaps", ""),
		ns("list", "", "configmaps", ""), ns("delete", "", "configmaps", ""),
		// the other DaemonSets on the same config, before the record is
		// written or a copy deleted
		ns("list", "apps", "daemonsets", ""))
	// kubeadm's ServiceAccount and RBAC (--template kubeadm): server-side
	// applied, a create where missing
	for _, w := range p.access {
		a := access{verb: "patch", group: w.group, resource: w.resource, name: w.name, namespace: w.namespace}
		out = append(out, a)
		if w.missing {
			a.verb, a.name = "create", ""
			out = append(out, a)
		}
	}
	_, leftover := p.ds.Annotations[rollout.StrategyAnnotation]
	// a change with no effect on the running kube-proxies restarts nothing
	// (were the DaemonSet to move before it is recorded, the run would
	// restart after all, and a verb missing then leaves the restart owed)
	changes := len(p.keys) > 0 && !p.noEffect
	if changes || (o.Restart != RestartNever && (p.reason != "" || p.probe.changes())) {
		// the copy of the config the template is pointed at (see
		// ensureCopy): a change makes it also under --restart never, for
		// the restart it owes; its name comes from its data
		// and the history beyond it collected, keeping what a revision
		// of the DaemonSet mounts
		out = append(out, ns("create", "", "configmaps", ""), ns("list", "apps", "controllerrevisions", ""))
	}
	if o.Restart != RestartNever && (changes || p.reason != "" || p.probe.changes() || leftover) {
		// follow the rollout; the canary (and a rollback to OnDelete) deletes pods
		out = append(out,
			ns("list", "", "pods", ""), ns("watch", "", "pods", ""),
			access{verb: "list", resource: "nodes"}, access{verb: "get", resource: "nodes"})
		if p.roll.strategy == StrategyCanary || leftover || o.RollbackOnFailure {
			out = append(out, ns("delete", "", "pods", ""))
		}
		if (o.Verify && o.VerifyEndpoints > 0) || (p.roll.conn.Health != "" && p.roll.conn.Health != verify.Off) {
			out = append(out, access{verb: "get", resource: "nodes", subresource: "proxy"})
		}
		if p.roll.ownPort != 0 {
			// the run's own Service to check traffic through
			out = append(out, ns("create", "", "services", ""), ns("delete", "", "services", ProbeServiceName))
		}
		if svcNS, svc, ok := strings.Cut(p.roll.conn.Traffic, "/"); ok {
			// a probe pod per node, deleted after its check (and a killed
			// run's leftovers by the next), whatever the strategy
			out = append(out, ns("create", "", "pods", ""), ns("delete", "", "pods", ""),
				access{verb: "get", resource: "services", name: svc, namespace: svcNS})
		}
	}
	return out
}

// checkAccess asks the API server (SelfSubjectAccessReview) about every
// verb the run will use, and fails naming all those it may not. The
// reviews go out at once: a dozen round trips in a row would all come
// before the restart.
func checkAccess(ctx context.Context, e *env, p plan) error {
	needed := neededAccess(e.o, p)
	allowed := make([]bool, len(needed))
	errs := make([]error, len(needed))
	var wg sync.WaitGroup
	for i, a := range needed {
		ra := &authorizationv1.ResourceAttributes{Verb: a.verb, Group: a.group, Resource: a.resource, Subresource: a.subresource, Name: a.name}
		if a.namespaced {
			ra.Namespace = e.o.Namespace
		}
		if a.namespace != "" {
			ra.Namespace = a.namespace
		}
		wg.Go(func() {
			review, err := e.d.Kube.SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{
				Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: ra},
			}, metav1.CreateOptions{})
			if err != nil {
				errs[i] = fmt.Errorf("check permissions before any write (SelfSubjectAccessReview for %s): %w", a, err)
				return
			}
			allowed[i] = review.Status.Allowed
		})
	}
	wg.Wait()
	var denied []string
	for i, a := range needed {
		if errs[i] != nil {
			return errs[i]
		}
		if !allowed[i] {
			denied = append(denied, a.String())
		}
	}
	if len(denied) > 0 {
		why := ""
		if m := p.migration; m != nil && m.VerifyHealth != verify.Off && slices.Contains(denied, "get on nodes/proxy") {
			why = fmt.Sprintf("; get on nodes/proxy because the proxy-mode change %s -> %s checks each migrated node's kube-proxy through the API server's node proxy", m.From, m.To)
		}
		return fmt.Errorf("forbidden: the kubeconfig user needs %s in namespace %s (see roles/kpsync/files/rbac.yaml)%s; checked before any write, nothing was changed", strings.Join(denied, ", "), e.o.Namespace, why)
	}
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
	e.locked = true
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
