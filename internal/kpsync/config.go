package kpsync

import (
	"context"
	"fmt"
	"sort"
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

// mountsCopyOf reports whether the template's config volume mounts the copy
// of the data with this hash.
func (s *Syncer) mountsCopyOf(ds *appsv1.DaemonSet, volume, hash string) bool {
	return volume != "" && rollout.ConfigVolumeOf(ds, volume) == configmap.CopyName(s.o.ConfigMap, hash)
}

// base is the ConfigMap whose data the fleet runs, which a change is made
// on: the record, unless the template mounts a copy whose data the record
// does not hold and the pods do not run the record's data as well (a run
// stopped between its rollout and its record write, or someone wrote the
// record by hand): then that copy.
//
// A copy the pods owe a restart onto (rollout.PendingConfigAnnotation, a
// run with --restart never) comes first: it is the config they are to run.
func (s *Syncer) base(ctx context.Context, record *corev1.ConfigMap, ds *appsv1.DaemonSet, mounted string) (*corev1.ConfigMap, error) {
	if pending := ds.Annotations[rollout.PendingConfigAnnotation]; configmap.IsCopyName(record.Name, pending) && pending != mounted && mounted != "" {
		cp, err := s.copies.Get(ctx, pending)
		if err == nil {
			return cp, nil
		}
		if !apierrors.IsNotFound(err) {
			return nil, err
		}
		s.warn(fmt.Sprintf("daemonset %s/%s owes a restart onto configmap %s/%s, which is gone: that restart is dropped", s.o.Namespace, s.o.DaemonSet, s.o.Namespace, pending))
	}
	if mounted == "" || mounted == record.Name {
		return record, nil
	}
	hash := configmap.Hash(record.Data, record.BinaryData)
	// the record's data, or data the pods of that copy run as well (a
	// change with no effect, recorded against the copy's stamp; a copy
	// put there by another hand, `kubectl rollout undo`, is not that copy)
	stamp := ds.Annotations[rollout.HashAnnotation]
	if mounted == configmap.CopyName(record.Name, hash) || (len(stamp) >= configmap.CopyHashLen && mounted == configmap.CopyName(record.Name, stamp) && rollout.Runs(ds, hash)) {
		return record, nil
	}
	cp, err := s.copies.Get(ctx, mounted)
	if apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("daemonset %s/%s mounts configmap %s/%s, which does not exist: its pods cannot start; run `kubectl rollout undo daemonset/%s -n %s` to a template whose ConfigMap exists, then run again: %w",
			s.o.Namespace, s.o.DaemonSet, s.o.Namespace, mounted, s.o.DaemonSet, s.o.Namespace, err)
	}
	return cp, err
}

// ensureCopy creates the copy of data the restart points the template at
// (or finds it there), unless the template mounts it already.
func (s *Syncer) ensureCopy(ctx context.Context, p *plan, data map[string]string) error {
	name := configmap.CopyName(s.o.ConfigMap, configmap.Hash(data, nil))
	if p.volume == "" || p.mounted == name || p.copy == name {
		return nil
	}
	// the template generation the restart moves to mounts it
	cp := configmap.NewCopy(p.cm, data, p.ds, rollout.TemplateGeneration(p.ds)+1)
	if _, err := s.copies.Ensure(ctx, cp); err != nil {
		return fmt.Errorf("%w; nothing restarted", err)
	}
	p.copy = name
	s.res.Facts.ConfigMapName = name
	return nil
}

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
func (s *Syncer) settle(ctx context.Context, p plan, ds *appsv1.DaemonSet, knownName string, known configmap.Snapshot, fleet *rollout.Fleet) error {
	u, err := s.recordUse(ctx, ds, p.cm, fleet)
	if err != nil {
		return err
	}
	err = s.settleOn(ctx, p, &u, knownName, known)
	if u.known && apierrors.IsConflict(err) {
		s.d.Log.Infof("configmap %s/%s changed since this run read it (another writer): reading it, daemonset %s/%s and its pods again", s.o.Namespace, s.o.ConfigMap, s.o.Namespace, s.o.DaemonSet)
		if u, err = s.recordUse(ctx, nil, nil, nil); err != nil {
			return err
		}
		err = s.settleOn(ctx, p, &u, knownName, known)
	}
	return err
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
func (s *Syncer) recordUse(ctx context.Context, ds *appsv1.DaemonSet, record *corev1.ConfigMap, fleet *rollout.Fleet) (recordUse, error) {
	if ds != nil && fleet != nil && fleet.Newest() > rollout.TemplateGeneration(ds) {
		ds = nil
	}
	if ds == nil {
		var err error
		if ds, err = s.dss.Get(ctx); err != nil {
			return recordUse{}, err
		}
		if record, err = s.cms.Get(ctx); err != nil {
			return recordUse{}, err
		}
		return recordUse{ds: ds, record: record}, nil
	}
	u := recordUse{ds: ds, record: record, known: true}
	if fleet != nil {
		if _, current := fleet.MountedBy(s.o.ConfigMap); current {
			u.pods = fleet
		}
	}
	return u, nil
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
func (s *Syncer) settleOn(ctx context.Context, p plan, u *recordUse, knownName string, known configmap.Snapshot) error {
	f := &s.res.Facts
	_, mounted := configVolume(u.ds, s.o.Container, s.o.ConfigMap)
	if mounted == "" || mounted == s.o.ConfigMap {
		return nil // kubeadm's layout: the record is what the pods mount
	}
	f.ConfigMapName = mounted
	// the record holds the mounted copy's data, or data the pods run as
	// well (a change with no effect, see markNoEffect)
	hash := configmap.Hash(u.record.Data, u.record.BinaryData)
	stamp := u.ds.Annotations[rollout.HashAnnotation]
	runsAsWell := len(stamp) >= configmap.CopyHashLen && mounted == configmap.CopyName(s.o.ConfigMap, stamp) && rollout.Runs(u.ds, hash)
	if mounted != configmap.CopyName(s.o.ConfigMap, hash) && !runsAsWell {
		data := known.Data
		if mounted != knownName {
			cp, err := s.copies.Get(ctx, mounted)
			if err != nil {
				return err
			}
			data = cp.Data
		}
		pods, err := u.mounts(ctx, s.dss)
		if err != nil {
			return err
		}
		by, _ := pods.MountedBy(s.o.ConfigMap)
		switch {
		case len(by) > 0:
			s.warn(fmt.Sprintf("configmap %s/%s is not written yet: pod(s) %s still mount it (a node going away, or a rollout not finished); a later run writes it once no pod does",
				s.o.Namespace, s.o.ConfigMap, strings.Join(by, ", ")))
		case s.o.Check:
			f.RecordChanged = true
		default:
			s.step(ctx, StepRecordWrite)
			written, err := s.cms.Update(ctx, u.record, data)
			if err != nil {
				return fmt.Errorf("%w; the fleet runs configmap %s/%s: the next run writes %s again", err, s.o.Namespace, mounted, s.o.ConfigMap)
			}
			f.RecordChanged = true
			f.ResourceVersionAfter = written.ResourceVersion
			f.ResourceVersionChanged = written.ResourceVersion != f.ResourceVersionBefore
		}
	}
	if s.o.Check || p.copy == "" {
		// the history grows only by the copies a run makes: one that made
		// none leaves collecting to the next that does
		return nil
	}
	pods, err := u.mounts(ctx, s.dss)
	if err != nil {
		return err
	}
	inUse := pods.ConfigMaps()
	inUse[mounted], inUse[s.o.ConfigMap] = true, true
	for _, name := range []string{p.mounted, u.ds.Annotations[rollout.PendingConfigAnnotation], u.ds.Annotations[rollout.PreviousConfigAnnotation]} {
		if name != "" {
			inUse[name] = true // what an undo restores, what a restart is owed onto
		}
	}
	// what `kubectl rollout undo --to-revision` restores: a template of
	// the DaemonSet's history mounts it
	revs, err := s.dss.RevisionConfigMaps(ctx, u.ds)
	if err != nil {
		s.warn(fmt.Sprintf("no old copy of configmap %s/%s deleted: %v", s.o.Namespace, s.o.ConfigMap, err))
		return nil
	}
	for name := range revs {
		inUse[name] = true
	}
	keep := s.o.History
	if keep <= 0 {
		keep = DefaultHistory
	}
	deleted, err := s.copies.Collect(ctx, keep, inUse)
	if len(deleted) > 0 {
		s.d.Log.Infof("deleted %d old cop(ies) of configmap %s/%s beyond the history of %d: %s", len(deleted), s.o.Namespace, s.o.ConfigMap, keep, strings.Join(deleted, ", "))
	}
	if err != nil {
		s.warn(err.Error())
	}
	return nil
}

// undoTo is the data an undo restores: the copy the DaemonSet names as the
// config its fleet ran before the last change, with the keys that differ
// from what it runs now.
func (s *Syncer) undoTo(ctx context.Context, p plan) (map[string]string, []string, error) {
	prev := p.ds.Annotations[rollout.PreviousConfigAnnotation]
	if !configmap.IsCopyName(s.o.ConfigMap, prev) {
		return nil, nil, fmt.Errorf("--undo: daemonset %s/%s names no earlier config (%s): nothing was changed; a restart by kube-proxy-sync records one", s.o.Namespace, s.o.DaemonSet, rollout.PreviousConfigAnnotation)
	}
	cp, err := s.copies.Get(ctx, prev)
	if err != nil {
		return nil, nil, fmt.Errorf("--undo: the earlier config: %w; nothing was changed", err)
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
	s.d.Log.Infof("--undo: restoring configmap %s/%s (keys %v)", s.o.Namespace, prev, keys)
	return cp.Data, keys, nil
}

// keepPrevious makes sure the data the fleet runs before this run's restart
// is in a copy, and names it for the restart PATCH to record (an undo
// restores it). kubeadm's layout has it only in the record, which is
// written once the rollout is done: it gets a copy now.
func (s *Syncer) keepPrevious(ctx context.Context, p *plan) error {
	if p.volume == "" {
		return nil
	}
	if configmap.IsCopyName(s.o.ConfigMap, p.mounted) {
		p.previous = p.mounted // what the pods mount
		return nil
	}
	name := configmap.CopyName(s.o.ConfigMap, p.before.Hash)
	if name == p.copy {
		return nil // a restart onto the same data: nothing to undo to
	}
	// what the template generation the fleet runs now mounts (the record):
	// older in the history than the copy the restart moves to
	cp := configmap.NewCopy(p.cm, p.before.Data, p.ds, rollout.TemplateGeneration(p.ds))
	if _, err := s.copies.Ensure(ctx, cp); err != nil {
		return fmt.Errorf("keep the config the fleet runs now, for an undo: %w; nothing restarted", err)
	}
	p.previous = name
	return nil
}
