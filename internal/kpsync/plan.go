package kpsync

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"sort"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/kube-proxy-sync/kube-proxy-sync/internal/configmap"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/rollout"
)

// planner is the plan phase: it captures the record and the DaemonSet
// (and the copy the fleet runs, where it is not the record) and decides
// from that capture alone.
type planner struct{ e *env }

func (pl planner) plan(ctx context.Context) (plan, error) {
	e := pl.e
	o := e.o
	p := plan{roll: rollAsked(o)}
	e.nodes.list = nil // each plan observes the nodes once (the one under the Lease again)
	cm, err := e.cms.Get(ctx)
	if err != nil {
		return p, err
	}
	p.record = cm
	if p.ds, err = e.dss.Get(ctx); err != nil {
		return p, err
	}
	p.volume, p.mounted = configVolume(p.ds, o.Container, o.ConfigMap)
	if err := verifyMounted(ctx, e, cm, p.ds, p.mounted); err != nil {
		return p, err
	}
	p.heals = len(e.healed) > 0
	p.imageBefore = rollout.ContainerImage(p.ds, o.Container)
	if p.image = imageChange(o, p.imageBefore); p.image != "" {
		if _, err := findContainer(p.ds, o.Container); err != nil {
			return p, err
		}
		if o.Restart == RestartNever {
			return p, fmt.Errorf("daemonset %s/%s: container %s runs %s, and the image asked is %s: an image change restarts every pod, which --restart never does not do; nothing was changed: run with --restart auto, or without the image",
				o.Namespace, o.DaemonSet, o.Container, p.imageBefore, p.image)
		}
	}
	if o.Template != nil && !o.Undo {
		if p.template, err = rollout.OwnTemplate(o.Template, p.ds, o.Container, p.volume); err != nil {
			return p, fmt.Errorf("--template: %w; nothing was changed", err)
		}
		if p.templateChanged, err = e.dss.TemplateDiffers(ctx, p.ds, p.template); err != nil {
			return p, err
		}
		if p.access, err = planAccess(ctx, e); err != nil {
			return p, err
		}
	}
	var edited bool
	if p.base, edited, err = base(ctx, e, cm, p.ds, p.mounted); err != nil {
		return p, err
	}
	p.before = configmap.NewSnapshot(p.base)
	p.recordLags = p.base != cm && p.before.Hash != configmap.Hash(cm.Data, cm.BinaryData)
	switch {
	case o.Undo:
		if p.desired, p.keys, err = undoTo(ctx, e, p); err != nil {
			return p, err
		}
	case edited:
		// another hand wrote the record: its data is the config asked
		// for, with the values on top, a change from what the fleet runs
		// (validated and rolled as any other)
		if p.desired, p.keys, err = configmap.Desired(cm.Data, o.Spec); err != nil {
			return p, fmt.Errorf("configmap %s/%s: %w", o.Namespace, cm.Name, err)
		}
		p.keys = changedFrom(p.base.Data, p.desired, p.keys)
		if !maps.EqualFunc(cm.BinaryData, p.base.BinaryData, bytes.Equal) {
			p.keys = append(p.keys, "binaryData") // the copy carries the record's
		}
		e.warn(fmt.Sprintf("configmap %s/%s holds data that is neither what daemonset %s/%s runs (configmap %s) nor a config it ran before: another hand wrote it (an edit, kubeadm); applied as a change on top of what the fleet runs, with the values asked: %s",
			o.Namespace, cm.Name, o.Namespace, o.DaemonSet, p.base.Name, strings.Join(changedFrom(p.base.Data, cm.Data, nil), ", ")))
	default:
		if p.desired, p.keys, err = configmap.Desired(p.base.Data, o.Spec); err != nil {
			return p, fmt.Errorf("configmap %s/%s: %w", o.Namespace, p.base.Name, err)
		}
	}
	if p.recordLags && !edited {
		// a record another DaemonSet mounts is never written (see settle):
		// it lags for good, and that is no write for this run to make
		others, err := e.dss.Mounting(ctx, p.ds, cm.Name)
		if err != nil {
			return p, err
		}
		if len(others) > 0 {
			p.recordLags = false
			e.warn(fmt.Sprintf("configmap %s/%s is not written while daemonset(s) %s mount it: it holds their config, not the one daemonset %s/%s runs (configmap %s)",
				o.Namespace, cm.Name, strings.Join(others, ", "), o.Namespace, o.DaemonSet, p.base.Name))
		}
	}
	if p.desired, p.keys, err = upgradeGuard(e, p); err != nil {
		return p, err
	}
	if p.probe, err = planProbe(e, p.next(o.Container), p.desired); err != nil {
		return p, err
	}
	p.target = p.before.Hash
	if len(p.keys) > 0 {
		p.target = configmap.Hash(p.desired, cm.BinaryData)
	}
	var none bool
	p.effects, none = keyEffects(p.base.Data, p.desired, p.keys, effectTargets(o, p.ds))
	p.noEffect = none && o.Restart != RestartAlways && rollout.RunsMounted(p.ds, p.volume, o.ConfigMap, p.before.Hash)
	if len(p.keys) > 0 && !p.noEffect && p.volume == "" {
		return p, fmt.Errorf("daemonset %s/%s: container %s mounts configmap %s/%s in no volume: kube-proxy-sync points that volume at a copy of the new config, so nothing was written; mount it as kubeadm does (a configMap volume) and run again",
			o.Namespace, o.DaemonSet, o.Container, o.Namespace, o.ConfigMap)
	}
	_, stamped := p.ds.Annotations[rollout.HashAnnotation]
	mountsTarget := p.volume != "" && rollout.ConfigVolumeOf(p.ds, p.volume) == configmap.CopyName(o.ConfigMap, p.target)
	p.reason, p.adopt = decide(o.Restart, len(p.keys) > 0, rollout.RunsMounted(p.ds, p.volume, o.ConfigMap, p.target), stamped, p.noEffect, mountsTarget)
	if p.reason == "" && p.image != "" {
		p.reason = ReasonImageChanged
	}
	if p.reason == "" && p.templateChanged {
		p.reason = ReasonTemplateChanged
	}
	p.resume = rollout.CanaryLeftover(p.ds) && o.Restart != RestartNever
	if err := validateConfig(e, p.next(o.Container), p); err != nil {
		return p, err
	}
	// what every kube-proxy runs now and after this run, and every guard
	// on that move, however it was asked (transition.go)
	if p.tr, err = observeTransition(ctx, e, p); err != nil {
		return p, err
	}
	if err := p.tr.judge(ctx, e, p); err != nil {
		return p, err
	}
	if p.migration, p.roll, err = planMigration(ctx, e, p); err != nil {
		return p, err
	}
	p.modeDecided = true
	warnInsecureTLS(e, p.desired)
	if p.noEffect && (p.mounted == o.ConfigMap || (p.recordLags && !edited)) && len(p.keys) > 0 {
		// validated, but the record is what the pods mount (or lags
		// behind them): no write; the change waits for the next run that
		// restarts
		e.warn(fmt.Sprintf("configmap %s/%s: %s changed with no effect on the running kube-proxies; not written while daemonset %s/%s mounts it: the next run that restarts kube-proxy carries it",
			o.Namespace, o.ConfigMap, strings.Join(p.keys, ", "), o.Namespace, o.DaemonSet))
		p.deferred = p.keys
		p.keys, p.desired, p.effects, p.target = nil, p.base.Data, map[string]string{}, p.before.Hash
	}
	p.targetCopy = configmap.CopyName(o.ConfigMap, p.target)
	if (p.reason != "" || p.probe.changes()) && p.roll.strategy == StrategyRolling &&
		p.ds.Spec.UpdateStrategy.Type == appsv1.OnDeleteDaemonSetStrategyType && p.ds.Annotations[rollout.StrategyAnnotation] == "" {
		return p, fmt.Errorf("daemonset %s/%s uses updateStrategy OnDelete, so a rollout restart would replace no pod; use --strategy canary (kube-proxy-sync deletes the pods in batches) or switch it to RollingUpdate", o.Namespace, o.DaemonSet)
	}
	return p, nil
}

// changedFrom is keys (each "KEY" or "KEY:FIELD", as configmap.Desired
// names them) that still differ between before and after, with every
// other key of either that differs.
func changedFrom(before, after map[string]string, keys []string) []string {
	differs := func(k string) bool {
		b, inBefore := before[k]
		a, inAfter := after[k]
		return inBefore != inAfter || a != b
	}
	out := []string{}
	covered := map[string]bool{}
	for _, c := range keys {
		k, _, _ := strings.Cut(c, ":")
		if differs(k) {
			out = append(out, c)
			covered[k] = true
		}
	}
	for _, m := range []map[string]string{before, after} {
		for k := range m {
			if differs(k) && !covered[k] {
				out = append(out, k)
				covered[k] = true
			}
		}
	}
	sort.Strings(out)
	return out
}

// base is the ConfigMap whose data the fleet runs, which a change is made
// on: the record, unless the template mounts a copy whose data the record
// does not hold and the pods do not run the record's data as well (a run
// stopped between its rollout and its record write, or someone wrote the
// record by hand): then that copy.
//
// A copy the pods owe a restart onto (rollout.PendingConfigAnnotation, a
// run with --restart never) comes first: it is the config they are to run.
//
// edited: the record holds data no copy holds, neither what the fleet runs
// nor a config it ran before, so another hand wrote it (an operator's
// `kubectl edit`, the documented kubeadm way, or kubeadm's addon phase):
// the plan applies that data as a change (see plan).
func base(ctx context.Context, e *env, record *corev1.ConfigMap, ds *appsv1.DaemonSet, mounted string) (_ *corev1.ConfigMap, edited bool, _ error) {
	if pending := ds.Annotations[rollout.PendingConfigAnnotation]; configmap.IsCopyName(record.Name, pending) && pending != mounted && mounted != "" {
		cp, err := e.copies.Get(ctx, pending)
		if err == nil {
			return cp, false, nil
		}
		if !apierrors.IsNotFound(err) {
			return nil, false, err
		}
		e.warn(fmt.Sprintf("daemonset %s/%s owes a restart onto configmap %s/%s, which is gone: that restart is dropped", e.o.Namespace, e.o.DaemonSet, e.o.Namespace, pending))
	}
	if mounted == "" || mounted == record.Name {
		return record, false, nil
	}
	hash := configmap.Hash(record.Data, record.BinaryData)
	// the record's data, or data the pods of that copy run as well (a
	// change with no effect, recorded against the copy's stamp; a copy
	// put there by another hand, `kubectl rollout undo`, is not that copy)
	stamp := ds.Annotations[rollout.HashAnnotation]
	if mounted == configmap.CopyName(record.Name, hash) || (len(stamp) >= configmap.CopyHashLen && mounted == configmap.CopyName(record.Name, stamp) && rollout.Runs(ds, hash)) {
		return record, false, nil
	}
	cp, err := e.copies.Get(ctx, mounted)
	if apierrors.IsNotFound(err) {
		return nil, false, fmt.Errorf("daemonset %s/%s mounts configmap %s/%s, which does not exist: its pods cannot start; run `kubectl rollout undo daemonset/%s -n %s` to a template whose ConfigMap exists, then run again: %w",
			e.o.Namespace, e.o.DaemonSet, e.o.Namespace, mounted, e.o.DaemonSet, e.o.Namespace, err)
	}
	if err != nil {
		return nil, false, err
	}
	// the record lags behind the fleet (a run stopped between its rollout
	// and its record write, `kubectl rollout undo`): it holds a config the
	// fleet ran, whose copy is there; or another hand wrote it
	_, err = e.copies.Get(ctx, configmap.CopyName(record.Name, hash))
	if apierrors.IsNotFound(err) {
		return cp, true, nil
	}
	return cp, false, err
}

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
