package kpsync

import (
	"context"
	"fmt"
	"sort"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/kube-proxy-sync/kube-proxy-sync/internal/configmap"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/rollout"
)

// The config travels with the template (see configmap.NewCopy): the pod
// template mounts an immutable copy of the record ConfigMap, named by its
// data's hash. A change creates a new copy and the restart PATCH points
// the template's volume at it; nodes the rollout has not reached keep
// reading the copy they mount, whatever restarts their kube-proxy. The
// record (kubeadm's kube-system/kube-proxy, which kubeadm and kubespray
// read and write) is written to what the fleet runs once no pod mounts it.

// configVolume is the template volume of the container that mounts the
// record or one of its copies, and the ConfigMap it names ("", "" when
// the container mounts neither).
func configVolume(ds *appsv1.DaemonSet, container, record string) (volume, mounted string) {
	c, err := findContainer(ds, container)
	if err != nil {
		return "", ""
	}
	mounts := map[string]bool{}
	for _, m := range c.VolumeMounts {
		mounts[m.Name] = true
	}
	for _, v := range ds.Spec.Template.Spec.Volumes {
		if v.ConfigMap == nil || !mounts[v.Name] {
			continue
		}
		if v.ConfigMap.Name == record || configmap.IsCopyName(record, v.ConfigMap.Name) {
			return v.Name, v.ConfigMap.Name
		}
	}
	return "", ""
}

// runs reports whether the DaemonSet's pods run the data with this hash,
// judged from what its template mounts (volume, of the record or a copy
// of it): its stamp (rollout.Runs) is a hint, which holds only while the
// template mounts the copy of the stamped data. `kubectl rollout undo`
// points the template at another copy and leaves the stamp: then the
// stamp is stale, and the pods run what the template mounts. On kubeadm's
// layout (the template mounts the record) the stamp is all there is.
func runs(ds *appsv1.DaemonSet, volume, record, hash string) bool {
	if !rollout.Runs(ds, hash) {
		return false
	}
	mounted := rollout.ConfigVolumeOf(ds, volume)
	if volume == "" || mounted == record {
		return true
	}
	return mounted == configmap.CopyName(record, ds.Annotations[rollout.HashAnnotation])
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
	first, err := e.dss.FirstMounting(ctx, p.ds, o.Container, p.volume, p.mounted)
	if err != nil {
		return nil, nil, fmt.Errorf("--undo: %w; nothing was changed", err)
	}
	if first != nil && first.Image != p.imageBefore {
		return nil, nil, fmt.Errorf("--undo: the image of daemonset %s/%s changed since its last config change (revision %d moved it onto configmap %s with %s, it runs %s now), and --undo restores only the config before that change (configmap %s/%s), keeping the new image: nothing was changed; run `kubectl rollout undo daemonset/%s -n %s` to go back a revision (config and image), or run with the values and --image you want",
			o.Namespace, o.DaemonSet, first.Number, p.mounted, first.Image, p.imageBefore, o.Namespace, prev, o.DaemonSet, o.Namespace)
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
