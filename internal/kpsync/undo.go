package kpsync

import (
	"context"
	"fmt"
	"sort"

	"github.com/kube-proxy-sync/kube-proxy-sync/internal/configmap"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/rollout"
)

// undoTo is the data an undo restores: the copy the DaemonSet names as the
// config its fleet ran before the last change, with the keys that differ
// from what it runs now.
func undoTo(ctx context.Context, e *env, p plan) (map[string]string, []string, error) {
	o := e.o
	prev := p.ds.Annotations[rollout.PreviousConfigAnnotation]
	if !configmap.IsCopyName(o.ConfigMap, prev) {
		return nil, nil, fmt.Errorf("--undo: daemonset %s/%s names no earlier config (%s): nothing was changed; a restart by kube-proxy-sync records one", o.Namespace, o.DaemonSet, rollout.PreviousConfigAnnotation)
	}
	if prev == p.mounted {
		return nil, nil, fmt.Errorf("--undo: daemonset %s/%s mounts configmap %s/%s, the config before its last change, already (`kubectl rollout undo` put it back): nothing to undo, nothing was changed; to go forward again, run with the values you want (or `kubectl rollout undo` once more)",
			o.Namespace, o.DaemonSet, o.Namespace, prev)
	}
	// --undo reverts the config of the last change; an image rollout
	// since that change (the template moved onto the copy it mounts with
	// another image) is not undone by it, and is refused
	history, err := e.dss.History(ctx, p.ds)
	if err != nil {
		return nil, nil, fmt.Errorf("--undo: %w; nothing was changed", err)
	}
	first := history.FirstMounting(o.Container, p.volume, p.mounted)
	if first != nil && first.Image != p.imageBefore {
		return nil, nil, fmt.Errorf("--undo: the image of daemonset %s/%s changed since its last config change (revision %d moved it onto configmap %s with %s, it runs %s now), and --undo restores only the config before that change (configmap %s/%s), keeping the new image: nothing was changed; run `kubectl rollout undo daemonset/%s -n %s` to go back a revision (config and image), or run with the values and --image you want",
			o.Namespace, o.DaemonSet, first.Number, p.mounted, first.Image, p.imageBefore, o.Namespace, prev, o.DaemonSet, o.Namespace)
	}
	if err := undoImage(e, p, history, prev); err != nil {
		return nil, nil, err
	}
	cp, err := e.copies.Get(ctx, prev)
	if err != nil {
		return nil, nil, fmt.Errorf("--undo: the earlier config: %w; nothing was changed", err)
	}
	if cp.DeletionTimestamp != nil {
		return nil, nil, fmt.Errorf("--undo: the earlier config, configmap %s/%s, is being deleted (finalizers %v): a template pointed at it would mount nothing once it is gone; nothing was changed: run with that config's values instead", e.o.Namespace, prev, cp.Finalizers)
	}
	var keys []string
	for k := range cp.Data {
		if v, ok := p.base.Data[k]; !ok || v != cp.Data[k] {
			keys = append(keys, k)
		}
	}
	for k := range p.base.Data {
		if _, ok := cp.Data[k]; !ok {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	e.d.Log.Infof("--undo: restoring configmap %s/%s (keys %v)", e.o.Namespace, prev, keys)
	return cp.Data, keys, nil
}

// undoImage judges the move an undo makes, from the config and image the
// fleet runs now to the config before the last change with the image the
// template keeps (--undo moves only the config): refused where that
// config ran with another image, or with one the history no longer shows
// (revisions pruned), since that pair is no state the fleet ran. A
// rollout that changed the image and the config together (an upgrade
// with a settings change) is such a change: undoing its config alone
// would keep the new image, and across kube-proxy 1.40 a config that
// names no mode switches iptables to nftables instead of going back.
//
// The config before the first change from kubeadm's layout ran from the
// record, which the template mounted then (the change made the copy): so
// where no revision mounts the copy, those mounting the record ran it. A
// pruned history drops the oldest revisions first, so where the copy's
// are gone, the record's older ones are too: unknown.
func undoImage(e *env, p plan, history rollout.History, prev string) error {
	o := e.o
	ran := history.LastMounting(o.Container, p.volume, prev, o.ConfigMap)
	forward := fmt.Sprintf("run `kubectl rollout undo daemonset/%s -n %s` to go back a revision (config and image together), or run with the values and --image you want", o.DaemonSet, o.Namespace)
	if ran == nil {
		return fmt.Errorf("--undo: no revision of daemonset %s/%s mounts configmap %s/%s (the config before its last change) any more: the image that config ran with is unknown, and --undo would run it with %s, the image the fleet runs now with configmap %s/%s: nothing was changed; %s",
			o.Namespace, o.DaemonSet, o.Namespace, prev, p.imageBefore, o.Namespace, p.mounted, forward)
	}
	if ran.Image != p.imageBefore {
		return fmt.Errorf("--undo: daemonset %s/%s ran configmap %s/%s (the config before its last change) with %s (revision %d) and runs configmap %s/%s with %s now: its last change moved the image as well, and --undo restores only the config, so it would run configmap %s with %s, which is not what the fleet ran before that change: nothing was changed; %s",
			o.Namespace, o.DaemonSet, o.Namespace, prev, ran.Image, ran.Number, o.Namespace, p.mounted, p.imageBefore, prev, p.imageBefore, forward)
	}
	return nil
}
