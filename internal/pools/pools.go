// Package pools moves nodes between kubeadm's kube-proxy DaemonSet and a
// pool of their own (--split, --merge): one node at a time, by its label
// rollout.PoolLabel, each node's new kube-proxy Ready before the next node
// moves, never two kube-proxies on one node.
package pools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/sirupsen/logrus"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/clock"

	"github.com/kube-proxy-sync/kube-proxy-sync/internal/configmap"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/kube"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/lock"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/nodes"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/rollout"
)

// The DaemonSet controller deletes a pod once its node stops matching the
// template, whatever the update strategy, and kube-proxy binds host ports
// (10249, 10256), so a second one on a node cannot start. A node therefore
// cannot hand over from one DaemonSet to another with no moment without a
// kube-proxy: labelling it makes one controller delete its pod and the
// other create one. What stays is what a rolling restart costs, and no more:
// one node at a time, the next only once the last runs a Ready kube-proxy
// of its new DaemonSet (and its iptables or nftables rules, which a
// stopping kube-proxy leaves in place, keep serving in between).

// PoolOfLabel on a pool's DaemonSet and record names the DaemonSet (and
// ConfigMap) it was split from.
const PoolOfLabel = "kube-proxy-sync.io/pool-of"

// Mover moves nodes between the base DaemonSet and a pool.
type Mover struct {
	Kube      kube.Interface
	Clock     clock.Clock
	Log       *logrus.Entry
	Namespace string
	// Base is kubeadm's DaemonSet, Record the ConfigMap it keeps its config in.
	Base, Record string
	// Container is kube-proxy's container, whose config volume the pool's
	// DaemonSet points at the pool's record.
	Container string
	// NodeTimeout bounds one node's handover; past it the node goes back.
	NodeTimeout time.Duration
	Check       bool
	// Lease, when set, is held over every write (kpsync's: one run at a
	// time writes or restarts kube-proxy in the namespace), waited for at
	// most LockTimeout.
	Lease       *lock.Lease
	LockTimeout time.Duration
	// Judge, when set, judges the move again once the Lease is held and
	// nodes are to move (the caller's checks of the move they make), with
	// the nodes planned to move then.
	Judge func(ctx context.Context, nodes []string) error
	// Deadline, when set, is when no further node starts to move (by
	// Clock); the moves stop there with ErrDeadline.
	Deadline time.Time
}

// ErrDeadline: the moves stopped at Mover.Deadline, between two nodes.
var ErrDeadline = errors.New("the deadline passed")

// locked runs fn under the Lease.
func (m Mover) locked(ctx context.Context, fn func(ctx context.Context) error) error {
	if m.Lease == nil {
		return fn(ctx)
	}
	// held outlives an interrupt, so that the Lease is renewed while a
	// node goes back; the work stops on either
	held, release, err := m.Lease.Acquire(context.WithoutCancel(ctx), m.LockTimeout)
	if err != nil {
		return fmt.Errorf("take the lease %s/%s before moving nodes: %w; nothing was moved", m.Namespace, m.Lease.Name, err)
	}
	defer release()
	work, cancel := context.WithCancelCause(held)
	defer cancel(nil)
	stop := context.AfterFunc(ctx, func() { cancel(context.Cause(ctx)) })
	defer stop()
	return fn(work)
}

// Move is what became of one node.
type Move struct {
	// Node is the node moved.
	Node string `json:"node"`
	// Seconds is how long the node had no Ready kube-proxy: from its old
	// pod's deletion to its new pod's readiness.
	Seconds float64 `json:"seconds"`
}

// Outcome is a split's or a merge's result.
type Outcome struct {
	// Pool is the pool split or merged.
	Pool string `json:"pool"`
	// Action is split or merge.
	Action string `json:"action"`
	// Nodes are the nodes the action moves (check mode: would move).
	Nodes []string `json:"nodes"`
	// Moved are the nodes moved, in order.
	Moved []Move `json:"moved"`
	// Created and Deleted are the objects made or deleted (DaemonSet,
	// ConfigMap; check mode: would be).
	Created []string `json:"created"`
	Deleted []string `json:"deleted"`
}

// Split moves the base's nodes that sel matches into pool name: its
// record (the config the base's pods mount, copied) and DaemonSet (the
// base's template on the pool's nodes, mounting the record) made when
// missing, then each node labelled in turn. The base must keep off the
// pools' nodes already (rollout.KeepsOffPools). In check mode it only
// finds the nodes, and refuses what the real split would refuse first.
func (m Mover) Split(ctx context.Context, name string, sel labels.Selector) (Outcome, error) {
	out := Outcome{Pool: name, Action: "split", Nodes: []string{}, Moved: []Move{}, Created: []string{}, Deleted: []string{}}
	p, err := m.planSplit(ctx, name, sel)
	if err != nil {
		return out, err
	}
	out.Nodes = p.nodes
	if m.Check {
		if p.ds == nil {
			out.Created = append(out.Created, "configmap/"+name, "daemonset/"+name)
		}
		return out, nil
	}
	if len(out.Nodes) == 0 {
		return out, nil // split already
	}
	err = m.locked(ctx, func(ctx context.Context) error {
		if m.Lease != nil {
			// judged and planned again, under the Lease: a run that held
			// it meanwhile may have moved nodes, made the pool or changed
			// the config the base or the pool runs
			if p, err = m.planSplit(ctx, name, sel); err != nil {
				return err
			}
			out.Nodes = p.nodes
			if len(out.Nodes) == 0 {
				return nil // split meanwhile
			}
			if m.Judge != nil {
				if err := m.Judge(ctx, out.Nodes); err != nil {
					return err
				}
			}
		}
		if p.ds == nil {
			if err := m.makePool(ctx, p.base, name, p.volume, p.src, &out); err != nil {
				return err
			}
		}
		return m.moveAll(ctx, &out, &name, p.base, name)
	})
	return out, err
}

// splitPlan is what a split reads before it writes: the base, the pool's
// DaemonSet (nil: to make), the base's config volume and the config it
// mounts, and the nodes to move.
type splitPlan struct {
	base, ds *appsv1.DaemonSet
	volume   string
	src      *corev1.ConfigMap
	nodes    []string
}

// planSplit reads the cluster for a split, and refuses what the split
// would refuse, before any write.
func (m Mover) planSplit(ctx context.Context, name string, sel labels.Selector) (splitPlan, error) {
	p := splitPlan{nodes: []string{}}
	base, err := m.Kube.DaemonSets(m.Namespace).Get(ctx, m.Base, metav1.GetOptions{})
	if err != nil {
		return p, fmt.Errorf("read daemonset %s/%s: %w", m.Namespace, m.Base, err)
	}
	p.base = base
	// the nodes the base would run on but for the pools: the split's candidates
	spec := base.Spec.Template.Spec.DeepCopy()
	if a := spec.Affinity; a != nil && a.NodeAffinity != nil && a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution != nil {
		a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution = withoutPools(a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution)
	}
	runs := nodes.Runs(spec)
	list, err := m.Kube.Nodes().List(ctx, metav1.ListOptions{LabelSelector: sel.String()})
	if err != nil {
		return p, fmt.Errorf("list the nodes %s selects: %w", sel, err)
	}
	var candidates []string
	for i := range list.Items {
		n := &list.Items[i]
		switch pool, in := n.Labels[rollout.PoolLabel]; {
		case in && pool != name:
			return p, fmt.Errorf("node %s is in pool %s already: select it out (%s!=%s) or merge that pool first; nothing was changed", n.Name, pool, rollout.PoolLabel, pool)
		case runs(n):
			candidates = append(candidates, n.Name)
		}
	}
	sort.Strings(candidates)
	if len(candidates) == 0 {
		return p, fmt.Errorf("no node that daemonset %s/%s runs on matches %s; nothing was changed", m.Namespace, m.Base, sel)
	}
	volume, mounted := ConfigVolume(base, m.Container, m.Record)
	if volume == "" {
		return p, fmt.Errorf("container %s of daemonset %s/%s mounts neither configmap %s nor a copy of it, so the pool has no config to start from; nothing was changed", m.Container, m.Namespace, m.Base, m.Record)
	}
	src, err := m.Kube.ConfigMaps(m.Namespace).Get(ctx, mounted, metav1.GetOptions{})
	if err != nil {
		return p, fmt.Errorf("read configmap %s/%s, the config daemonset %s runs: %w; nothing was changed", m.Namespace, mounted, m.Base, err)
	}
	ds, err := m.Kube.DaemonSets(m.Namespace).Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		ds = nil
	case err != nil:
		return p, fmt.Errorf("read daemonset %s/%s: %w (get on daemonsets, see roles/kpsync/files/rbac.yaml)", m.Namespace, name, err)
	case ds.Labels[PoolOfLabel] != m.Base:
		return p, fmt.Errorf("daemonset %s/%s exists and is not a pool split from %s (label %s): name the pool otherwise; nothing was changed", m.Namespace, name, m.Base, PoolOfLabel)
	}
	if ds == nil {
		// a ConfigMap of the pool's name would be its config: only one
		// that holds what its nodes run now
		rec, err := m.Kube.ConfigMaps(m.Namespace).Get(ctx, name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
		case err != nil:
			return p, fmt.Errorf("read configmap %s/%s: %w; nothing was changed", m.Namespace, name, err)
		case rec.Labels[PoolOfLabel] != m.Record || configmap.Hash(rec.Data, rec.BinaryData) != configmap.Hash(src.Data, src.BinaryData):
			return p, fmt.Errorf("configmap %s/%s exists and does not hold the config daemonset %s runs (configmap %s): the pool's nodes would change config by a label, past every check of a change; nothing was changed: delete it, or name the pool otherwise", m.Namespace, name, m.Base, mounted)
		}
	}
	// the nodes in the pool already (a split run again) stay as they are
	for _, node := range candidates {
		there := false
		// in place: labelled, and a Ready pod of the pool's DaemonSet there
		// (none while it is gone: its pods may outlive it a moment)
		if n := nodeNamed(list, node); ds != nil && n.Labels[rollout.PoolLabel] == name && n.Labels[rollout.MovingLabel] == "" {
			there, err = m.inPlace(ctx, node, base, name, name)
			if err != nil {
				return p, err
			}
		}
		if !there {
			p.nodes = append(p.nodes, node)
		}
	}
	if len(p.nodes) > 0 && !m.Check && !rollout.KeepsOffPools(&base.Spec.Template.Spec) {
		return p, fmt.Errorf("daemonset %s/%s does not keep off the pools' nodes (a required node affinity on %s): no node was moved", m.Namespace, m.Base, rollout.PoolLabel)
	}
	p.ds, p.volume, p.src = ds, volume, src
	return p, nil
}

// moveAll moves out.Nodes in turn, recording each, and stops at the first
// that fails.
func (m Mover) moveAll(ctx context.Context, out *Outcome, pool *string, base *appsv1.DaemonSet, name string) error {
	for _, node := range out.Nodes {
		// the deadline is looked at between nodes only: the node moving
		// arrives, or goes back, with its kube-proxy
		if !m.Deadline.IsZero() && !m.Clock.Now().Before(m.Deadline) {
			return ErrDeadline
		}
		mv, err := m.move(ctx, node, pool, base, name)
		if err != nil {
			return err
		}
		out.Moved = append(out.Moved, mv)
	}
	return nil
}

func nodeNamed(list *corev1.NodeList, name string) *corev1.Node {
	for i := range list.Items {
		if list.Items[i].Name == name {
			return &list.Items[i]
		}
	}
	return &corev1.Node{}
}

// Merge moves pool name's nodes back to the base, one at a time, then
// deletes the pool's DaemonSet (and with it its copies) and its record. A
// pool merged already is no change; nodes labelled for a pool whose
// DaemonSet is gone (they run no kube-proxy) go back too.
func (m Mover) Merge(ctx context.Context, name string) (Outcome, error) {
	out := Outcome{Pool: name, Action: "merge", Nodes: []string{}, Moved: []Move{}, Created: []string{}, Deleted: []string{}}
	p, err := m.planMerge(ctx, name)
	if err != nil {
		return out, err
	}
	out.Nodes = p.nodes
	if m.Check {
		if p.ds != nil {
			out.Deleted = append(out.Deleted, "daemonset/"+name)
		}
		if p.rec != nil {
			out.Deleted = append(out.Deleted, "configmap/"+name)
		}
		return out, nil
	}
	if p.merged() {
		return out, nil
	}
	err = m.locked(ctx, func(ctx context.Context) error {
		if m.Lease != nil {
			// judged and planned again, under the Lease: a run that held
			// it meanwhile may have moved the pool or its nodes
			if p, err = m.planMerge(ctx, name); err != nil {
				return err
			}
			out.Nodes = p.nodes
			if p.merged() {
				return nil
			}
			if m.Judge != nil && len(p.nodes) > 0 {
				if err := m.Judge(ctx, p.nodes); err != nil {
					return err
				}
			}
		}
		if err := m.moveAll(ctx, &out, nil, p.base, name); err != nil {
			return err
		}
		if ds := p.ds; ds != nil {
			bg := metav1.DeletePropagationBackground
			if err := m.Kube.DaemonSets(m.Namespace).Delete(ctx, name, metav1.DeleteOptions{PropagationPolicy: &bg, Preconditions: &metav1.Preconditions{UID: &ds.UID}}); err != nil && !apierrors.IsNotFound(err) {
				return fmt.Errorf("every node of pool %s is back on daemonset %s/%s; delete its daemonset: %w (delete on daemonsets, see roles/kpsync/files/rbac.yaml); run the merge again", name, m.Namespace, m.Base, err)
			}
			out.Deleted = append(out.Deleted, "daemonset/"+name)
		}
		if rec := p.rec; rec != nil {
			err := m.Kube.ConfigMaps(m.Namespace).Delete(ctx, name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &rec.UID}})
			if err != nil && !apierrors.IsNotFound(err) {
				return fmt.Errorf("pool %s merged and its daemonset deleted; delete its configmap %s/%s: %w; run the merge again", name, m.Namespace, name, err)
			}
			out.Deleted = append(out.Deleted, "configmap/"+name)
		}
		return nil
	})
	if err == nil && (len(out.Moved) > 0 || len(out.Deleted) > 0) {
		m.Log.Infof("pool %s merged into daemonset %s/%s: %d node(s) back", name, m.Namespace, m.Base, len(out.Moved))
	}
	return out, err
}

// mergePlan is what a merge reads before it writes: the base, the pool's
// DaemonSet and record (nil: gone, or not the pool's), and its nodes.
type mergePlan struct {
	base, ds *appsv1.DaemonSet
	rec      *corev1.ConfigMap
	nodes    []string
}

// merged: nothing of the pool is left.
func (p mergePlan) merged() bool { return p.ds == nil && p.rec == nil && len(p.nodes) == 0 }

// planMerge reads the cluster for a merge, and refuses what the merge
// would refuse, before any write.
func (m Mover) planMerge(ctx context.Context, name string) (mergePlan, error) {
	p := mergePlan{nodes: []string{}}
	base, err := m.Kube.DaemonSets(m.Namespace).Get(ctx, m.Base, metav1.GetOptions{})
	if err != nil {
		return p, fmt.Errorf("read daemonset %s/%s: %w", m.Namespace, m.Base, err)
	}
	ds, err := m.Kube.DaemonSets(m.Namespace).Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		ds = nil
	case err != nil:
		return p, fmt.Errorf("read daemonset %s/%s, the pool to merge: %w (get on daemonsets, see roles/kpsync/files/rbac.yaml); nothing was changed", m.Namespace, name, err)
	case ds.Labels[PoolOfLabel] != m.Base:
		return p, fmt.Errorf("daemonset %s/%s is not a pool split from %s (label %s); nothing was changed", m.Namespace, name, m.Base, PoolOfLabel)
	}
	list, err := m.Kube.Nodes().List(ctx, metav1.ListOptions{LabelSelector: labels.Set{rollout.PoolLabel: name}.String()})
	if err != nil {
		return p, fmt.Errorf("list pool %s's nodes: %w", name, err)
	}
	if len(list.Items) > 0 && !rollout.KeepsOffPools(&base.Spec.Template.Spec) {
		return p, fmt.Errorf("daemonset %s/%s does not keep off the pools' nodes (its node affinity on %s was dropped), so a node of pool %s could not leave the pool's kube-proxy first; nothing was changed: run `--split %s --split-nodes %s=%s` (it rolls the affinity back in and moves nothing), then the merge",
			m.Namespace, m.Base, rollout.PoolLabel, name, name, rollout.PoolLabel, name)
	}
	// kubeadm's DaemonSet must run on each of them once unlabelled
	spec := base.Spec.Template.Spec.DeepCopy()
	if a := spec.Affinity; a != nil && a.NodeAffinity != nil && a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution != nil {
		a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution = withoutPools(a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution)
	}
	runs := nodes.Runs(spec)
	for i := range list.Items {
		n := &list.Items[i]
		if !runs(n) {
			return p, fmt.Errorf("node %s of pool %s is not one daemonset %s/%s runs on (its node selector, affinity or tolerations): merged, it would run no kube-proxy; nothing was changed", n.Name, name, m.Namespace, m.Base)
		}
		p.nodes = append(p.nodes, n.Name)
	}
	sort.Strings(p.nodes)
	rec, err := m.Kube.ConfigMaps(m.Namespace).Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err) || err == nil && rec.Labels[PoolOfLabel] != m.Record:
		rec = nil // none, or not the pool's: left alone
	case err != nil:
		return p, fmt.Errorf("read configmap %s/%s, pool %s's config: %w; nothing was changed", m.Namespace, name, name, err)
	}
	p.base, p.ds, p.rec = base, ds, rec
	return p, nil
}

// makePool creates pool name's record, a copy of src (the config the
// base's pods mount), and its DaemonSet: the base's template on the pool's
// nodes, its config volume on the record, its own pod labels.
func (m Mover) makePool(ctx context.Context, base *appsv1.DaemonSet, name, volume string, src *corev1.ConfigMap, out *Outcome) error {
	cms := m.Kube.ConfigMaps(m.Namespace)
	rec := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: m.Namespace,
			Labels: map[string]string{PoolOfLabel: m.Record, configmap.ManagedByLabel: configmap.FieldManager}},
		Data: src.Data, BinaryData: src.BinaryData,
	}
	_, err := cms.Create(ctx, rec, metav1.CreateOptions{FieldManager: configmap.FieldManager})
	switch {
	case err == nil:
		out.Created = append(out.Created, "configmap/"+name)
	case !apierrors.IsAlreadyExists(err):
		return fmt.Errorf("create configmap %s/%s, pool %s's config: %w (create on configmaps, see roles/kpsync/files/rbac.yaml); no node was moved", m.Namespace, name, name, err)
	}
	_, err = m.Kube.DaemonSets(m.Namespace).Create(ctx, PoolDaemonSet(base, name, volume), metav1.CreateOptions{FieldManager: configmap.FieldManager})
	switch {
	case err == nil:
		out.Created = append(out.Created, "daemonset/"+name)
	case apierrors.IsAlreadyExists(err):
		// made since this run looked: only a pool of this base will do
		got, gerr := m.Kube.DaemonSets(m.Namespace).Get(ctx, name, metav1.GetOptions{})
		if gerr != nil || got.Labels[PoolOfLabel] != m.Base {
			return fmt.Errorf("daemonset %s/%s appeared meanwhile and is not a pool split from %s: no node was moved; name the pool otherwise", m.Namespace, name, m.Base)
		}
	default:
		return fmt.Errorf("create daemonset %s/%s, pool %s: %w (create on daemonsets, see roles/kpsync/files/rbac.yaml); no node was moved", m.Namespace, name, name, err)
	}
	m.Log.Infof("pool %s made: daemonset and configmap %s/%s (the config daemonset %s runs, from configmap %s)", name, m.Namespace, name, m.Base, src.Name)
	return nil
}

// PoolDaemonSet is pool name's DaemonSet made from base: its template on
// the pool's nodes only (rollout.OnPool), with pod labels of its own and
// its config volume on the pool's record; none of base's stamps.
func PoolDaemonSet(base *appsv1.DaemonSet, name, volume string) *appsv1.DaemonSet {
	t := base.Spec.Template.DeepCopy()
	podLabels := map[string]string{}
	for k, v := range t.Labels {
		podLabels[k] = v
	}
	// the base's selector keys, with the pool's name: no pod of one
	// matches the other's selector
	sel := map[string]string{}
	for k := range base.Spec.Selector.MatchLabels {
		sel[k] = name
		podLabels[k] = name
	}
	if len(sel) == 0 {
		sel["k8s-app"], podLabels["k8s-app"] = name, name
	}
	t.Labels = podLabels
	rollout.OnPool(&t.Spec, name)
	for i := range t.Spec.Volumes {
		if v := &t.Spec.Volumes[i]; v.Name == volume && v.ConfigMap != nil {
			v.ConfigMap.Name = name
		}
	}
	delete(t.Annotations, rollout.RestartedAtAnnotation)
	return &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: base.Namespace,
			Labels: map[string]string{PoolOfLabel: base.Name, configmap.ManagedByLabel: configmap.FieldManager}},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: sel}, Template: *t,
			UpdateStrategy: poolStrategy(base), MinReadySeconds: base.Spec.MinReadySeconds,
			RevisionHistoryLimit: base.Spec.RevisionHistoryLimit,
		},
	}
}

// poolStrategy is the base's update strategy as it is outside a run: a
// canary half-way keeps the base on OnDelete for a while, with its own
// saved (rollout.SavedStrategy).
func poolStrategy(base *appsv1.DaemonSet) appsv1.DaemonSetUpdateStrategy {
	if st, _, err := rollout.SavedStrategy(base); err == nil {
		return st
	}
	return *base.Spec.UpdateStrategy.DeepCopy()
}

// move takes node to pool (nil: out of every pool, back to the base) in
// two steps, so that it never runs two kube-proxies: first labels under
// which neither DaemonSet runs there (the pool's, rollout.MovingLabel set),
// until neither's pod is left on the node; then its new DaemonSet's
// labels, until that one's kube-proxy is Ready. Past NodeTimeout the node
// goes back the same way to its source DaemonSet.
func (m Mover) move(ctx context.Context, node string, pool *string, base *appsv1.DaemonSet, name string) (Move, error) {
	from, to, back := name, m.Base, &name
	if pool != nil {
		from, to, back = m.Base, name, nil
	}
	m.Log.Infof("node %s: from daemonset %s to %s", node, from, to)
	mv, emptied, err := m.handover(ctx, node, pool, base, name, to)
	if err == nil {
		m.Log.Infof("node %s: daemonset %s's kube-proxy Ready, %.1fs without one", node, to, mv.Seconds)
		return mv, nil
	}
	undo := "kubectl label node " + node + " " + rollout.PoolLabel + "- " + rollout.MovingLabel + "-"
	if back != nil {
		undo = "kubectl label node " + node + " " + rollout.PoolLabel + "=" + *back + " " + rollout.MovingLabel + "- --overwrite"
	}
	look := fmt.Sprintf("`kubectl -n %s get pods -o wide --field-selector spec.nodeName=%s` shows its kube-proxy pods", m.Namespace, node)
	bctx := context.WithoutCancel(ctx)
	var berr error
	if emptied {
		// neither DaemonSet's pod is there: back the same way, two steps
		_, _, berr = m.handover(bctx, node, back, base, name, from)
	} else {
		// the old pod is still there (it did not go in time): its own
		// labels back at once keep it, or its DaemonSet makes it again
		if berr = m.label(bctx, node, back, nil); berr == nil {
			wctx, cancel := context.WithTimeout(bctx, m.NodeTimeout)
			var since time.Time
			_, berr = m.wait(wctx, node, base, name, from, &since)
			cancel()
		}
	}
	if berr != nil {
		return Move{}, fmt.Errorf("node %s: %w; it could not go back to daemonset %s either (%v): %s; see to it, then run `%s` (or run the same split or merge again)", node, err, from, berr, look, undo)
	}
	return Move{}, fmt.Errorf("node %s: %w; it is back on daemonset %s, and the nodes after it were not moved: %s; see to it, then run again", node, err, from, look)
}

// handover is one move of node to DaemonSet to (pool, its label: nil for
// the base), each of its two waits bounded by NodeTimeout. emptied says
// whether it got past its first step (neither DaemonSet's pod left there).
func (m Mover) handover(ctx context.Context, node string, pool *string, base *appsv1.DaemonSet, name, to string) (_ Move, emptied bool, _ error) {
	moving := "true"
	// nothing deletes the old pod before this PATCH: the stretch without a
	// kube-proxy is measured from it
	since := m.Clock.Now()
	if err := m.label(ctx, node, &name, &moving); err != nil {
		return Move{}, false, err
	}
	wctx, cancel := context.WithTimeout(ctx, m.NodeTimeout)
	defer cancel()
	if _, err := m.wait(wctx, node, base, name, "", &since); err != nil {
		return Move{}, false, err
	}
	if err := m.label(ctx, node, pool, nil); err != nil {
		return Move{}, true, err
	}
	wctx2, cancel2 := context.WithTimeout(ctx, m.NodeTimeout)
	defer cancel2()
	mv, err := m.wait(wctx2, node, base, name, to, &since)
	return mv, true, err
}

// inPlace reports whether node runs a Ready kube-proxy of DaemonSet to and
// none of the base's or the pool's other.
func (m Mover) inPlace(ctx context.Context, node string, base *appsv1.DaemonSet, name, to string) (bool, error) {
	list, err := m.Kube.Pods(m.Namespace).List(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("spec.nodeName", node).String()})
	if err != nil {
		return false, fmt.Errorf("list the pods on node %s: %w", node, err)
	}
	st := nodeState{base: base.Name, pool: name, to: to, node: node, pods: map[types.UID]*corev1.Pod{}}
	for i := range list.Items {
		if list.Items[i].Spec.NodeName == node {
			st.pods[list.Items[i].UID] = &list.Items[i]
		}
	}
	return st.done(), nil
}

// label sets the node's PoolLabel to pool and MovingLabel to moving (nil:
// removes each), in one PATCH.
func (m Mover) label(ctx context.Context, node string, pool, moving *string) error {
	body, _ := json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]any{rollout.PoolLabel: pool, rollout.MovingLabel: moving}}})
	if _, err := m.Kube.Nodes().Patch(ctx, node, types.StrategicMergePatchType, body, metav1.PatchOptions{FieldManager: configmap.FieldManager}); err != nil {
		return fmt.Errorf("label node %s: %w (patch on nodes, see roles/kpsync/files/rbac.yaml)", node, err)
	}
	return nil
}

// nodeState is the kube-proxy pods of the base and the pool on one node.
type nodeState struct {
	base, pool, to string
	// node is the node's name: pods elsewhere are left out (the field
	// selector does that too, where the server applies it)
	node string
	pods map[types.UID]*corev1.Pod
}

func owner(p *corev1.Pod) string {
	if ref := metav1.GetControllerOf(p); ref != nil && ref.Kind == "DaemonSet" {
		return ref.Name
	}
	return ""
}

// done: a Ready pod of to, not being deleted, and no pod of the other;
// with to "", no pod of either at all.
func (st nodeState) done() bool {
	if st.to == "" {
		for _, p := range st.pods {
			if o := owner(p); o == st.base || o == st.pool {
				return false
			}
		}
		return true
	}
	ready, other := false, false
	for _, p := range st.pods {
		switch owner(p) {
		case st.to:
			ready = ready || (p.DeletionTimestamp == nil && podReady(p))
		case st.base, st.pool:
			other = true
		}
	}
	return ready && !other
}

// anyReady: some kube-proxy of either, not being deleted, is Ready.
func (st nodeState) anyReady() bool {
	for _, p := range st.pods {
		if o := owner(p); (o == st.base || o == st.pool) && p.DeletionTimestamp == nil && podReady(p) {
			return true
		}
	}
	return false
}

// wait follows the kube-proxy pods of the base and the pool on node until
// it runs a Ready pod of DaemonSet to and no pod of the other (to "": no
// pod of either), timing the stretch with no Ready kube-proxy in since:
// from the first moment none was Ready to the new one's readiness. A watch
// that ends (the API server restarted, the watch timed out) is opened
// again from a fresh list; ctx bounds it all.
func (m Mover) wait(ctx context.Context, node string, base *appsv1.DaemonSet, name, to string, since *time.Time) (Move, error) {
	pods := m.Kube.Pods(m.Namespace)
	opts := metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("spec.nodeName", node).String()}
	check := func(st nodeState) (Move, bool) {
		if !st.anyReady() && since.IsZero() {
			*since = m.Clock.Now()
		}
		if !st.done() {
			return Move{}, false
		}
		mv := Move{Node: node}
		if !since.IsZero() {
			mv.Seconds = m.Clock.Since(*since).Seconds()
		}
		return mv, true
	}
	timedOut := func(cause error) (Move, error) {
		if c := context.Cause(ctx); c != nil {
			cause = c
		}
		if to == "" {
			return Move{}, fmt.Errorf("the kube-proxy pods on node %s not gone within %s: %w", node, m.NodeTimeout, cause)
		}
		return Move{}, fmt.Errorf("no Ready kube-proxy of daemonset %s alone on node %s within %s: %w", to, node, m.NodeTimeout, cause)
	}
	backoff, warned := 100*time.Millisecond, false
	pause := func(err error) error {
		if err != nil && !warned {
			m.Log.Warnf("watching the pods on node %s: %v; listing them again until the deadline", node, err)
			warned = true
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-m.Clock.After(backoff):
			backoff = min(2*backoff, 5*time.Second)
			return nil
		}
	}
	for first := true; ; first = false {
		if !first {
			if err := pause(nil); err != nil {
				return timedOut(err)
			}
		}
		list, err := pods.List(ctx, opts)
		if ctx.Err() != nil {
			return timedOut(ctx.Err())
		}
		if err != nil {
			_ = pause(err)
			continue
		}
		st := nodeState{base: base.Name, pool: name, to: to, node: node, pods: map[types.UID]*corev1.Pod{}}
		for i := range list.Items {
			if list.Items[i].Spec.NodeName == node {
				st.pods[list.Items[i].UID] = &list.Items[i]
			}
		}
		if mv, ok := check(st); ok {
			return mv, nil
		}
		opts.ResourceVersion = list.ResourceVersion
		w, err := pods.Watch(ctx, opts)
		if ctx.Err() != nil {
			return timedOut(ctx.Err())
		}
		if err != nil {
			opts.ResourceVersion = ""
			_ = pause(err)
			continue
		}
		mv, ok, err := m.follow(ctx, w, st, check)
		w.Stop()
		switch {
		case ok:
			return mv, nil
		case ctx.Err() != nil:
			return timedOut(ctx.Err())
		case err != nil && !warned:
			m.Log.Warnf("watching the pods on node %s: %v; listing them again until the deadline", node, err)
			warned = true
		}
		opts.ResourceVersion = ""
	}
}

// follow applies w's events to st until check says done, the watch ends
// (false, with the error event's status if any) or ctx is done.
func (m Mover) follow(ctx context.Context, w watch.Interface, st nodeState, check func(nodeState) (Move, bool)) (Move, bool, error) {
	for {
		select {
		case <-ctx.Done():
			return Move{}, false, ctx.Err()
		case ev, open := <-w.ResultChan():
			if !open {
				return Move{}, false, nil
			}
			if ev.Type == watch.Error {
				return Move{}, false, apierrors.FromObject(ev.Object)
			}
			p, isPod := ev.Object.(*corev1.Pod)
			if !isPod || p.Spec.NodeName != st.node {
				continue
			}
			if ev.Type == watch.Deleted {
				delete(st.pods, p.UID)
			} else {
				st.pods[p.UID] = p
			}
			if mv, ok := check(st); ok {
				return mv, true, nil
			}
		}
	}
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// withoutPools is ns without the requirements on rollout.PoolLabel; nil
// (every node) when a term required nothing else, since terms are ORed
// and an empty term would match no node.
func withoutPools(ns *corev1.NodeSelector) *corev1.NodeSelector {
	out := ns.DeepCopy()
	for i := range out.NodeSelectorTerms {
		var keep []corev1.NodeSelectorRequirement
		for _, r := range out.NodeSelectorTerms[i].MatchExpressions {
			if r.Key != rollout.PoolLabel {
				keep = append(keep, r)
			}
		}
		out.NodeSelectorTerms[i].MatchExpressions = keep
		if len(keep) == 0 && len(out.NodeSelectorTerms[i].MatchFields) == 0 {
			return nil
		}
	}
	return out
}

// ConfigVolume is the template volume of the container that mounts record
// or one of its copies, and the ConfigMap it names ("", "" when neither).
func ConfigVolume(ds *appsv1.DaemonSet, container, record string) (volume, mounted string) {
	return SpecConfigVolume(&ds.Spec.Template.Spec, container, record)
}

// SpecConfigVolume is ConfigVolume of a pod spec: a DaemonSet's template, or
// a pod's own (what it started with).
func SpecConfigVolume(spec *corev1.PodSpec, container, record string) (volume, mounted string) {
	mounts := map[string]bool{}
	for _, c := range spec.Containers {
		if c.Name == container {
			for _, vm := range c.VolumeMounts {
				mounts[vm.Name] = true
			}
		}
	}
	for _, v := range spec.Volumes {
		if v.ConfigMap != nil && mounts[v.Name] && (v.ConfigMap.Name == record || configmap.IsCopyName(record, v.ConfigMap.Name)) {
			return v.Name, v.ConfigMap.Name
		}
	}
	return "", ""
}

// Describe is one line on what the outcome did.
func (o Outcome) Describe(check bool) string {
	if check {
		return fmt.Sprintf("%s pool %s: would move %d node(s) (%s)", o.Action, o.Pool, len(o.Nodes), strings.Join(o.Nodes, ", "))
	}
	var names []string
	longest := 0.0
	for _, mv := range o.Moved {
		names = append(names, mv.Node)
		longest = max(longest, mv.Seconds)
	}
	s := fmt.Sprintf("%s pool %s: moved %d node(s) (%s)", o.Action, o.Pool, len(o.Moved), strings.Join(names, ", "))
	if len(o.Moved) > 0 {
		s += fmt.Sprintf(", each at most %.1fs without a Ready kube-proxy", longest)
	}
	return s
}

// Strays finds what puts two kube-proxies or none on a pool's node: nodes
// labelled for a pool while base no longer keeps off them (its template
// replaced by `kubectl rollout undo` to before the first split, kubeadm's
// addon phase, an apply), nodes labelled for a pool whose DaemonSet is
// gone, and nodes a killed split or merge left between two DaemonSets
// (orphans under "moving:POOL"). One LIST of the labelled nodes, and one
// of the namespace's DaemonSets when there are some.
func Strays(ctx context.Context, k kube.Interface, ns string, base *appsv1.DaemonSet) (twice []string, orphans map[string][]string, err error) {
	list, err := k.Nodes().List(ctx, metav1.ListOptions{LabelSelector: rollout.PoolLabel})
	if err != nil {
		return nil, nil, fmt.Errorf("list the nodes in pools (label %s): %w (list on nodes, see roles/kpsync/files/rbac.yaml)", rollout.PoolLabel, err)
	}
	if len(list.Items) == 0 {
		return nil, nil, nil
	}
	dss, err := k.DaemonSets(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, nil, fmt.Errorf("list the daemonsets of %s, the pools of nodes labelled %s: %w (list on daemonsets, see roles/kpsync/files/rbac.yaml)", ns, rollout.PoolLabel, err)
	}
	exists := map[string]bool{}
	for _, ds := range dss.Items {
		exists[ds.Name] = true
	}
	keeps := rollout.KeepsOffPools(&base.Spec.Template.Spec)
	add := func(key, node string) {
		if orphans == nil {
			orphans = map[string][]string{}
		}
		orphans[key] = append(orphans[key], node)
	}
	for _, n := range list.Items {
		pool := n.Labels[rollout.PoolLabel]
		_, moving := n.Labels[rollout.MovingLabel]
		switch {
		case moving:
			add("moving:"+pool, n.Name)
		case !exists[pool]:
			add(pool, n.Name)
		case !keeps:
			twice = append(twice, n.Name)
		}
	}
	sort.Strings(twice)
	return twice, orphans, nil
}

// StrayWarnings says what Strays found, and what to do.
func StrayWarnings(ns, base string, twice []string, orphans map[string][]string) []string {
	var out []string
	if len(twice) > 0 {
		out = append(out, fmt.Sprintf("nodes %s are in pools (label %s) but daemonset %s/%s no longer keeps off them (its node affinity was dropped: `kubectl rollout undo` to before the first split, kubeadm's addon phase, an apply): each runs two kube-proxies; run `--split POOL --split-nodes %s=POOL` for each pool (it rolls the affinity back in and moves nothing)",
			strings.Join(twice, ", "), rollout.PoolLabel, ns, base, rollout.PoolLabel))
	}
	keys := make([]string, 0, len(orphans))
	for k := range orphans {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		nodes := strings.Join(orphans[k], ", ")
		if p, moving := strings.CutPrefix(k, "moving:"); moving {
			out = append(out, fmt.Sprintf("nodes %s are between daemonset %s and pool %s (label %s: a split or merge stopped half-way): they run no kube-proxy; run the same split or merge again (`--split %s --split-nodes %s=%s` keeps them in the pool, `--merge %s` takes them back)",
				nodes, base, p, rollout.MovingLabel, p, rollout.PoolLabel, p, p))
			continue
		}
		out = append(out, fmt.Sprintf("nodes %s are labelled for pool %s, whose daemonset %s/%s is gone: they run no kube-proxy; run `--merge %s` (it takes them back to daemonset %s)",
			nodes, k, ns, k, k, base))
	}
	return out
}
