package app

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/kube-proxy-sync/kube-proxy-sync/internal/audit"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/configmap"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/kpconfig"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/kpsync"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/kube"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/lock"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/pools"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/probe"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/rollout"
)

// --split and --merge make a pool from kubeadm's DaemonSet and fold it
// back (internal/pools): nodes move by their label, one at a time.

// validateSplit refuses --split and --merge with what they do not take.
func (o *Options) validateSplit() error {
	if o.Split == "" && o.Merge == "" {
		if o.SplitNodes != "" {
			return fmt.Errorf("--split-nodes goes with --split")
		}
		return nil
	}
	flag, name := "--split", o.Split
	if o.Merge != "" {
		flag, name = "--merge", o.Merge
	}
	switch {
	case o.Split != "" && o.Merge != "":
		return fmt.Errorf("--split and --merge: one at a time")
	case len(validation.IsDNS1123Subdomain(name)) > 0:
		return fmt.Errorf("%s %q: %s", flag, name, strings.Join(validation.IsDNS1123Subdomain(name), "; "))
	case len(validation.IsValidLabelValue(name)) > 0:
		// the nodes' label and the pool's pod labels carry it
		return fmt.Errorf("%s %q: a pool's name is a label value: %s", flag, name, strings.Join(validation.IsValidLabelValue(name), "; "))
	case name == o.DaemonSet || name == o.ConfigMap || configmap.IsCopyName(o.ConfigMap, name):
		return fmt.Errorf("%s %q: that is --daemonset, --configmap or a copy's name; name the pool otherwise", flag, name)
	case len(o.Pools) > 0 || len(o.settings) > 0 || o.Server != "" || o.Manifest != "" || o.KubeadmConfig != "" || o.Image != "" || o.Template != "" || o.Undo:
		return fmt.Errorf("%s moves nodes between DaemonSets, each keeping the config it runs: it takes no --pool, --set, --server, --manifest, --kubeadm-config, --image, --template or --undo (run those before or after it)", flag)
	case o.Restart == kpsync.RestartNever:
		return fmt.Errorf("%s with --restart never: moving a node restarts its kube-proxy; run it with --restart auto", flag)
	}
	if o.Split == "" {
		return nil
	}
	if strings.TrimSpace(o.SplitNodes) == "" {
		return fmt.Errorf("--split needs --split-nodes, a label selector of the nodes that make the pool")
	}
	sel, err := labels.Parse(o.SplitNodes)
	if err != nil || sel.Empty() {
		return fmt.Errorf("--split-nodes %q: want a label selector like node.kubernetes.io/os-image=rhel8 (all nodes is not a split)", o.SplitNodes)
	}
	return nil
}

// runSplit is a --split or --merge run: for a split, kubeadm's DaemonSet
// first keeps off the pools' nodes (a kpsync run that rolls that node
// affinity in, when it is not there), then the nodes move.
func runSplit(ctx context.Context, o *Options, d kpsync.Deps) (_ *kpsync.Result, _ *pools.Outcome, warnings []string, _ error) {
	host, _ := os.Hostname()
	m := pools.Mover{Kube: d.Kube, Clock: d.Clock, Log: d.Log, Namespace: o.Namespace, Base: o.DaemonSet, Record: o.ConfigMap,
		Container: o.Container, NodeTimeout: o.ProgressDeadline, Check: o.Check, LockTimeout: o.LockTimeout,
		Lease: &lock.Lease{Leases: d.Kube.Leases(o.Namespace), Namespace: o.Namespace, Name: kpsync.LeaseName,
			Identity: fmt.Sprintf("%s/%d/%s", host, os.Getpid(), audit.NewID()), Duration: 30 * time.Second, Poll: time.Second, Clock: d.Clock, Log: d.Log}}
	base, err := d.Kube.DaemonSets(o.Namespace).Get(ctx, o.DaemonSet, metav1.GetOptions{})
	if err != nil {
		return nil, nil, warnings, fmt.Errorf("read daemonset %s/%s: %w; nothing was changed", o.Namespace, o.DaemonSet, err)
	}
	if m.NodeTimeout == 0 {
		// what a rollout of the base allows one node
		m.NodeTimeout = kpsync.ProgressDeadline(base, o.Container)
	}
	twice, orphans, err := pools.Strays(ctx, d.Kube, o.Namespace, base)
	if err != nil {
		return nil, nil, warnings, fmt.Errorf("%w; nothing was changed", err)
	}
	warnings = pools.StrayWarnings(o.Namespace, o.DaemonSet, twice, orphans)
	for _, w := range warnings {
		d.Log.Warn(w)
	}
	// --timeout bounds the moves too: past it no further node starts to
	// move (the one moving arrives, or goes back); the same run again goes on
	if o.Timeout > 0 {
		m.Deadline = d.Clock.Now().Add(o.Timeout)
	}
	timedOut := func(out pools.Outcome, err error) error {
		if !errors.Is(err, pools.ErrDeadline) {
			return err
		}
		flag := "--split " + o.Split
		if o.Merge != "" {
			flag = "--merge " + o.Merge
		}
		return fmt.Errorf("--timeout (%s) reached with %d of %d node(s) moved; the others stay where they are, each with its kube-proxy: run the same %s again to go on",
			o.Timeout, len(out.Moved), len(out.Nodes), flag)
	}
	// the move the nodes make, judged once the plan has nodes to move and
	// again under the Lease (its warnings said once); no node moving, no
	// move to judge (a pool's DaemonSet and config deleted, a rerun)
	// (a split that first rolls the base off the pools' nodes judges what
	// the base's template runs too: its pods run that once it rolled)
	rollsBase := o.Merge == "" && !rollout.KeepsOffPools(&base.Spec.Template.Spec)
	judge := func(nodes []string) error {
		if len(nodes) == 0 {
			return nil
		}
		more, err := judgeMove(ctx, o, d, nodes, rollsBase)
		for _, w := range more {
			d.Log.Warn(w)
		}
		warnings = append(warnings, more...)
		return err
	}
	m.Judge = func(ctx context.Context, nodes []string) error {
		_, err := judgeMove(ctx, o, d, nodes, false)
		return err
	}
	plan := m
	plan.Check = true
	var res *kpsync.Result
	if o.Merge != "" {
		out, err := plan.Merge(ctx, o.Merge)
		if err == nil {
			err = judge(out.Nodes)
		}
		if err != nil || o.Check {
			return res, &out, warnings, err
		}
		out, err = m.Merge(ctx, o.Merge)
		return res, &out, warnings, timedOut(out, err)
	}
	sel, _ := labels.Parse(o.SplitNodes) // validated
	// the nodes first: a split that would move none rolls nothing
	out, err := plan.Split(ctx, o.Split, sel)
	if err == nil {
		err = judge(out.Nodes)
	}
	if err != nil || o.Check && rollout.KeepsOffPools(&base.Spec.Template.Spec) {
		return nil, &out, warnings, err
	}
	if !rollout.KeepsOffPools(&base.Spec.Template.Spec) {
		so := o.syncOptions()
		t := base.Spec.Template.DeepCopy()
		rollout.KeepOffPools(&t.Spec)
		so.Template, so.TemplateFrom = t, "kept off the pools' nodes (--split)"
		if res, err = kpsync.New(so, d).Run(ctx); err != nil {
			return res, nil, warnings, err
		}
	}
	out, err = m.Split(ctx, o.Split, sel)
	return res, &out, warnings, timedOut(out, err)
}

// judgeMove judges the move a split or merge makes the nodes make: from
// what kube-proxy runs on each of them now to what the DaemonSet they move
// to runs (its template). Now is the pod of the DaemonSet they leave (a
// merge: the pool's; a split: the base's) on each node: its image and the
// config it mounts, which may not be its template's yet (a change made with
// --restart never, a rollout stopped half way); a node with no such pod is
// judged by that DaemonSet's template, what would start there. A split into
// a new pool moves nothing (a copy of the base's config). Nodes move, never
// a mode or a version: another proxy mode or another kube-proxy version
// (sameVersion) is refused, since by a label the nodes would pass every
// check a mode or an image change has; the way named is a pool run, which
// has them. Other settings that differ go the new DaemonSet's way on the
// nodes, one node at a time, each waited for: said in a warning. A pod that
// mounts the record itself (kubeadm's layout, not a copy) is judged by the
// record's data now.
func judgeMove(ctx context.Context, o *Options, d kpsync.Deps, nodes []string, withTemplate bool) ([]string, error) {
	// runs is what a kube-proxy runs: its image and config.conf
	type runs struct{ image, config string }
	configs := map[string]string{}
	configOf := func(cm, of string) (string, error) {
		if c, ok := configs[cm]; ok {
			return c, nil
		}
		got, err := d.Kube.ConfigMaps(o.Namespace).Get(ctx, cm, metav1.GetOptions{})
		if err != nil {
			return "", fmt.Errorf("read configmap %s/%s, %s's config: %w; nothing was changed", o.Namespace, cm, of, err)
		}
		configs[cm] = got.Data[configmap.ConfigKey]
		return configs[cm], nil
	}
	template := func(ds, record string) (*appsv1.DaemonSet, runs, error) {
		got, err := d.Kube.DaemonSets(o.Namespace).Get(ctx, ds, metav1.GetOptions{})
		if err != nil {
			return nil, runs{}, fmt.Errorf("read daemonset %s/%s: %w; nothing was changed", o.Namespace, ds, err)
		}
		_, cm := pools.ConfigVolume(got, o.Container, record)
		if cm == "" {
			return nil, runs{}, fmt.Errorf("container %s of daemonset %s/%s mounts neither configmap %s nor a copy of it, so the config it runs is not known; nothing was changed", o.Container, o.Namespace, ds, record)
		}
		config, err := configOf(cm, "daemonset "+ds)
		return got, runs{image: rollout.ContainerImage(got, o.Container), config: config}, err
	}
	name, merge := o.Split, o.Merge != ""
	if merge {
		name = o.Merge
	}
	poolDS, pool, err := template(name, name)
	if poolDS == nil && apierrors.IsNotFound(err) {
		// no such DaemonSet (its ConfigMap missing is an error): a merge,
		// its nodes run no kube-proxy, whatever config; a split, the pool
		// it makes runs the base's
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	baseDS, base, err := template(o.DaemonSet, o.ConfigMap)
	if err != nil {
		return nil, err
	}
	fromDS, fromRecord, fromTemplate, to := poolDS, name, pool, base
	moved, way := "merged, its nodes", "move the pool first (%s), then merge it"
	if !merge {
		fromDS, fromRecord, fromTemplate, to = baseDS, o.ConfigMap, base, pool
		moved, way = "split into it, the nodes", "make the pool run what daemonset "+o.Namespace+"/"+o.DaemonSet+" runs first (%s), split, then move the pool with its checks; or split into a new pool"
	}
	// what each moving node runs now: its pod of fromDS (one page of
	// pods at a time), else the template; a split that first rolls the
	// base off the pools' nodes (withTemplate) also what its pods run
	// after that roll, the template, so that the judgement under the
	// Lease, after the roll, finds no move it did not judge before it
	type state struct {
		runs
		byPod bool
	}
	now := map[state][]string{}
	moving := map[string]bool{}
	for _, n := range nodes {
		moving[n] = true
	}
	sel, err := metav1.LabelSelectorAsSelector(fromDS.Spec.Selector)
	if err != nil {
		return nil, fmt.Errorf("daemonset %s/%s: its selector: %w; nothing was changed", o.Namespace, fromDS.Name, err)
	}
	seen := map[string]bool{}
	err = kube.Pager(func(ctx context.Context, lo metav1.ListOptions) (runtime.Object, error) {
		lo.LabelSelector = sel.String()
		return d.Kube.Pods(o.Namespace).List(ctx, lo)
	}).EachListItem(ctx, metav1.ListOptions{}, func(obj runtime.Object) error {
		p, ok := obj.(*corev1.Pod)
		if !ok || !moving[p.Spec.NodeName] || p.DeletionTimestamp != nil || !metav1.IsControlledBy(p, fromDS) {
			return nil
		}
		r := state{runs: fromTemplate, byPod: true}
		for _, c := range p.Spec.Containers {
			if c.Name == o.Container {
				r.image = c.Image
			}
		}
		if _, cm := pools.SpecConfigVolume(&p.Spec, o.Container, fromRecord); cm != "" {
			config, err := configOf(cm, "pod "+p.Name)
			if err != nil {
				return err
			}
			r.config = config
		}
		seen[p.Spec.NodeName] = true
		now[r] = append(now[r], p.Spec.NodeName)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list the pods of daemonset %s/%s: %w; nothing was changed", o.Namespace, fromDS.Name, err)
	}
	for _, n := range nodes {
		if !seen[n] || withTemplate {
			now[state{runs: fromTemplate}] = append(now[state{runs: fromTemplate}], n)
		}
	}
	// in a stable order: the state of the most nodes first
	var all []state
	for r := range now {
		slices.Sort(now[r])
		now[r] = slices.Compact(now[r])
		all = append(all, r)
	}
	slices.SortFunc(all, func(a, b state) int {
		if c := len(now[b]) - len(now[a]); c != 0 {
			return c
		}
		if c := strings.Compare(now[a][0], now[b][0]); c != 0 {
			return c
		}
		if a.byPod != b.byPod {
			if a.byPod {
				return -1
			}
			return 1
		}
		return 0
	})
	var warns []string
	for _, from := range all {
		// which nodes, judged by what: said of the side that moves
		note := fmt.Sprintf(" (%s, by their pods)", someNodes(now[from]))
		if !from.byPod {
			note = fmt.Sprintf(" (%s, by its template)", someNodes(now[from]))
		}
		poolNote, baseNote := note, ""
		if !merge {
			poolNote, baseNote = "", note
		}
		diffs, err := kpconfig.Differences(from.config, to.config)
		if err != nil {
			return nil, fmt.Errorf("configmaps of daemonsets %s/%s and %s/%s: %s: %w; nothing was changed", o.Namespace, name, o.Namespace, o.DaemonSet, configmap.ConfigKey, err)
		}
		var rest []string
		for _, df := range diffs {
			if df.Path == "mode" {
				poolMode, baseMode := strings.Trim(df.From, `"`), strings.Trim(df.To, `"`)
				if !merge {
					poolMode, baseMode = baseMode, poolMode
				}
				return nil, fmt.Errorf("pool %s runs proxy mode %s%s and daemonset %s/%s %s%s: %s would change mode with none of a mode change's checks; nothing was changed: "+way,
					name, poolMode, poolNote, o.Namespace, o.DaemonSet, baseMode, baseNote, moved, fmt.Sprintf("--pool %s --pool-set %s:mode=%s", name, name, baseMode))
			}
			rest = append(rest, fmt.Sprintf("%s %s", df.Path, orUnset(df.From)+" -> "+orUnset(df.To)))
		}
		if !sameVersion(from.image, to.image) {
			poolImage, baseImage := from.image, to.image
			if !merge {
				poolImage, baseImage = to.image, from.image
			}
			return nil, fmt.Errorf("pool %s runs image %s%s and daemonset %s/%s %s%s: %s would change kube-proxy's version with none of an image change's checks (the kernel, the mode at that version); nothing was changed: "+way,
				name, poolImage, poolNote, o.Namespace, o.DaemonSet, baseImage, baseNote, moved, fmt.Sprintf("--pool %s --image %s", name, baseImage))
		}
		if len(rest) == 0 {
			continue
		}
		if merge {
			warns = append(warns, fmt.Sprintf("pool %s%s sets apart from daemonset %s/%s: %s; merged, its nodes run the daemonset's values (for the pool's own checks first: --pool %s --pool-set %s:PATH=VALUE, then merge)",
				name, poolNote, o.Namespace, o.DaemonSet, strings.Join(rest, ", "), name, name))
			continue
		}
		warns = append(warns, fmt.Sprintf("pool %s sets apart from daemonset %s/%s%s: %s; split into it, the nodes run the pool's values",
			name, o.Namespace, o.DaemonSet, baseNote, strings.Join(rest, ", ")))
	}
	return warns, nil
}

// someNodes names nodes, the first few of many.
func someNodes(nodes []string) string {
	const most = 5
	if len(nodes) <= most {
		return "node(s) " + strings.Join(nodes, ", ")
	}
	return fmt.Sprintf("nodes %s and %d more", strings.Join(nodes[:most], ", "), len(nodes)-most)
}

// sameVersion reports whether two kube-proxy images run the same version:
// the same reference, or the same version tag by another reference (a
// mirror's, or one pinned by a digest as well). Only the tag tells: a
// pre-release or a vendor's build (v1.33.6-eksbuild.1) is another version
// than v1.33.6, and a reference with no version tag is only the same as
// itself.
func sameVersion(a, b string) bool {
	if a == b {
		return true
	}
	ta, tb := versionTag(a), versionTag(b)
	return ta != "" && ta == tb
}

// versionTag is an image reference's tag, less a leading "v", when it
// starts with a version; "" otherwise.
func versionTag(image string) string {
	if _, err := probe.ImageVersion(image); err != nil {
		return ""
	}
	ref, _, _ := strings.Cut(image, "@")
	return strings.TrimPrefix(ref[strings.LastIndex(ref, ":")+1:], "v")
}

// orUnset is a value of a Difference, or "unset".
func orUnset(v string) string {
	if v == "" {
		return "unset"
	}
	return v
}

// splitOutcome is a --split or --merge run's result: the base's run (when
// the split rolled kubeadm's DaemonSet off the pools' nodes) with the
// nodes moved, changed when either changed anything.
func splitOutcome(o *Options, res *kpsync.Result, out *pools.Outcome, warnings []string) *kpsync.Result {
	o.poolMove = out
	if res == nil && (out != nil || len(warnings) > 0) {
		res = &kpsync.Result{Facts: kpsync.Facts{CheckMode: o.Check, ChangedKeys: []string{}, ChangedKeysEffect: map[string]string{}, AccessChanged: []string{}}}
	}
	if res != nil {
		res.Warnings = append(slices.Clone(warnings), res.Warnings...)
	}
	if out == nil {
		return res
	}
	moves := len(out.Moved) > 0 || len(out.Created) > 0 || len(out.Deleted) > 0 || (o.Check && len(out.Nodes) > 0)
	res.Changed = res.Changed || moves
	line := out.Describe(o.Check)
	if res.Msg != "" {
		line = res.Msg + "; then " + line
	}
	res.Msg = line
	return res
}
