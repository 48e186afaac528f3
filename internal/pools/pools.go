// Package pools moves nodes between kubeadm's kube-proxy DaemonSet and a
// pool of their own (--split, --merge): one node at a time, by its label
// rollout.PoolLabel, each node's new kube-proxy Ready before the next node
// moves, never two kube-proxies on one node.
package pools

import (
	"context"
	"encoding/json"
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
	// Created and Deleted are the objects made or deleted (DaemonSet, ConfigMap).
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
	base, err := m.Kube.DaemonSets(m.Namespace).Get(ctx, m.Base, metav1.GetOptions{})
	if err != nil {
		return out, fmt.Errorf("read daemonset %s/%s: %w", m.Namespace, m.Base, err)
	}
	// the nodes the base would run on but for the pools: the split's candidates
	spec := base.Spec.Template.Spec.DeepCopy()
	if a := spec.Affinity; a != nil && a.NodeAffinity != nil && a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution != nil {
		a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution = withoutPools(a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution)
	}
	runs := nodes.Runs(spec)
	list, err := m.Kube.Nodes().List(ctx, metav1.ListOptions{LabelSelector: sel.String()})
	if err != nil {
		return out, fmt.Errorf("list the nodes %s selects: %w", sel, err)
	}
	for i := range list.Items {
		n := &list.Items[i]
		switch pool, in := n.Labels[rollout.PoolLabel]; {
		case in && pool != name:
			return out, fmt.Errorf("node %s is in pool %s already: select it out (%s!=%s) or merge that pool first; nothing was changed", n.Name, pool, rollout.PoolLabel, pool)
		case runs(n):
			out.Nodes = append(out.Nodes, n.Name)
		}
	}
	sort.Strings(out.Nodes)
	if len(out.Nodes) == 0 {
		return out, fmt.Errorf("no node that daemonset %s/%s runs on matches %s; nothing was changed", m.Namespace, m.Base, sel)
	}
	ds, err := m.Kube.DaemonSets(m.Namespace).Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		ds = nil
	case err != nil:
		return out, fmt.Errorf("read daemonset %s/%s: %w", m.Namespace, name, err)
	case ds.Labels[PoolOfLabel] != m.Base:
		return out, fmt.Errorf("daemonset %s/%s exists and is not a pool split from %s (label %s): name the pool otherwise; nothing was changed", m.Namespace, name, m.Base, PoolOfLabel)
	}
	if m.Check {
		return out, nil
	}
	if !rollout.KeepsOffPools(&base.Spec.Template.Spec) {
		return out, fmt.Errorf("daemonset %s/%s does not keep off the pools' nodes (a required node affinity on %s); nothing was changed", m.Namespace, m.Base, rollout.PoolLabel)
	}
	if ds == nil {
		if err := m.makePool(ctx, base, name, &out); err != nil {
			return out, err
		}
	}
	for _, node := range out.Nodes {
		mv, err := m.move(ctx, node, &name, base, name)
		if err != nil {
			return out, err
		}
		if mv != nil {
			out.Moved = append(out.Moved, *mv)
		}
	}
	return out, nil
}

// Merge moves pool name's nodes back to the base, one at a time, then
// deletes the pool's DaemonSet (and with it its copies) and its record.
func (m Mover) Merge(ctx context.Context, name string) (Outcome, error) {
	out := Outcome{Pool: name, Action: "merge", Nodes: []string{}, Moved: []Move{}, Created: []string{}, Deleted: []string{}}
	base, err := m.Kube.DaemonSets(m.Namespace).Get(ctx, m.Base, metav1.GetOptions{})
	if err != nil {
		return out, fmt.Errorf("read daemonset %s/%s: %w", m.Namespace, m.Base, err)
	}
	ds, err := m.Kube.DaemonSets(m.Namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return out, fmt.Errorf("read daemonset %s/%s, the pool to merge: %w; nothing was changed", m.Namespace, name, err)
	}
	if ds.Labels[PoolOfLabel] != m.Base {
		return out, fmt.Errorf("daemonset %s/%s is not a pool split from %s (label %s); nothing was changed", m.Namespace, name, m.Base, PoolOfLabel)
	}
	list, err := m.Kube.Nodes().List(ctx, metav1.ListOptions{LabelSelector: labels.Set{rollout.PoolLabel: name}.String()})
	if err != nil {
		return out, fmt.Errorf("list pool %s's nodes: %w", name, err)
	}
	for _, n := range list.Items {
		out.Nodes = append(out.Nodes, n.Name)
	}
	sort.Strings(out.Nodes)
	if m.Check {
		return out, nil
	}
	for _, node := range out.Nodes {
		mv, err := m.move(ctx, node, nil, base, name)
		if err != nil {
			return out, err
		}
		if mv != nil {
			out.Moved = append(out.Moved, *mv)
		}
	}
	bg := metav1.DeletePropagationBackground
	if err := m.Kube.DaemonSets(m.Namespace).Delete(ctx, name, metav1.DeleteOptions{PropagationPolicy: &bg, Preconditions: &metav1.Preconditions{UID: &ds.UID}}); err != nil && !apierrors.IsNotFound(err) {
		return out, fmt.Errorf("every node of pool %s is back on daemonset %s/%s; delete its daemonset: %w (delete it by hand, or run the merge again)", name, m.Namespace, m.Base, err)
	}
	out.Deleted = append(out.Deleted, "daemonset/"+name)
	err = m.Kube.ConfigMaps(m.Namespace).Delete(ctx, name, metav1.DeleteOptions{})
	switch {
	case err == nil:
		out.Deleted = append(out.Deleted, "configmap/"+name)
	case !apierrors.IsNotFound(err):
		return out, fmt.Errorf("pool %s merged and its daemonset deleted; delete its configmap %s/%s: %w (delete it by hand)", name, m.Namespace, name, err)
	}
	m.Log.Infof("pool %s merged into daemonset %s/%s: %d node(s) back, its daemonset and config deleted", name, m.Namespace, m.Base, len(out.Moved))
	return out, nil
}

// makePool creates pool name's record, a copy of the config the base's
// pods mount, and its DaemonSet: the base's template on the pool's nodes,
// its config volume on the record, its own pod labels.
func (m Mover) makePool(ctx context.Context, base *appsv1.DaemonSet, name string, out *Outcome) error {
	volume, mounted := ConfigVolume(base, m.Container, m.Record)
	if volume == "" {
		return fmt.Errorf("container %s of daemonset %s/%s mounts neither configmap %s nor a copy of it; nothing was changed", m.Container, m.Namespace, m.Base, m.Record)
	}
	cms := m.Kube.ConfigMaps(m.Namespace)
	src, err := cms.Get(ctx, mounted, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("read configmap %s/%s, the config daemonset %s runs: %w; nothing was changed", m.Namespace, mounted, m.Base, err)
	}
	rec := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: m.Namespace,
			Labels: map[string]string{PoolOfLabel: m.Record, configmap.ManagedByLabel: configmap.FieldManager}},
		Data: src.Data, BinaryData: src.BinaryData,
	}
	if _, err := cms.Create(ctx, rec, metav1.CreateOptions{FieldManager: configmap.FieldManager}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create configmap %s/%s, pool %s's config: %w; nothing else was changed", m.Namespace, name, name, err)
	} else if err == nil {
		out.Created = append(out.Created, "configmap/"+name)
	}
	ds := PoolDaemonSet(base, name, volume)
	if _, err := m.Kube.DaemonSets(m.Namespace).Create(ctx, ds, metav1.CreateOptions{FieldManager: configmap.FieldManager}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create daemonset %s/%s, pool %s: %w; no node was moved", m.Namespace, name, name, err)
	}
	out.Created = append(out.Created, "daemonset/"+name)
	m.Log.Infof("pool %s made: daemonset and configmap %s/%s (the config daemonset %s runs, from configmap %s)", name, m.Namespace, name, m.Base, mounted)
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
			UpdateStrategy: *base.Spec.UpdateStrategy.DeepCopy(), MinReadySeconds: base.Spec.MinReadySeconds,
			RevisionHistoryLimit: base.Spec.RevisionHistoryLimit,
		},
	}
}

// move labels node into pool (nil: out of every pool, back to the base)
// and waits until it runs a Ready kube-proxy of its new DaemonSet and none
// of the old. A node there already is left as it is (nil Move). Past
// NodeTimeout the label goes back and the node returns to the DaemonSet it
// came from.
func (m Mover) move(ctx context.Context, node string, pool *string, base *appsv1.DaemonSet, name string) (*Move, error) {
	from, to := name, m.Base
	if pool != nil {
		from, to = m.Base, name
	}
	n, err := m.Kube.Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("read node %s: %w", node, err)
	}
	cur, in := n.Labels[rollout.PoolLabel]
	labelled := (pool == nil && !in) || (pool != nil && in && cur == *pool)
	if labelled {
		done, err := m.wait(ctx, node, base, name, to, nil)
		if err == nil && done != nil {
			return nil, nil // there already
		}
	}
	m.Log.Infof("node %s: from daemonset %s to %s", node, from, to)
	if err := m.label(ctx, node, pool); err != nil {
		return nil, err
	}
	wctx, cancel := context.WithTimeout(ctx, m.NodeTimeout)
	defer cancel()
	mv, err := m.wait(wctx, node, base, name, to, &Move{Node: node})
	if err == nil {
		m.Log.Infof("node %s: daemonset %s's kube-proxy Ready, %.1fs without one", node, to, mv.Seconds)
		return mv, nil
	}
	back := &cur
	if !in {
		back = nil
	}
	if lerr := m.label(context.WithoutCancel(ctx), node, back); lerr != nil {
		return nil, fmt.Errorf("node %s: %w; its label could not be put back either (%v): set %s on it as it was (%s), by hand", node, err, lerr, rollout.PoolLabel, map[bool]string{true: cur, false: "none"}[in])
	}
	return nil, fmt.Errorf("node %s: %w; its label is back, so daemonset %s puts its kube-proxy back there; the nodes after it were not moved", node, err, from)
}

// label sets the node's PoolLabel to pool (nil: removes it).
func (m Mover) label(ctx context.Context, node string, pool *string) error {
	body, _ := json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]any{rollout.PoolLabel: pool}}})
	if _, err := m.Kube.Nodes().Patch(ctx, node, types.StrategicMergePatchType, body, metav1.PatchOptions{FieldManager: configmap.FieldManager}); err != nil {
		return fmt.Errorf("label node %s %s: %w", node, rollout.PoolLabel, err)
	}
	return nil
}

// wait follows the kube-proxy pods of the base and the pool on node until
// it runs a Ready pod of DaemonSet to and no pod of the other, with mv
// (when not nil) timing the stretch with no Ready kube-proxy: from the
// first moment none was Ready to the new one's readiness. It returns mv
// (or a Move when nil) when done, nil when the node is not there yet and
// ctx is done.
func (m Mover) wait(ctx context.Context, node string, base *appsv1.DaemonSet, name, to string, mv *Move) (*Move, error) {
	pods := m.Kube.Pods(m.Namespace)
	opts := metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("spec.nodeName", node).String()}
	owner := func(p *corev1.Pod) string {
		if ref := metav1.GetControllerOf(p); ref != nil && ref.Kind == "DaemonSet" {
			return ref.Name
		}
		return ""
	}
	list, err := pods.List(ctx, opts)
	if err != nil {
		return nil, fmt.Errorf("list the pods on node %s: %w", node, err)
	}
	onNode := map[types.UID]*corev1.Pod{}
	for i := range list.Items {
		onNode[list.Items[i].UID] = &list.Items[i]
	}
	var since time.Time
	state := func() (done bool) {
		ready, other := false, false
		for _, p := range onNode {
			switch owner(p) {
			case to:
				ready = ready || (p.DeletionTimestamp == nil && podReady(p))
			case base.Name, name:
				other = true
			}
		}
		anyReady := false
		for _, p := range onNode {
			if o := owner(p); (o == base.Name || o == name) && p.DeletionTimestamp == nil && podReady(p) {
				anyReady = true
			}
		}
		if !anyReady && since.IsZero() {
			since = m.Clock.Now()
		}
		return ready && !other
	}
	finish := func() *Move {
		if mv == nil {
			mv = &Move{Node: node}
		}
		if !since.IsZero() {
			mv.Seconds = m.Clock.Since(since).Seconds()
		}
		return mv
	}
	if state() {
		return finish(), nil
	}
	if mv == nil {
		return nil, nil // only asked whether it is there now
	}
	opts.ResourceVersion = list.ResourceVersion
	w, err := pods.Watch(ctx, opts)
	if err != nil {
		return nil, fmt.Errorf("watch the pods on node %s: %w", node, err)
	}
	defer w.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("no Ready kube-proxy of daemonset %s alone on node %s within %s: %w", to, node, m.NodeTimeout, ctx.Err())
		case ev, ok := <-w.ResultChan():
			if !ok {
				return nil, fmt.Errorf("the watch of the pods on node %s ended; run again to go on", node)
			}
			p, isPod := ev.Object.(*corev1.Pod)
			if !isPod {
				continue
			}
			if ev.Type == watch.Deleted {
				delete(onNode, p.UID)
			} else {
				onNode[p.UID] = p
			}
			if state() {
				return finish(), nil
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
	mounts := map[string]bool{}
	for _, c := range ds.Spec.Template.Spec.Containers {
		if c.Name == container {
			for _, vm := range c.VolumeMounts {
				mounts[vm.Name] = true
			}
		}
	}
	for _, v := range ds.Spec.Template.Spec.Volumes {
		if v.ConfigMap != nil && mounts[v.Name] && (v.ConfigMap.Name == record || configmap.IsCopyName(record, v.ConfigMap.Name)) {
			return v.Name, v.ConfigMap.Name
		}
	}
	return "", ""
}

// Describe is one line on what the outcome did.
func (o Outcome) Describe(check bool) string {
	verb := map[bool]string{true: "would move", false: "moved"}[check]
	moved := len(o.Moved)
	if check {
		moved = len(o.Nodes)
	}
	max := 0.0
	for _, mv := range o.Moved {
		max = maxf(max, mv.Seconds)
	}
	s := fmt.Sprintf("%s pool %s: %s %d node(s) (%s)", o.Action, o.Pool, verb, moved, strings.Join(o.Nodes, ", "))
	if !check && moved > 0 {
		s += fmt.Sprintf(", each at most %.1fs without a Ready kube-proxy", max)
	}
	return s
}

func maxf(a, b float64) float64 {
	if a > b {
		return a
	}
	return b
}
