package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
	"k8s.io/client-go/util/retry"

	"github.com/kube-proxy-sync/kube-proxy-sync/internal/configmap"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/pools"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/rollout"
)

// The pools phase (issue 49): the same restart of every node's kube-proxy
// as one DaemonSet and as --pools pools, each layout with kube-proxy-sync
// and with kubectl. The pools are made the way a split leaves them (the
// binary's own rollout.KeepOffPools and pools.PoolDaemonSet), but in bulk:
// --split moves one node at a time, hours at 5000 nodes.

// container is kube-proxy's container in the DaemonSet (the binary's
// --container default), whose config volume a pool points at its own
// ConfigMap.
const container = "kube-proxy"

// fieldManager is the bench's own writes' manager.
const fieldManager = "kps-bench"

type poolsResult struct {
	Kind           string `json:"kind"`
	Nodes          int32  `json:"nodes"`
	MaxUnavailable string `json:"max_unavailable"`
	Pools          int    `json:"pools"`
	// PoolNodes is how many nodes each pool has, in the order of Layouts'
	// pools.
	PoolNodes []int `json:"pool_nodes"`
	// Layouts is one DaemonSet (unless the restart phase at this node
	// count measured it: --one-daemonset=false), then the pools.
	Layouts []layoutResult `json:"layouts"`
}

// layoutResult is one layout's rounds.
type layoutResult struct {
	Layout string `json:"layout"`
	// Pools is how many pool DaemonSets (0: one DaemonSet).
	Pools int `json:"pools"`
	// DaemonSets are the ones with nodes: what kubectl restarts.
	DaemonSets []string `json:"daemonsets"`
	// From is "restart" when the report took the rounds from the restart
	// phase at the same node count (never in a phase file).
	From string `json:"from,omitempty"`
	comparison
}

// poolNames are the pools of base: base-pool-1 ... base-pool-n. Pure.
func poolNames(base string, n int) []string {
	names := make([]string, n)
	for i := range names {
		names[i] = base + "-pool-" + strconv.Itoa(i+1)
	}
	return names
}

// isPoolName reports whether name is one of base's pools, of any count.
func isPoolName(base, name string) bool {
	n, ok := strings.CutPrefix(name, base+"-pool-")
	i, err := strconv.Atoi(n)
	return ok && err == nil && i > 0
}

// assignPools puts node i, in the order of their names, in pool i mod
// len(pools): pools of sizes that differ by one at most. Pure.
func assignPools(nodes, pools []string) map[string]string {
	sorted := slices.Sorted(slices.Values(nodes))
	out := make(map[string]string, len(sorted))
	for i, n := range sorted {
		out[n] = pools[i%len(pools)]
	}
	return out
}

// poolSizes is how many nodes each pool got. Pure.
func poolSizes(assigned map[string]string, pools []string) []int {
	sizes := make([]int, len(pools))
	for _, p := range assigned {
		sizes[slices.Index(pools, p)]++
	}
	return sizes
}

// hasPoolAffinity reports whether spec's required node affinity says
// anything of rollout.PoolLabel.
func hasPoolAffinity(spec *corev1.PodSpec) bool {
	a := spec.Affinity
	if a == nil || a.NodeAffinity == nil || a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		return false
	}
	for _, t := range a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
		if slices.ContainsFunc(t.MatchExpressions, func(r corev1.NodeSelectorRequirement) bool { return r.Key == rollout.PoolLabel }) {
			return true
		}
	}
	return false
}

// withoutPoolAffinity takes out of spec what rollout.KeepOffPools put
// in: every requirement on rollout.PoolLabel. A term left empty drops the
// whole required affinity (terms are ORed, and that term asked for
// nothing else), and what is left empty of the affinity goes with it.
// Pure.
func withoutPoolAffinity(spec *corev1.PodSpec) {
	if !hasPoolAffinity(spec) {
		return
	}
	na := spec.Affinity.NodeAffinity
	req := na.RequiredDuringSchedulingIgnoredDuringExecution
	for i := range req.NodeSelectorTerms {
		t := &req.NodeSelectorTerms[i]
		t.MatchExpressions = slices.DeleteFunc(t.MatchExpressions, func(r corev1.NodeSelectorRequirement) bool { return r.Key == rollout.PoolLabel })
		if len(t.MatchExpressions) == 0 {
			t.MatchExpressions = nil
			if len(t.MatchFields) == 0 {
				na.RequiredDuringSchedulingIgnoredDuringExecution = nil
			}
		}
	}
	if na.RequiredDuringSchedulingIgnoredDuringExecution == nil && na.PreferredDuringSchedulingIgnoredDuringExecution == nil {
		spec.Affinity.NodeAffinity = nil
	}
	if *spec.Affinity == (corev1.Affinity{}) {
		spec.Affinity = nil
	}
}

// caughtUp reports whether each DaemonSet of names is in seen with the
// controller's status of its current spec, and (want > 0) whether they
// want want pods in all. Pure.
func caughtUp(seen map[string]*appsv1.DaemonSet, names []string, want int32) bool {
	var desired int32
	for _, n := range names {
		ds, ok := seen[n]
		if !ok || ds.Status.ObservedGeneration < ds.Generation {
			return false
		}
		desired += ds.Status.DesiredNumberScheduled
	}
	return want <= 0 || desired == want
}

// pools: the restart as one DaemonSet (unless --one-daemonset=false),
// then as --pools pools, --rounds rounds each, with the same
// maxUnavailable on every DaemonSet; then one DaemonSet again.
func (b *bench) pools(ctx context.Context) error {
	if b.Pools < 1 {
		return fmt.Errorf("--pools must be at least 1, got %d", b.Pools)
	}
	// what an interrupted run left: back to one DaemonSet first
	if err := b.oneDaemonSet(ctx, 0); err != nil {
		return fmt.Errorf("back to one daemonset before the phase: %w", err)
	}
	nodes, srv, restore, err := b.restartSetup(ctx)
	if err != nil {
		return err
	}
	defer restore()
	res := poolsResult{Kind: "pools", Nodes: nodes, MaxUnavailable: b.MaxUnavail, Pools: b.Pools}
	if b.OneDaemonSet {
		one := layout{Name: "one DaemonSet"}
		runs, err := b.restartRounds(ctx, nodes, one, srv)
		if err != nil {
			return err
		}
		res.Layouts = append(res.Layouts, layoutResult{Layout: one.Name, DaemonSets: one.restarted(b.Name), comparison: compare(runs)})
	}

	pl := layout{Name: fmt.Sprintf("%d pools", b.Pools), Pools: poolNames(b.Name, b.Pools)}
	restored := false
	defer func() {
		if !restored {
			if err := b.oneDaemonSet(context.WithoutCancel(ctx), nodes); err != nil {
				b.log.Warnf("back to one daemonset: %v; the next pools phase tries again", err)
			}
		}
	}()
	if res.PoolNodes, err = b.makePools(ctx, nodes, pl.Pools); err != nil {
		return err
	}
	runs, err := b.restartRounds(ctx, nodes, pl, srv)
	if err != nil {
		return err
	}
	res.Layouts = append(res.Layouts, layoutResult{Layout: pl.Name, Pools: len(pl.Pools), DaemonSets: pl.restarted(b.Name), comparison: compare(runs)})
	restored = true
	if err := b.oneDaemonSet(ctx, nodes); err != nil {
		return err
	}
	return b.write(nodes, res)
}

// makePools turns the settled base DaemonSet on want nodes into the pools
// names, the nodes dealt out in turn (assignPools): each node labelled
// rollout.PoolLabel=its pool, the base kept off them all
// (rollout.KeepOffPools: its pods go at once, it has no node left), each
// pool's ConfigMap a copy of the config the base's pods mount (labelled
// as the binary labels the one it makes), each pool's DaemonSet
// pools.PoolDaemonSet of the base; then waits until every node has one
// Ready pod of its pool. Returns the pools' sizes.
func (b *bench) makePools(ctx context.Context, want int32, names []string) ([]int, error) {
	on, err := b.podUIDs(ctx)
	if err != nil {
		return nil, err
	}
	nodes := make([]string, 0, len(on))
	for n := range on {
		nodes = append(nodes, n)
	}
	assigned := assignPools(nodes, names)
	sizes := poolSizes(assigned, names)
	b.log.Infof("%d pools of %v nodes: labelling %d nodes %s", len(names), sizes, len(assigned), rollout.PoolLabel)
	set := make(map[string]*string, len(assigned))
	for n, p := range assigned {
		set[n] = &p
	}
	if err := b.labelNodes(ctx, set); err != nil {
		return nil, err
	}
	base, err := b.updateBase(ctx, rollout.KeepOffPools)
	if err != nil {
		return nil, err
	}
	volume, mounted := pools.ConfigVolume(base, container, b.Name)
	if volume == "" {
		return nil, fmt.Errorf("container %s of daemonset %s/%s mounts no configmap %s (nor a copy of it)", container, b.Namespace, b.Name, b.Name)
	}
	src, err := b.cs.CoreV1().ConfigMaps(b.Namespace).Get(ctx, mounted, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("get configmap %s/%s, the config daemonset %s runs: %w", b.Namespace, mounted, b.Name, err)
	}
	for _, name := range names {
		rec := &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: b.Namespace,
				Labels: map[string]string{pools.PoolOfLabel: b.Name, configmap.ManagedByLabel: configmap.FieldManager}},
			Data: src.Data, BinaryData: src.BinaryData,
		}
		if _, err := b.cs.CoreV1().ConfigMaps(b.Namespace).Create(ctx, rec, metav1.CreateOptions{FieldManager: fieldManager}); err != nil {
			return nil, fmt.Errorf("create configmap %s/%s, pool %s's config: %w", b.Namespace, name, name, err)
		}
		ds := pools.PoolDaemonSet(base, name, volume)
		if _, err := b.cs.AppsV1().DaemonSets(b.Namespace).Create(ctx, ds, metav1.CreateOptions{FieldManager: fieldManager}); err != nil {
			return nil, fmt.Errorf("create daemonset %s/%s, pool %s: %w", b.Namespace, name, name, err)
		}
	}
	all := layout{Pools: names}.daemonSets(b.Name)
	if err := b.settleLayout(ctx, all, want); err != nil {
		return nil, fmt.Errorf("%d pools: %w", len(names), err)
	}
	b.log.Infof("%d pools settled: every node has one Ready pod of its pool", len(names))
	return sizes, nil
}

// oneDaemonSet puts back the one-DaemonSet layout, whatever is left of
// the bench's pools (of any count): their DaemonSets deleted and their pods
// gone, their ConfigMaps (and copies) deleted, the base's pool affinity
// taken out (while it runs no pod, so no rollout), their nodes unlabelled;
// then waits until the base runs on every node (want of them, when known)
// again. Pools that are not the bench's (a real split on a cluster given
// with --kubeconfig) stay, and so does the affinity then. Nothing to do is
// no write.
func (b *bench) oneDaemonSet(ctx context.Context, want int32) error {
	dsList, err := b.cs.AppsV1().DaemonSets(b.Namespace).List(ctx, metav1.ListOptions{LabelSelector: labels.Set{pools.PoolOfLabel: b.Name}.String()})
	if err != nil {
		return fmt.Errorf("list the pools of daemonset %s/%s: %w", b.Namespace, b.Name, err)
	}
	var left []appsv1.DaemonSet
	var names []string
	for _, ds := range dsList.Items {
		if isPoolName(b.Name, ds.Name) {
			left, names = append(left, ds), append(names, ds.Name)
		}
	}
	labelled, err := b.cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: rollout.PoolLabel})
	if err != nil {
		return fmt.Errorf("list the nodes labelled %s: %w", rollout.PoolLabel, err)
	}
	unset, foreign := map[string]*string{}, 0
	for _, n := range labelled.Items {
		if isPoolName(b.Name, n.Labels[rollout.PoolLabel]) {
			unset[n.Name] = nil
		} else {
			foreign++
		}
	}
	base, err := b.cs.AppsV1().DaemonSets(b.Namespace).Get(ctx, b.Name, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("get daemonset %s/%s: %w", b.Namespace, b.Name, err)
	}
	affinity := hasPoolAffinity(&base.Spec.Template.Spec) && foreign == 0
	if len(left) == 0 && len(unset) == 0 && !affinity {
		return nil
	}
	b.log.Infof("back to one daemonset: deleting %d pool(s), unlabelling %d node(s)", len(left), len(unset))
	if len(left) > 0 {
		if err := b.deletePools(ctx, left, names); err != nil {
			return err
		}
	}
	if affinity {
		if _, err := b.updateBase(ctx, withoutPoolAffinity); err != nil {
			return err
		}
	}
	if err := b.labelNodes(ctx, unset); err != nil {
		return err
	}
	if err := b.settleLayout(ctx, []string{b.Name}, want); err != nil {
		return fmt.Errorf("one daemonset again: %w", err)
	}
	return nil
}

// deletePools deletes the pools' DaemonSets, their ConfigMaps and the
// copies, and waits until their pods are gone.
func (b *bench) deletePools(ctx context.Context, left []appsv1.DaemonSet, names []string) error {
	w, err := b.watchPods(ctx, names...)
	if err != nil {
		return err
	}
	defer w.Stop()
	bg := metav1.DeletePropagationBackground
	for _, ds := range left {
		err := b.cs.AppsV1().DaemonSets(b.Namespace).Delete(ctx, ds.Name, metav1.DeleteOptions{PropagationPolicy: &bg, Preconditions: &metav1.Preconditions{UID: &ds.UID}})
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("delete daemonset %s/%s: %w", b.Namespace, ds.Name, err)
		}
	}
	cms := b.cs.CoreV1().ConfigMaps(b.Namespace)
	// the copies go with their DaemonSet (its ownerReference); without
	// waiting for the garbage collector
	copies, err := labels.NewRequirement(configmap.CopyOfLabel, selection.In, names)
	if err != nil {
		return err
	}
	if err := cms.DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: copies.String()}); err != nil {
		return fmt.Errorf("delete the copies of configmaps %s/%s: %w", b.Namespace, strings.Join(names, ","), err)
	}
	records, err := cms.List(ctx, metav1.ListOptions{LabelSelector: labels.Set{pools.PoolOfLabel: b.Name}.String()})
	if err != nil {
		return fmt.Errorf("list the pools' configmaps: %w", err)
	}
	for _, cm := range records.Items {
		if slices.Contains(names, cm.Name) {
			if err := cms.Delete(ctx, cm.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				return fmt.Errorf("delete configmap %s/%s: %w", b.Namespace, cm.Name, err)
			}
		}
	}
	if err := w.waitGone(ctx, b.Timeout); err != nil {
		return fmt.Errorf("the pods of daemonsets %s: %w", strings.Join(names, ", "), err)
	}
	return nil
}

// settleLayout waits until the DaemonSets' controller has seen their
// specs (and, want > 0, they want want pods in all), then until their pods
// are settled.
func (b *bench) settleLayout(ctx context.Context, names []string, want int32) error {
	if err := b.waitDaemonSets(ctx, names, want); err != nil {
		return err
	}
	w, err := b.watchPods(ctx, names...)
	if err != nil {
		return err
	}
	err = w.waitSettled(ctx, b.Timeout, false)
	rep := w.Stop()
	if err == nil && want > 0 && rep.Expected != int(want) {
		err = fmt.Errorf("daemonsets %s want %d pods, not %d", strings.Join(names, ", "), rep.Expected, want)
	}
	return err
}

// waitDaemonSets follows the namespace's DaemonSets until caughtUp.
func (b *bench) waitDaemonSets(ctx context.Context, names []string, want int32) error {
	ctx, cancel := context.WithTimeout(ctx, b.Timeout)
	defer cancel()
	dss := b.cs.AppsV1().DaemonSets(b.Namespace)
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			// from etcd, not the watch cache, which can lag the write
			// just made
			o.ResourceVersion, o.ResourceVersionMatch = "", ""
			return dss.List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return dss.Watch(ctx, o)
		},
	}
	seen := map[string]*appsv1.DaemonSet{}
	_, err := watchtools.UntilWithSync(ctx, lw, &appsv1.DaemonSet{}, func(store cache.Store) (bool, error) {
		for _, obj := range store.List() {
			if ds, ok := obj.(*appsv1.DaemonSet); ok {
				seen[ds.Name] = ds
			}
		}
		return caughtUp(seen, names, want), nil
	}, func(ev watch.Event) (bool, error) {
		ds, ok := ev.Object.(*appsv1.DaemonSet)
		if !ok {
			return false, nil
		}
		if ev.Type == watch.Deleted {
			delete(seen, ds.Name)
		} else {
			seen[ds.Name] = ds
		}
		return caughtUp(seen, names, want), nil
	})
	if err != nil {
		return fmt.Errorf("daemonsets %s/%s: the controller's status not caught up (want %d pods) within %s: %w", b.Namespace, strings.Join(names, ","), want, b.Timeout, err)
	}
	return nil
}

// updateBase applies fn to the base's pod spec and updates the DaemonSet
// with the resourceVersion read, again on a conflict; no write when fn
// changes nothing. Returns the DaemonSet as it is now.
func (b *bench) updateBase(ctx context.Context, fn func(*corev1.PodSpec)) (*appsv1.DaemonSet, error) {
	dss := b.cs.AppsV1().DaemonSets(b.Namespace)
	var out *appsv1.DaemonSet
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		ds, err := dss.Get(ctx, b.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		spec := ds.Spec.Template.Spec.DeepCopy()
		fn(spec)
		if equality.Semantic.DeepEqual(spec, &ds.Spec.Template.Spec) {
			out = ds
			return nil
		}
		ds.Spec.Template.Spec = *spec
		out, err = dss.Update(ctx, ds, metav1.UpdateOptions{FieldManager: fieldManager})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("update the node affinity of daemonset %s/%s: %w", b.Namespace, b.Name, err)
	}
	return out, nil
}

// labelNodes sets each node's rollout.PoolLabel to its value (nil: takes
// it and rollout.MovingLabel off), 16 PATCHes at a time.
func (b *bench) labelNodes(ctx context.Context, pools map[string]*string) error {
	nodes := make([]string, 0, len(pools))
	for n := range pools {
		nodes = append(nodes, n)
	}
	sort.Strings(nodes)
	work := make(chan string)
	errs := make([]error, 16)
	var wg sync.WaitGroup
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := range work {
				if errs[i] != nil {
					continue
				}
				l := map[string]any{rollout.PoolLabel: pools[n]}
				if pools[n] == nil {
					l[rollout.MovingLabel] = nil
				}
				patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"labels": l}})
				if _, err := b.cs.CoreV1().Nodes().Patch(ctx, n, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: fieldManager}); err != nil {
					errs[i] = fmt.Errorf("label node %s: %w", n, err)
				}
			}
		}()
	}
	for _, n := range nodes {
		work <- n
	}
	close(work)
	wg.Wait()
	return errors.Join(errs...)
}
