package kpsync

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/kube-proxy-sync/kube-proxy-sync/internal/configmap"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/rollout"
)

// applier is the apply phase: it writes the config the pods are to run
// (a new immutable copy, or the record for a change with no effect) and
// captures it again; and it makes the copies the restart points the
// template at.
type applier struct{ e *env }

// apply makes the config the pods are to run: a change is a new immutable copy
// (no running kube-proxy reads it yet); a change with no effect on the
// running kube-proxies is written to the record, which the template
// does not mount then (see plan). Then capture it again.
func (ap applier) apply(ctx context.Context, p plan) (plan, applied, error) {
	e := ap.e
	o := e.o
	a := applied{name: o.ConfigMap} // the ConfigMap after was captured from
	if len(p.keys) > 0 && p.noEffect {
		// a change with no effect on this DaemonSet's pods is written to
		// the record in place: never while a pod mounts it (another
		// DaemonSet's, whose effect is not judged; one of an older template
		// of this one, which would run the change at its next restart)
		uses := e.dss.Uses(p.ds, nil, func(name string) bool { return name == o.ConfigMap })
		users, err := uses.OthersMounting(ctx, o.ConfigMap)
		if err != nil {
			return p, a, err
		}
		if !rollout.Complete(p.ds) {
			// a rollout off kubeadm's layout not finished (interrupted, a
			// canary left half-way): pods of an older template may still
			// mount the record
			pods, err := uses.Pods(ctx)
			if err != nil {
				return p, a, err
			}
			by, _ := pods.MountedBy(o.ConfigMap)
			for _, pod := range by {
				users = append(users, "pod "+pod)
			}
		}
		if len(users) > 0 {
			e.warn(fmt.Sprintf("configmap %s/%s: %s changed with no effect on the kube-proxies of daemonset %s/%s; not written while %s mount it: the next run that restarts kube-proxy carries it",
				o.Namespace, o.ConfigMap, strings.Join(p.keys, ", "), o.Namespace, o.DaemonSet, strings.Join(users, ", ")))
			a.deferred = p.keys
			p.keys, p.desired, p.effects, p.target = nil, p.base.Data, map[string]string{}, p.before.Hash
			p.targetCopy = configmap.CopyName(o.ConfigMap, p.target)
		}
	}
	if p.volume != "" && (p.reason != "" || p.probe.changes()) && o.Restart != RestartNever && configmap.IsCopyName(o.ConfigMap, p.mounted) {
		// the copy the template mounts, which the restart keeps the
		// template on or moves it off (a rollback's target), is there:
		// checked before the first write (check mode: read, said)
		if err := ap.mountedThere(ctx, p); err != nil {
			return p, a, err
		}
	}
	if len(p.keys) > 0 && p.noEffect && !o.Check {
		// the record on the DaemonSet comes first; it clears noEffect when
		// the DaemonSet moved so that its pods no longer run the data
		// before the change: then the change restarts as usual, on a copy
		if err := ap.markNoEffect(ctx, &p); err != nil {
			return p, a, err
		}
	}
	switch {
	case o.Check:
		a.after = p.before
		if len(p.keys) > 0 && !p.noEffect {
			a.configMapName = configmap.CopyName(o.ConfigMap, p.target)
		}
	case len(p.keys) > 0 && p.noEffect:
		if err := ap.writeConfigMap(ctx, p.record, p.desired); err != nil {
			return p, a, err
		}
		a.configMapChanged, a.recordChanged = true, true
		e.step(ctx, StepConfigMapWritten)
		cm, err := e.cms.Get(ctx)
		if err != nil {
			return p, a, err
		}
		a.after = configmap.NewSnapshot(cm)
		p.record = cm // the record as this run wrote it
		a.rvAfter = cm.ResourceVersion
	case len(p.keys) > 0:
		if err := ap.ensureCopy(ctx, &p, p.desired); err != nil {
			return p, a, err
		}
		a.configMapName = p.copy
		a.configMapChanged = true // until the capture below says otherwise
		e.step(ctx, StepConfigMapWritten)
		a.name = configmap.CopyName(o.ConfigMap, p.target)
		cp, err := e.copies.Get(ctx, a.name)
		if err != nil {
			return p, a, err
		}
		a.after = configmap.NewSnapshot(cp)
	default:
		// nothing written: the ConfigMap the data came from, captured again
		a.name = p.base.Name
		cm, err := e.copies.Get(ctx, a.name)
		if err != nil {
			return p, a, err
		}
		a.after = configmap.NewSnapshot(cm)
		if p.base.Name == o.ConfigMap {
			a.rvAfter = cm.ResourceVersion
		}
	}
	a.configMapChanged = a.after.Hash != p.before.Hash || (o.Check && len(p.keys) > 0)
	if !o.Check && a.after.Hash != p.target {
		// the hash the restart stamps is p.target from here on
		return p, a, ap.changedUnder(p, &a)
	}
	if a.configMapName == "" {
		a.configMapName = p.mounted
	}
	if !o.Check && (p.reason != "" || p.probe.changes()) && o.Restart != RestartNever {
		// a restart gets the copy of the data it restarts for (every
		// restart moves the template onto a copy: kubeadm's layout and
		// clusters of an earlier version move with their next restart),
		// and the copy of the data it leaves, for an undo
		if err := ap.ensureCopy(ctx, &p, a.after.Data); err != nil {
			return p, a, err
		}
		if p.copy != "" {
			if err := ap.keepPrevious(ctx, &p); err != nil {
				return p, a, err
			}
		}
	}
	return p, a, nil
}

// ensureCopy creates the copy of data the restart points the template at
// (or finds it there), unless the template mounts it already (which
// mountedThere checked).
func (ap applier) ensureCopy(ctx context.Context, p *plan, data map[string]string) error {
	e := ap.e
	if p.volume == "" {
		return nil
	}
	// the template generation the restart moves to mounts it
	cp := configmap.NewCopy(p.record, data, p.ds, rollout.TemplateGeneration(p.ds)+1)
	if cp.Name == p.copy || cp.Name == p.mounted {
		return nil
	}
	if _, err := e.copies.Ensure(ctx, cp); err != nil {
		return fmt.Errorf("%w; nothing restarted", err)
	}
	p.copy = cp.Name
	return nil
}

// keepPrevious makes sure the data the fleet runs before this run's restart
// is in a copy, and names it for the restart PATCH to record (an undo
// restores it, and so does a rollback). kubeadm's layout has it only in
// the record, which is written once the rollout is done: it gets a copy
// now. A copy the template mounts is that copy (mountedThere checked it).
func (ap applier) keepPrevious(ctx context.Context, p *plan) error {
	e := ap.e
	if p.volume == "" {
		return nil
	}
	if configmap.IsCopyName(e.o.ConfigMap, p.mounted) {
		p.previous = p.mounted // what the pods mount
		return nil
	}
	// what the template generation the fleet runs now mounts: older in the
	// history than the copy the restart moves to
	cp := configmap.NewCopy(p.record, p.before.Data, p.ds, rollout.TemplateGeneration(p.ds))
	if cp.Name == p.copy {
		return nil // a restart onto the same data: nothing to undo to
	}
	if _, err := e.copies.Ensure(ctx, cp); err != nil {
		return fmt.Errorf("keep the config the fleet runs now, for an undo: %w; nothing restarted", err)
	}
	p.previous = cp.Name
	return nil
}

// mountedThere makes sure the copy the template mounts is there before a
// restart keeps the template on it or moves it off (a rollback's target):
// made again from the data the plan holds when that is its data, refused
// while it is being deleted; a copy whose data the plan does not hold (a
// restart owed onto another) must be there as it is.
func (ap applier) mountedThere(ctx context.Context, p plan) error {
	e := ap.e
	cp := configmap.NewCopy(p.record, p.before.Data, p.ds, rollout.TemplateGeneration(p.ds))
	if cp.Name == p.mounted && !e.o.Check {
		return ap.checkMounted(ctx, cp)
	}
	mounted, err := e.copies.Get(ctx, p.mounted)
	if apierrors.IsNotFound(err) && cp.Name == p.mounted {
		// check mode: a real run makes it again
		e.warn(fmt.Sprintf("configmap %s/%s, which daemonset %s/%s mounts, is gone (another hand deleted it): a real run makes it again from the data it held, before the restart",
			e.o.Namespace, p.mounted, e.o.Namespace, e.o.DaemonSet))
		return nil
	}
	if err == nil && mounted.DeletionTimestamp != nil {
		err = fmt.Errorf("configmap %s/%s is being deleted", e.o.Namespace, p.mounted)
	}
	if err != nil {
		return fmt.Errorf("the config the fleet runs, which a rollback restores: %w: nothing restarted; run `kubectl rollout undo daemonset/%s -n %s` to a template whose ConfigMap exists, or restore it, then run again",
			err, e.o.DaemonSet, e.o.Namespace)
	}
	return nil
}

// checkMounted makes sure the copy cp the template mounts is there:
// made again from cp when another hand deleted it, refused while it is
// being deleted.
func (ap applier) checkMounted(ctx context.Context, cp *corev1.ConfigMap) error {
	e := ap.e
	recreated, err := e.copies.Check(ctx, cp)
	if err != nil {
		return fmt.Errorf("%w; nothing restarted", err)
	}
	if recreated {
		e.warn(fmt.Sprintf("configmap %s/%s, which daemonset %s/%s mounts, was gone (another hand deleted it: a prune, a label-based cleanup, the garbage collector after the DaemonSet was replaced); made again from the data it held, before the restart",
			e.o.Namespace, cp.Name, e.o.Namespace, e.o.DaemonSet))
	}
	return nil
}

// markNoEffect records on the DaemonSet, before the ConfigMap write, that
// its pods run the data about to be written as well. A crash after it and
// before the write leaves a record of data the ConfigMap does not hold,
// which nothing reads. If the DaemonSet moved so that its pods no longer
// run the data before the change, it records nothing and the run restarts
// as usual.
func (ap applier) markNoEffect(ctx context.Context, p *plan) error {
	ds, err := ap.e.dss.ApplyFresh(ctx, p.ds, func(ds *appsv1.DaemonSet, reread bool) (rollout.Change, bool) {
		if reread && !rollout.RunsMounted(ds, p.volume, ap.e.o.ConfigMap, p.before.Hash) {
			p.noEffect = false
			return rollout.Change{}, false
		}
		return rollout.Change{ResourceVersion: ds.ResourceVersion,
			NoEffect: rollout.NoEffect(p.target, ds.Annotations[rollout.HashAnnotation])}, true
	})
	p.ds = ds
	return err
}

// writeConfigMap writes the desired data, the whole of it, with an update
// carrying the resourceVersion of the capture it was computed from; on a
// conflict it computes it again on top of the other writer's version. A
// --manifest is written this way too: with server-side apply the API
// server removes every key our field manager applied before and now leaves
// out, so a manifest with only kubeconfig.conf deleted the config.conf an
// earlier manifest had set. An update removes no key it carries, and it
// carries them all.
func (ap applier) writeConfigMap(ctx context.Context, cm *corev1.ConfigMap, desired map[string]string) error {
	// one update carrying the resourceVersion the data was validated on:
	// another writer in between makes it a conflict, and the run stops
	// rather than write on top of data nobody validated
	_, err := ap.e.cms.Update(ctx, cm, desired)
	if apierrors.IsConflict(err) {
		return fmt.Errorf("%w; configmap %s/%s changed after this run read and validated it (another writer): this run wrote nothing; run again, it validates and applies on top of the new data", err, ap.e.o.Namespace, ap.e.o.ConfigMap)
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
func (ap applier) changedUnder(p plan, a *applied) error {
	after := a.after
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
	if !maps.EqualFunc(p.before.BinaryData, after.BinaryData, bytes.Equal) {
		what = append(what, "binaryData changed")
	}
	sort.Strings(what)
	sort.Strings(keys)
	a.changedKeys = slices.Compact(keys)
	verb := "wrote"
	if len(p.keys) == 0 {
		verb = "found"
	}
	return fmt.Errorf("configmap %s/%s is not what this run %s: %s (another writer, or a write that did not keep it); nothing restarted onto data that was not validated: the restart is owed, and the next run validates the data as it is then and does it",
		ap.e.o.Namespace, a.name, verb, strings.Join(what, ", "))
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
