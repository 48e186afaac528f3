package kpsync

import (
	"context"
	"fmt"
	"slices"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/kube-proxy-sync/kube-proxy-sync/internal/configmap"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/rollout"
)

// The copy the template mounts is the config of every kube-proxy that
// starts from now on (a reboot, an eviction, a new node), whatever this
// run decides, and another hand may have taken it (a prune, an operator,
// the garbage collector once its owner is gone). So every run, check mode
// included, checks it before any write, also when it has nothing else to
// do, and no run ends green while the template points at a ConfigMap a
// starting kube-proxy cannot mount.

// verifyMounted makes sure that the ConfigMap mounted, which the template
// of ds mounts, is one a starting kube-proxy can mount when it is a copy
// of the record: there, immutable, not being deleted, holding the data its
// name says, and owned by ds when it names ds as its owner (the garbage
// collector deletes a copy whose owner is gone: ds replaced, `kubectl
// replace --force`).
//
// What it can, it heals, each with a warning and counted as a write of
// the run (env.healed; check mode: said, not done): a copy gone, or
// owned by a DaemonSet that is gone, is made anew, as the run makes
// copies (configmap.NewCopy), when the record holds the data its name
// says. Anything else fails the run, naming the copy and what to do,
// before any write.
func verifyMounted(ctx context.Context, e *env, record *corev1.ConfigMap, ds *appsv1.DaemonSet, mounted string) error {
	o := e.o
	if !configmap.IsCopyName(record.Name, mounted) {
		return nil // the record itself, or nothing: the record is read anyway
	}
	// the copy as the run makes it, from the record, when the record holds
	// its data (the generation whose pods mount it: the template's)
	anew := configmap.NewCopy(record, record.Data, ds, rollout.TemplateGeneration(ds))
	canHeal := anew.Name == mounted
	what := fmt.Sprintf("daemonset %s/%s mounts configmap %s/%s", o.Namespace, o.DaemonSet, o.Namespace, mounted)
	starts := "every kube-proxy that starts from now on (a reboot, an eviction, a new node) cannot mount its config"
	undo := fmt.Sprintf("run `kubectl rollout undo daemonset/%s -n %s` to a revision whose ConfigMap exists, then run again", o.DaemonSet, o.Namespace)
	if canHeal {
		undo = fmt.Sprintf("run again: the run makes it anew from configmap %s/%s, which holds its data", o.Namespace, record.Name)
	}
	cp, err := e.copies.Get(ctx, mounted)
	switch {
	case apierrors.IsNotFound(err) && canHeal:
		state := map[bool]string{true: "is gone", false: "was gone"}[o.Check]
		return heal(ctx, e, anew, nil, fmt.Sprintf("configmap %s/%s, which daemonset %s/%s mounts, %s (another hand deleted it: a prune, a label-based cleanup, the garbage collector)", o.Namespace, mounted, o.Namespace, o.DaemonSet, state))
	case apierrors.IsNotFound(err):
		return fmt.Errorf("%s, which is gone (%w), and no ConfigMap this run reads holds the data its name says (configmap %s/%s holds other data): %s; nothing was changed: %s",
			what, err, o.Namespace, record.Name, starts, undo)
	case err != nil:
		return fmt.Errorf("check the config %s: %w; nothing was changed", what, err)
	case cp.DeletionTimestamp != nil:
		return fmt.Errorf("%s, which is being deleted (since %s, finalizers %v): once it is gone %s; nothing was changed: let the deletion finish (or remove the finalizers), then %s",
			what, cp.DeletionTimestamp.UTC().Format(time.RFC3339), cp.Finalizers, starts, undo)
	case configmap.CopyName(record.Name, configmap.Hash(cp.Data, cp.BinaryData)) != mounted:
		if canHeal {
			undo = "delete it, then " + undo
		}
		return fmt.Errorf("%s, which holds other data than its name says (not made by kube-proxy-sync?): the kube-proxies that start from now on run data no run validated; nothing was changed: %s",
			what, undo)
	case !ptr.Deref(cp.Immutable, false):
		return fmt.Errorf("%s, which is not immutable: a write to it changes the config of every kube-proxy that starts from now on, and of every running one should it read its file again; nothing was changed: make it immutable (`kubectl patch configmap %s -n %s --type merge -p '{\"immutable\":true}'`), then run again",
			what, mounted, o.Namespace)
	}
	if gone := goneOwner(cp, ds); gone != nil {
		why := fmt.Sprintf("configmap %s/%s, which daemonset %s/%s mounts, is owned by daemonset %s (uid %s), which is gone (the DaemonSet was replaced: uid %s now), so the garbage collector deletes it", o.Namespace, mounted, o.Namespace, o.DaemonSet, gone.Name, gone.UID, ds.UID)
		if !canHeal {
			return fmt.Errorf("%s: then %s; nothing was changed: remove its owner at once (`kubectl patch configmap %s -n %s --type json -p '[{\"op\":\"remove\",\"path\":\"/metadata/ownerReferences\"}]'`), then run again", why, starts, mounted, o.Namespace)
		}
		return heal(ctx, e, anew, cp, why)
	}
	return nil
}

// heal makes the copy cp anew, as the run makes copies, after deleting
// old, the copy there now (nil: none), with a warning saying why; in check
// mode it only says so. Either is a write of the run (env.healed), so the
// run takes the Lease for it: the plan before the Lease only records it,
// the plan under the Lease makes it.
func heal(ctx context.Context, e *env, cp, old *corev1.ConfigMap, why string) error {
	o := e.o
	if !slices.Contains(e.healed, cp.Name) {
		e.healed = append(e.healed, cp.Name)
	}
	if o.Check {
		e.warn(fmt.Sprintf("%s: a real run makes it again from configmap %s/%s, which holds its data", why, o.Namespace, o.ConfigMap))
		return nil
	}
	if !e.locked {
		return nil
	}
	if old != nil {
		// the only way the Role allows (no update on copies); a pod
		// starting in between finds no ConfigMap and is retried by the
		// kubelet
		err := e.copies.ConfigMaps.Delete(ctx, old.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: ptr.To(old.UID)}})
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("%s: delete it to make it anew: %w; nothing was changed: run again", why, err)
		}
	}
	if _, err := e.copies.Ensure(ctx, cp); err != nil {
		return fmt.Errorf("%s: make it anew: %w", why, err)
	}
	e.warn(fmt.Sprintf("%s: made again from configmap %s/%s, which holds its data, owned by daemonset %s/%s", why, o.Namespace, o.ConfigMap, o.Namespace, o.DaemonSet))
	return nil
}

// goneOwner is the ownerReference of cp that names ds by name with
// another UID (an earlier DaemonSet of that name), when every owner of cp
// is such: the garbage collector deletes cp then. nil when cp has no
// owner, or an owner that may exist (another object is not this run's to
// judge), or ds has no UID (not read from an API server).
func goneOwner(cp *corev1.ConfigMap, ds *appsv1.DaemonSet) *metav1.OwnerReference {
	if ds.UID == "" || len(cp.OwnerReferences) == 0 {
		return nil
	}
	for i := range cp.OwnerReferences {
		ref := &cp.OwnerReferences[i]
		if ref.Kind != "DaemonSet" || ref.Name != ds.Name || ref.UID == ds.UID {
			return nil
		}
	}
	return &cp.OwnerReferences[0]
}
