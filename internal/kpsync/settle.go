package kpsync

import (
	"context"
	"fmt"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/kube-proxy-sync/kube-proxy-sync/internal/configmap"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/rollout"
)

// DefaultHistory is how many copies of the config are kept besides the
// ones in use, as the DaemonSet's own revisionHistoryLimit keeps ten
// ControllerRevisions.
const DefaultHistory = 10

// settler is the settle phase: the record is written to what the fleet
// runs, and the copies beyond the history collected.
type settler struct{ e *env }

// settle makes the record hold the config the template mounts, once no
// pod of the DaemonSet mounts the record, and collects the copies beyond
// the history that nothing uses. A record some pod still mounts is left
// for a later run, which finds it lagging (see base) and writes it then.
//
// ds is the DaemonSet as this run last read or wrote it; known is a
// ConfigMap this run has read already (name and snapshot), so that it is
// not read again; fleet, when this run rolled the DaemonSet, says which
// pods mount what (see recordUse). A record that someone else wrote
// meanwhile makes the write conflict: then the DaemonSet, the record and
// the pods are read again.
func (st settler) settle(ctx context.Context, p plan, ds *appsv1.DaemonSet, a applied, fleet *rollout.Fleet, rvBefore string) (settled, error) {
	o := st.e.o
	u, err := st.recordUse(ctx, ds, p.record, fleet)
	if err != nil {
		return settled{}, err
	}
	out, err := st.settleOn(ctx, p, &u, a.name, a.after, rvBefore)
	if u.known && apierrors.IsConflict(err) {
		st.e.d.Log.Infof("configmap %s/%s changed since this run read it (another writer): reading it, daemonset %s/%s and its pods again", o.Namespace, o.ConfigMap, o.Namespace, o.DaemonSet)
		if u, err = st.recordUse(ctx, nil, nil, nil); err != nil {
			return out, err
		}
		out, err = st.settleOn(ctx, p, &u, a.name, a.after, rvBefore)
	}
	return out, err
}

// recordUse is what settle decides on: the DaemonSet (the ConfigMap its
// template mounts, its stamp, the configs it names), the record, and what
// mounts the record and its copies.
type recordUse struct {
	ds     *appsv1.DaemonSet
	record *corev1.ConfigMap
	// known: the DaemonSet and the record as this run last read or
	// wrote them, not read again
	known bool
	// uses: the pods (the fleet the rollout followed, or listed when
	// needed), the other DaemonSets and the revisions that mount the
	// record and its copies
	uses *rollout.Uses
}

// recordUse starts from the DaemonSet as this run last read or wrote it
// (the restart PATCH's answer, or the capture under the lease) and the
// record as captured under the lease or written by this run: under the
// lease no other run writes them, and a record written by another hand
// makes the record write conflict. A nil ds reads both.
//
// When this run rolled the DaemonSet, the fleet answers which pods mount
// what: it followed each pod up to the end of the rollout, with the
// ConfigMaps it mounts. A pod it last saw terminating may be gone since:
// the pods are listed then. A pod of a template newer than the one this
// run knows means someone else moved the template: everything is read
// again.
func (st settler) recordUse(ctx context.Context, ds *appsv1.DaemonSet, record *corev1.ConfigMap, fleet *rollout.Fleet) (recordUse, error) {
	o := st.e.o
	of := func(name string) bool { return name == o.ConfigMap || configmap.IsCopyName(o.ConfigMap, name) }
	if ds != nil && fleet != nil && fleet.Newest() > rollout.TemplateGeneration(ds) {
		ds = nil
	}
	if ds == nil {
		var err error
		if ds, err = st.e.dss.Get(ctx); err != nil {
			return recordUse{}, err
		}
		if record, err = st.e.cms.Get(ctx); err != nil {
			return recordUse{}, err
		}
		return recordUse{ds: ds, record: record, uses: st.e.dss.Uses(ds, nil, of)}, nil
	}
	var pods *rollout.Fleet
	if fleet != nil {
		if _, current := fleet.MountedBy(o.ConfigMap); current {
			pods = fleet
		}
	}
	return recordUse{ds: ds, record: record, known: true, uses: st.e.dss.Uses(ds, pods, of)}, nil
}

// settleOn writes the record and collects the copies, given u.
func (st settler) settleOn(ctx context.Context, p plan, u *recordUse, knownName string, known configmap.Snapshot, rvBefore string) (settled, error) {
	e, o := st.e, st.e.o
	var out settled
	_, mounted := configVolume(u.ds, o.Container, o.ConfigMap)
	if mounted == "" || mounted == o.ConfigMap {
		return out, nil // kubeadm's layout: the record is what the pods mount
	}
	out.configMapName = mounted
	// the record holds the mounted copy's data, or data the pods run as
	// well (a change with no effect, see markNoEffect)
	hash := configmap.Hash(u.record.Data, u.record.BinaryData)
	stamp := u.ds.Annotations[rollout.HashAnnotation]
	runsAsWell := len(stamp) >= configmap.CopyHashLen && mounted == configmap.CopyName(o.ConfigMap, stamp) && rollout.Runs(u.ds, hash)
	if mounted != configmap.CopyName(o.ConfigMap, hash) && !runsAsWell {
		data := known.Data
		if mounted != knownName {
			cp, err := e.copies.Get(ctx, mounted)
			if err != nil {
				return out, err
			}
			data = cp.Data
		}
		pods, err := u.uses.Pods(ctx)
		if err != nil {
			return out, err
		}
		// pods of the template before, terminating still: the rollout ends
		// when each node's new pod is Ready, the old one may take its
		// grace period to go
		by, err := e.dss.WaitUnmounted(ctx, pods, o.ConfigMap)
		if err != nil {
			e.d.Log.Warnf("following the terminating pods that mount configmap %s/%s: %v", o.Namespace, o.ConfigMap, err)
		}
		var others []string
		if len(by) == 0 {
			if others, err = u.uses.OthersMounting(ctx, o.ConfigMap); err != nil {
				return out, err
			}
		}
		switch {
		case len(by) > 0:
			e.warn(fmt.Sprintf("configmap %s/%s is not written yet: pod(s) %s still mount it (a node going away, or a rollout not finished); a later run writes it once no pod does",
				o.Namespace, o.ConfigMap, strings.Join(by, ", ")))
		case len(others) > 0:
			e.warn(fmt.Sprintf("configmap %s/%s is not written: %s (another daemonset's) mount it, and a write would change their config under them; it stays as they run it (the fleet of daemonset %s/%s runs configmap %s)",
				o.Namespace, o.ConfigMap, strings.Join(others, ", "), o.Namespace, o.DaemonSet, mounted))
		case o.Check:
			out.recordChanged = true
		default:
			e.step(ctx, StepRecordWrite)
			written, err := e.cms.Update(ctx, u.record, data)
			if err != nil {
				return out, fmt.Errorf("%w; the fleet runs configmap %s/%s: the next run writes %s again", err, o.Namespace, mounted, o.ConfigMap)
			}
			out.recordChanged, out.rvAfter = true, written.ResourceVersion
		}
	}
	if o.Check || p.copy == "" {
		// the history grows only by the copies a run makes: one that made
		// none leaves collecting to the next that does
		return out, nil
	}
	if _, err := u.uses.Pods(ctx); err != nil {
		return out, err
	}
	// what the pods, the other DaemonSets on the same config and the
	// revisions (what `kubectl rollout undo --to-revision` restores) mount
	inUse, err := u.uses.InUse(ctx)
	if err != nil {
		e.warn(fmt.Sprintf("no old copy of configmap %s/%s deleted: %v", o.Namespace, o.ConfigMap, err))
		return out, nil
	}
	inUse[mounted], inUse[o.ConfigMap] = true, true
	// the copy of what the record holds: while the record lags (another
	// DaemonSet mounts it, a pod still does), it says so (see base)
	inUse[configmap.CopyName(o.ConfigMap, configmap.Hash(u.record.Data, u.record.BinaryData))] = true
	for _, name := range []string{p.mounted, u.ds.Annotations[rollout.PendingConfigAnnotation], u.ds.Annotations[rollout.PreviousConfigAnnotation]} {
		if name != "" {
			inUse[name] = true // what an undo restores, what a restart is owed onto
		}
	}
	keep := o.History
	if keep <= 0 {
		keep = DefaultHistory
	}
	deleted, err := e.copies.Collect(ctx, keep, inUse)
	if len(deleted) > 0 {
		e.d.Log.Infof("deleted %d old cop(ies) of configmap %s/%s beyond the history of %d: %s", len(deleted), o.Namespace, o.ConfigMap, keep, strings.Join(deleted, ", "))
	}
	if err != nil {
		e.warn(err.Error())
	}
	return out, nil
}

func (r *Result) mergeSettle(o settled) {
	f := &r.Facts
	if o.configMapName != "" {
		f.ConfigMapName = o.configMapName
	}
	f.RecordChanged = f.RecordChanged || o.recordChanged
	if o.rvAfter != "" {
		f.ResourceVersionAfter = o.rvAfter
		f.ResourceVersionChanged = o.rvAfter != f.ResourceVersionBefore
	}
}
