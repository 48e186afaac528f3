package kpsync

import (
	"context"
	"fmt"
	"slices"
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
// template mounts, its stamp, the configs it names), the record, and
// which pods mount what.
type recordUse struct {
	ds     *appsv1.DaemonSet
	record *corev1.ConfigMap
	// pods are the DaemonSet's pods with the ConfigMaps they mount: the
	// fleet the rollout followed, or (nil until needed) a list of them
	pods *rollout.Fleet
	// known: the DaemonSet and the record as this run last read or
	// wrote them, not read again
	known bool
	// shared: what other DaemonSets mount of the record and its copies
	// (see sharing), once sharedRead
	shared     []rollout.Sharing
	sharedRead bool
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
		return recordUse{ds: ds, record: record}, nil
	}
	u := recordUse{ds: ds, record: record, known: true}
	if fleet != nil {
		if _, current := fleet.MountedBy(st.e.o.ConfigMap); current {
			u.pods = fleet
		}
	}
	return u, nil
}

// sharing is what the other DaemonSets of the namespace mount of the
// record and its copies, listed once.
func (u *recordUse) sharing(ctx context.Context, e *env) ([]rollout.Sharing, error) {
	if !u.sharedRead {
		shared, err := e.dss.Sharing(ctx, u.ds, func(name string) bool {
			return name == e.o.ConfigMap || configmap.IsCopyName(e.o.ConfigMap, name)
		})
		if err != nil {
			return nil, err
		}
		u.shared, u.sharedRead = shared, true
	}
	return u.shared, nil
}

// recordUsers names the other DaemonSets whose template mounts the record,
// and their pods that do.
func recordUsers(shared []rollout.Sharing, record string) []string {
	var out []string
	for _, sh := range shared {
		if slices.Contains(sh.Template, record) {
			out = append(out, "daemonset "+sh.DaemonSet)
		}
		for _, pod := range sh.Pods[record] {
			out = append(out, "pod "+pod)
		}
	}
	return out
}

// mounts are the pods with the ConfigMaps they mount, listed unless known.
func (u *recordUse) mounts(ctx context.Context, dss rollout.Client) (*rollout.Fleet, error) {
	if u.pods == nil {
		pods, err := dss.Mounts(ctx, u.ds)
		if err != nil {
			return nil, err
		}
		u.pods = pods
	}
	return u.pods, nil
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
		pods, err := u.mounts(ctx, e.dss)
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
			shared, err := u.sharing(ctx, e)
			if err != nil {
				return out, err
			}
			others = recordUsers(shared, o.ConfigMap)
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
	pods, err := u.mounts(ctx, e.dss)
	if err != nil {
		return out, err
	}
	inUse := pods.ConfigMaps()
	inUse[mounted], inUse[o.ConfigMap] = true, true
	// the copy of what the record holds: while the record lags (another
	// DaemonSet mounts it, a pod still does), it says so (see base)
	inUse[configmap.CopyName(o.ConfigMap, configmap.Hash(u.record.Data, u.record.BinaryData))] = true
	for _, name := range []string{p.mounted, u.ds.Annotations[rollout.PendingConfigAnnotation], u.ds.Annotations[rollout.PreviousConfigAnnotation]} {
		if name != "" {
			inUse[name] = true // what an undo restores, what a restart is owed onto
		}
	}
	// what the other DaemonSets on the same config run and can roll back to
	shared, err := u.sharing(ctx, e)
	if err != nil {
		e.warn(fmt.Sprintf("no old copy of configmap %s/%s deleted: %v", o.Namespace, o.ConfigMap, err))
		return out, nil
	}
	for _, sh := range shared {
		for _, name := range sh.Template {
			inUse[name] = true
		}
		for name := range sh.Pods {
			inUse[name] = true
		}
		for name := range sh.Revisions {
			inUse[name] = true
		}
	}
	// what `kubectl rollout undo --to-revision` restores: a template of
	// the DaemonSet's history mounts it
	revs, err := e.dss.RevisionConfigMaps(ctx, u.ds)
	if err != nil {
		e.warn(fmt.Sprintf("no old copy of configmap %s/%s deleted: %v", o.Namespace, o.ConfigMap, err))
		return out, nil
	}
	for name := range revs {
		inUse[name] = true
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
