package rollout

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/pager"
	watchtools "k8s.io/client-go/tools/watch"

	"github.com/kube-proxy-sync/kube-proxy-sync/internal/kube"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/nodes"
)

// templateGenerationLabel is set by the DaemonSet controller on every pod:
// the template generation the pod was made from. The API server counts
// template generations in templateGenerationAnnotation on the DaemonSet; it
// moves only when the pod template changes, unlike metadata.generation.
const (
	templateGenerationLabel      = "pod-template-generation"
	templateGenerationAnnotation = "deprecated.daemonset.template.generation"
)

// OfTemplate reports whether pod was made from ds's template as it is now
// (its templateGenerationLabel against the DaemonSet's template generation).
func OfTemplate(pod *corev1.Pod, ds *appsv1.DaemonSet) bool {
	return pod.Labels[templateGenerationLabel] == strconv.FormatInt(TemplateGeneration(ds), 10)
}

type podState struct {
	name     string
	node     string
	gen      int64
	ready    bool
	deleting bool
	// deleteBy is when the pod's grace period ends, while deleting
	deleteBy time.Time
	// problem says why the pod cannot run (a container waiting in
	// CrashLoopBackOff, restarted twice...), empty when nothing says so
	problem string
	// configMaps are the ConfigMaps the pod mounts (configMap volumes)
	configMaps []string
}

// brokenReasons are container waiting reasons that mean the pod will not
// run without someone changing something: its config, its image, the node.
var brokenReasons = map[string]bool{
	"CrashLoopBackOff":           true,
	"ImagePullBackOff":           true,
	"ErrImagePull":               true,
	"InvalidImageName":           true,
	"CreateContainerConfigError": true,
	"CreateContainerError":       true,
	"RunContainerError":          true,
}

// BrokenRestarts is the restart count from which a container of a new pod
// counts as unable to run, whatever it is waiting in.
const BrokenRestarts = 2

// podProblem describes why a pod cannot run, or returns "".
func podProblem(p *corev1.Pod) string {
	for _, cs := range p.Status.ContainerStatuses {
		waiting := cs.State.Waiting
		if (waiting == nil || !brokenReasons[waiting.Reason]) && cs.RestartCount < BrokenRestarts {
			continue
		}
		what := fmt.Sprintf("container %s restarted %d times", cs.Name, cs.RestartCount)
		if waiting != nil && waiting.Reason != "" {
			what = fmt.Sprintf("container %s is waiting in %s (restarted %d times)", cs.Name, waiting.Reason, cs.RestartCount)
			if waiting.Message != "" {
				what += ": " + waiting.Message
			}
		}
		if t := cs.LastTerminationState.Terminated; t != nil {
			last := fmt.Sprintf("exit code %d", t.ExitCode)
			if t.Reason != "" {
				last += ", " + t.Reason
			}
			if t.Message != "" {
				last += ": " + strings.TrimSpace(t.Message)
			}
			what += "; last error: " + last
		}
		return what
	}
	return ""
}

// Fleet is what we know of the DaemonSet's pods, per node. It keeps a few
// fields per pod, never the Pod objects.
type Fleet struct {
	selector string
	// owner is the DaemonSet's UID: a pod counts only if its controller
	// ownerReference names it. Labels alone also match a debug copy of a
	// kube-proxy pod, a sidecar that borrowed them, or the pods of another
	// DaemonSet with an overlapping selector: none of them may hold a node,
	// be deleted, or count as broken.
	owner types.UID
	// Generation is the template generation pods must be made from to count as updated.
	Generation int64
	// Skipped nodes are going away: their pods never block nor fail the rollout.
	Skipped map[string]string
	pods    map[types.UID]podState
	byNode  map[string]map[types.UID]bool
	// problems are the pods with a problem: Broken looks only at those,
	// not at every pod after every watch event (5000 nodes: 10000 pods
	// mid-rollout, tens of thousands of events)
	problems map[types.UID]bool
	// names interns the ConfigMap names pods mount: one string for
	// thousands of pods mounting the same one
	names map[string]string
	// expected are the nodes that had a pod when the fleet was observed.
	expected        map[string]bool
	resourceVersion string
	// exempt are live nodes whose pod was not Ready before the restart:
	// they neither hold the wait nor fail it
	exempt map[string]bool
	// kept up to date per event, over live expected nodes
	notDone map[string]bool
	unready map[string]bool
}

// Observe lists the DaemonSet's pods page by page, before the restart, so
// that every later change is seen by the watch that follows.
func (c Client) Observe(ctx context.Context, ds *appsv1.DaemonSet, skipped map[string]string) (*Fleet, error) {
	sel, err := metav1.LabelSelectorAsSelector(ds.Spec.Selector)
	if err != nil {
		return nil, fmt.Errorf("daemonset %s/%s selector: %w", c.Namespace, c.Name, err)
	}
	f := emptyFleet(sel.String(), ds.UID, skipped)
	f.expected, f.exempt = map[string]bool{}, map[string]bool{}
	if err := c.list(ctx, f, true); err != nil {
		return nil, err
	}
	f.SetGeneration(TemplateGeneration(ds))
	return f, nil
}

// Mounts lists the DaemonSet's pods page by page for what they mount
// (Fleet.MountedBy, Fleet.ConfigMaps), without a rollout to follow.
func (c Client) Mounts(ctx context.Context, ds *appsv1.DaemonSet) (*Fleet, error) {
	sel, err := metav1.LabelSelectorAsSelector(ds.Spec.Selector)
	if err != nil {
		return nil, fmt.Errorf("daemonset %s/%s selector: %w", c.Namespace, c.Name, err)
	}
	f := emptyFleet(sel.String(), ds.UID, map[string]string{})
	f.expected, f.exempt = map[string]bool{}, map[string]bool{}
	if err := c.list(ctx, f, false); err != nil {
		return nil, fmt.Errorf("%w, to see which ConfigMaps they mount", err)
	}
	return f, nil
}

// emptyFleet is a fleet of no pods yet, of the DaemonSet with UID owner;
// expected and exempt are the caller's.
func emptyFleet(selector string, owner types.UID, skipped map[string]string) *Fleet {
	return &Fleet{selector: selector, owner: owner, Skipped: skipped, pods: map[types.UID]podState{}, byNode: map[string]map[types.UID]bool{},
		problems: map[types.UID]bool{}, notDone: map[string]bool{}, unready: map[string]bool{}}
}

// Relist reads the pods afresh, after the rollout was followed without
// them (see FollowStatus): the nodes the fleet expects, skips and exempts
// stay as they were, and Track goes on from this list.
// A list that fails leaves the fleet as it was.
func (c Client) Relist(ctx context.Context, f *Fleet) error {
	fresh := emptyFleet(f.selector, f.owner, f.Skipped)
	fresh.Generation, fresh.expected, fresh.exempt = f.Generation, f.expected, f.exempt
	if err := c.list(ctx, fresh, false); err != nil {
		return err
	}
	f.pods, f.byNode, f.problems, f.resourceVersion = fresh.pods, fresh.byNode, fresh.problems, fresh.resourceVersion
	for n := range f.expected {
		f.touch(n)
	}
	return nil
}

// list reads the fleet's pods page by page; with expect, every node with a
// pod is one the rollout must reach.
func (c Client) list(ctx context.Context, f *Fleet, expect bool) error {
	err := c.pages(f).EachListItem(ctx, metav1.ListOptions{}, func(obj runtime.Object) error {
		if p, ok := obj.(*corev1.Pod); ok {
			if node := f.upsert(p); expect && node != "" {
				f.expected[node] = true
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("list pods of daemonset %s/%s: %w", c.Namespace, c.Name, err)
	}
	return nil
}

// pages lists the fleet's pods a page at a time (kube.Pager), keeping the
// list's resourceVersion in f.
func (c Client) pages(f *Fleet) *pager.ListPager {
	return kube.Pager(func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
		o.LabelSelector = f.selector
		list, err := c.Pods.List(ctx, o)
		if err == nil {
			f.resourceVersion = list.ResourceVersion
		}
		return list, err
	})
}

// SetGeneration sets the generation pods must come from (after the restart PATCH).
func (f *Fleet) SetGeneration(gen int64) {
	f.Generation = gen
	for n := range f.expected {
		f.touch(n)
	}
}

// Skip marks a node as going away.
func (f *Fleet) Skip(node, reason string) {
	f.Skipped[node] = reason
	f.touch(node)
}

// SkippedNodes are the nodes marked going away, with why, sorted by name.
func (f *Fleet) SkippedNodes() []nodes.Skipped {
	out := make([]nodes.Skipped, 0, len(f.Skipped))
	for name, reason := range f.Skipped {
		out = append(out, nodes.Skipped{Name: name, Reason: reason})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Missing returns the nodes of want (sorted) that have no pod of the
// DaemonSet and are not expected yet.
func (f *Fleet) Missing(want []string) []string {
	var out []string
	for _, n := range want {
		if !f.HasPod(n) && !f.expected[n] {
			out = append(out, n)
		}
	}
	return out
}

// HasPod reports whether a node has a pod of the DaemonSet.
func (f *Fleet) HasPod(node string) bool { return len(f.byNode[node]) > 0 }

// Expect adds nodes the rollout must reach although they had no pod when
// the fleet was observed: it waits for the DaemonSet controller to create
// theirs, from the new template.
func (f *Fleet) Expect(nodes []string) {
	for _, n := range nodes {
		f.expected[n] = true
		f.touch(n)
	}
}

// Exempt leaves live nodes out of the completion check (their pod was
// already not Ready before the restart: not the restart's doing).
func (f *Fleet) Exempt(nodes []string) {
	if f.exempt == nil {
		f.exempt = map[string]bool{}
	}
	for _, n := range nodes {
		f.exempt[n] = true
		f.touch(n)
	}
}

// Exempted reports whether a node was left out by Exempt.
func (f *Fleet) Exempted(node string) bool { return f.exempt[node] }

// touch recomputes one node's bookkeeping.
func (f *Fleet) touch(node string) {
	_, skip := f.Skipped[node]
	if !f.expected[node] || skip || f.exempt[node] {
		delete(f.notDone, node)
		delete(f.unready, node)
		return
	}
	setIf(f.notDone, node, !f.Done(node))
	setIf(f.unready, node, !f.Ready(node))
}

func setIf[K comparable](m map[K]bool, k K, v bool) {
	if v {
		m[k] = true
	} else {
		delete(m, k)
	}
}

// upsert records a pod of the DaemonSet and returns its node; a pod the
// DaemonSet does not control is left out (and dropped, if the DaemonSet
// released it), and returns "".
func (f *Fleet) upsert(p *corev1.Pod) string {
	if ref := metav1.GetControllerOf(p); ref == nil || ref.UID != f.owner {
		f.remove(p.UID)
		return ""
	}
	node := nodeOf(p)
	if node == "" {
		return ""
	}
	gen, _ := strconv.ParseInt(p.Labels[templateGenerationLabel], 10, 64)
	st := podState{name: p.Name, node: node, gen: gen, ready: podReady(p), deleting: p.DeletionTimestamp != nil, problem: podProblem(p)}
	if st.deleting {
		st.deleteBy = p.DeletionTimestamp.Time
	}
	for _, v := range p.Spec.Volumes {
		if v.ConfigMap != nil {
			st.configMaps = append(st.configMaps, f.intern(v.ConfigMap.Name))
		}
	}
	if old, ok := f.pods[p.UID]; ok && old.node != node {
		f.remove(p.UID)
	}
	f.pods[p.UID] = st
	if f.problems == nil {
		f.problems = map[types.UID]bool{}
	}
	setIf(f.problems, p.UID, st.problem != "")
	if f.byNode[node] == nil {
		f.byNode[node] = map[types.UID]bool{}
	}
	f.byNode[node][p.UID] = true
	f.touch(node)
	return node
}

// nodeOf is the node a DaemonSet pod is for: the one it is bound to or,
// not scheduled yet, the one the DaemonSet controller made it for, which
// it names only in the pod's required node affinity (a matchFields term
// on metadata.name), as the controller's own GetTargetNodeName reads it.
// "" if the pod names no one node.
func nodeOf(p *corev1.Pod) string {
	if p.Spec.NodeName != "" {
		return p.Spec.NodeName
	}
	a := p.Spec.Affinity
	if a == nil || a.NodeAffinity == nil || a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		return ""
	}
	for _, term := range a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
		for _, req := range term.MatchFields {
			if req.Key == metav1.ObjectNameField && req.Operator == corev1.NodeSelectorOpIn {
				if len(req.Values) != 1 {
					return ""
				}
				return req.Values[0]
			}
		}
	}
	return ""
}

func (f *Fleet) intern(name string) string {
	if f.names == nil {
		f.names = map[string]string{}
	}
	if n, ok := f.names[name]; ok {
		return n
	}
	f.names[name] = name
	return name
}

// MountedBy lists the pods that mount the ConfigMap name ("node/pod",
// sorted), as the fleet last saw them. current is false when one of them
// was being deleted then: it may be gone since, and only the API server
// knows whether it still is.
func (f *Fleet) MountedBy(name string) (by []string, current bool) {
	current = true
	for _, p := range f.pods {
		if slices.Contains(p.configMaps, name) {
			by = append(by, p.node+"/"+p.name)
			current = current && !p.deleting
		}
	}
	sort.Strings(by)
	return by, current
}

// UnmountGrace is how long after a pod's grace period ends WaitUnmounted
// still waits for the pod to go (the kubelet's confirmation).
const UnmountGrace = 10 * time.Second

// WaitUnmounted follows the fleet's pods from its last list until no pod
// mounts the ConfigMap name, while every pod that does is being deleted:
// one that is not deleting is not going away, and ends the wait at once.
// The wait ends, too, UnmountGrace after the last of their grace periods
// ends (a node gone leaves its pods terminating). It returns the pods that
// still mount name, as MountedBy does.
func (c Client) WaitUnmounted(ctx context.Context, f *Fleet, name string) ([]string, error) {
	by, current := f.MountedBy(name)
	if len(by) == 0 || current {
		return by, nil
	}
	var end time.Time
	for _, p := range f.pods {
		if p.deleting && slices.Contains(p.configMaps, name) && p.deleteBy.After(end) {
			end = p.deleteBy
		}
	}
	wait := end.Add(UnmountGrace).Sub(c.Clock.Now())
	if wait <= 0 {
		return by, nil
	}
	c.Log.Infof("waiting up to %s for %d terminating pod(s) to go: %s mount configmap %s/%s", wait.Round(time.Second), len(by), strings.Join(by, ", "), c.Namespace, name)
	w, err := c.watch(ctx, f)
	if err != nil {
		return by, err
	}
	defer w.Stop()
	timer := c.Clock.NewTimer(wait)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return by, ctx.Err()
		case <-timer.C():
			return by, nil
		case ev, ok := <-w.ResultChan():
			if !ok {
				return by, fmt.Errorf("watch pods of daemonset %s/%s: closed", c.Namespace, c.Name)
			}
			if err := c.apply(f, ev); err != nil {
				return by, err
			}
		}
		if by, current = f.MountedBy(name); len(by) == 0 || current {
			return by, nil
		}
	}
}

// Newest is the newest template generation of a pod of the fleet, as
// last seen (0 with no pod).
func (f *Fleet) Newest() int64 {
	var n int64
	for _, p := range f.pods {
		n = max(n, p.gen)
	}
	return n
}

// ConfigMaps are the ConfigMaps some pod of the fleet mounts, as last seen.
func (f *Fleet) ConfigMaps() map[string]bool {
	out := map[string]bool{}
	for _, p := range f.pods {
		for _, name := range p.configMaps {
			out[name] = true
		}
	}
	return out
}

func (f *Fleet) remove(uid types.UID) {
	if p, ok := f.pods[uid]; ok {
		delete(f.byNode[p.node], uid)
		delete(f.pods, uid)
		delete(f.problems, uid)
		f.touch(p.node)
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

// Done reports whether a node runs only updated pods and one of them is Ready.
func (f *Fleet) Done(node string) bool {
	ready := false
	for uid := range f.byNode[node] {
		p := f.pods[uid]
		if p.deleting {
			continue
		}
		if p.gen < f.Generation {
			return false
		}
		ready = ready || p.ready
	}
	return ready
}

// Ready reports whether a node has a Ready pod, of any template.
func (f *Fleet) Ready(node string) bool {
	for uid := range f.byNode[node] {
		if p := f.pods[uid]; p.ready && !p.deleting {
			return true
		}
	}
	return false
}

// OldPod returns the UID and name of a pod on node from an older template, if any.
func (f *Fleet) OldPod(node string) (types.UID, string, bool) {
	for uid := range f.byNode[node] {
		if p := f.pods[uid]; !p.deleting && p.gen < f.Generation {
			return uid, p.name, true
		}
	}
	return "", "", false
}

// Broken is a pod of the new template that cannot run.
type Broken struct {
	Node    string
	Pod     string
	Problem string
}

func (b Broken) String() string {
	return fmt.Sprintf("node %s, pod %s: %s", b.Node, b.Pod, b.Problem)
}

// Broken lists the pods of the new template on live, not exempted nodes
// that cannot run, sorted by node.
func (f *Fleet) Broken() []Broken {
	var out []Broken
	for uid := range f.problems {
		p := f.pods[uid]
		if p.problem == "" || p.deleting || p.gen < f.Generation || f.exempt[p.node] {
			continue
		}
		if _, skip := f.Skipped[p.node]; skip {
			continue
		}
		out = append(out, Broken{Node: p.node, Pod: p.name, Problem: p.problem})
	}
	sort.Slice(out, func(i, j int) bool {
		return out[i].Node < out[j].Node || out[i].Node == out[j].Node && out[i].Pod < out[j].Pod
	})
	return out
}

// NewPods lists the UIDs and names of pods made from the current template
// (or a later one), not being deleted.
func (f *Fleet) NewPods() map[types.UID]string {
	out := map[types.UID]string{}
	for uid, p := range f.pods {
		if !p.deleting && p.gen >= f.Generation {
			out[uid] = p.name
		}
	}
	return out
}

// Stuck counts the nodes with a pod not Ready that the DaemonSet
// controller will count against maxUnavailable although the rollout must
// not wait for them: nodes going away and exempted ones.
func (f *Fleet) Stuck() int {
	n := 0
	for node := range f.expected {
		_, skip := f.Skipped[node]
		if (skip || f.exempt[node]) && !f.Ready(node) {
			n++
		}
	}
	return n
}

// DoneLive are the first n live nodes (sorted) that run a Ready pod of the
// current template: a sample of the nodes the rollout finished.
func (f *Fleet) DoneLive(n int) []string {
	var out []string
	for _, node := range f.Live() {
		if len(out) == n {
			break
		}
		if f.Done(node) {
			out = append(out, node)
		}
	}
	return out
}

// Live lists the expected nodes that are not skipped, sorted.
func (f *Fleet) Live() []string {
	var out []string
	for n := range f.expected {
		if _, skip := f.Skipped[n]; !skip {
			out = append(out, n)
		}
	}
	sort.Strings(out)
	return out
}

// Pending lists the live nodes not done yet, sorted.
func (f *Fleet) Pending() []string { return sortedKeys(f.notDone) }

// PendingCount is len(Pending()), without the sort.
func (f *Fleet) PendingCount() int { return len(f.notDone) }

// UnreadyLive lists live nodes whose pod is not Ready (before a restart:
// problems the restart must not be blamed for).
func (f *Fleet) UnreadyLive() []string { return sortedKeys(f.unready) }

// Unavailable counts live nodes without a Ready pod right now.
func (f *Fleet) Unavailable() int { return len(f.unready) }

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// Status summarises the fleet like DaemonSet status, over nodes that had a pod.
func (f *Fleet) Status() Status {
	st := Status{Desired: int32(len(f.expected))}
	for n := range f.expected {
		updated := true
		for uid := range f.byNode[n] {
			if p := f.pods[uid]; !p.deleting && p.gen < f.Generation {
				updated = false
			}
		}
		if updated && len(f.byNode[n]) > 0 {
			st.Updated++
		}
		if f.Done(n) {
			st.Available++
		}
	}
	st.SkippedNodes = f.SkippedNodes()
	return st
}

// describe names pending nodes and their pods for an error message.
func (f *Fleet) describe(pending []string) string {
	var parts []string
	for i, n := range pending {
		if i == 10 {
			parts = append(parts, fmt.Sprintf("and %d more", len(pending)-10))
			break
		}
		var pods []string
		for uid := range f.byNode[n] {
			p := f.pods[uid]
			state := "not ready"
			switch {
			case p.deleting:
				state = "terminating"
			case p.gen < f.Generation:
				state = "old template"
			case p.ready:
				state = "ready"
			}
			pods = append(pods, p.name+" "+state)
		}
		if len(pods) == 0 {
			pods = append(pods, "no pod")
		}
		sort.Strings(pods)
		parts = append(parts, fmt.Sprintf("%s (%s)", n, strings.Join(pods, ", ")))
	}
	return strings.Join(parts, "; ")
}

// Track watches the pods from where Observe left off, calling step after
// every change until step reports done or fails. A node finishing (or
// skipped) is progress on t. With no progress for t's recheck period,
// pending nodes are looked at again: one that started to go away meanwhile
// is skipped instead of waited for. With none for the progress deadline,
// Track ends with ErrNoProgress.
func (c Client) Track(ctx context.Context, f *Fleet, policy nodes.Policy, t *Timers, step func() (bool, error)) error {
	if done, err := step(); done || err != nil {
		return err
	}
	w, err := c.watch(ctx, f)
	if err != nil {
		return err
	}
	defer w.Stop()
	pending := f.PendingCount()
	for {
		select {
		case <-ctx.Done():
			return f.NotBack(ctx.Err())
		case ev, ok := <-w.ResultChan():
			if !ok {
				return f.NotBack(fmt.Errorf("pod watch closed"))
			}
			if err := c.apply(f, ev); err != nil {
				return err
			}
		case <-t.tick():
			if t.Overdue() {
				return f.NotBack(ErrNoProgress)
			}
			if t.recheckDue() {
				c.recheck(ctx, f, f.Pending(), policy)
			}
		}
		if n := f.PendingCount(); n < pending {
			t.Progress()
			pending = n
		}
		if done, err := step(); done || err != nil {
			return err
		}
	}
}

// watch follows the fleet's pods from its last list or event.
func (c Client) watch(ctx context.Context, f *Fleet) (watch.Interface, error) {
	pods := c.Pods
	w, err := watchtools.NewRetryWatcherWithContext(ctx, f.resourceVersion, &cache.ListWatch{
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.LabelSelector = f.selector
			return pods.Watch(ctx, o)
		},
	})
	if err != nil {
		return nil, fmt.Errorf("watch pods of daemonset %s/%s: %w", c.Namespace, c.Name, err)
	}
	return w, nil
}

// apply records a pod event of watch in the fleet.
func (c Client) apply(f *Fleet, ev watch.Event) error {
	switch ev.Type {
	case watch.Error:
		return fmt.Errorf("watch pods of daemonset %s/%s: %v", c.Namespace, c.Name, apierrors.FromObject(ev.Object))
	case watch.Deleted:
		if p, ok := ev.Object.(*corev1.Pod); ok {
			f.remove(p.UID)
		}
	case watch.Added, watch.Modified:
		if p, ok := ev.Object.(*corev1.Pod); ok {
			f.upsert(p)
		}
	}
	return nil
}

// recheck classifies the pending nodes again (a few GETs, not a list).
func (c Client) recheck(ctx context.Context, f *Fleet, pending []string, policy nodes.Policy) {
	for i, name := range pending {
		if i == 50 {
			return
		}
		n, err := c.Nodes.Get(ctx, name, metav1.GetOptions{})
		reason := ""
		switch {
		case apierrors.IsNotFound(err):
			reason = nodes.Gone
		case err != nil:
			c.Log.Warnf("recheck node %s: %v", name, err)
			continue
		default:
			reason = nodes.Classify(n, c.Clock.Now(), policy)
		}
		if reason != nodes.Live {
			c.Log.Infof("node %s is %s now: no longer waiting for its kube-proxy pod", name, reason)
			f.Skip(name, reason)
		}
	}
}

// NotBack is the error of a wait that ended with nodes pending: it names
// them and their pods.
func (f *Fleet) NotBack(cause error) error {
	pending := f.Pending()
	hint := ""
	for _, n := range pending {
		if !f.HasPod(n) {
			// nothing to roll back or retry here: the pod was never made
			hint = "; a node with no pod is waiting for the DaemonSet controller to create one, which the DaemonSet's events explain (kubectl describe daemonset)"
			break
		}
	}
	return fmt.Errorf("kube-proxy pods on %d live node(s) did not come back: %s%s: %w", len(pending), f.describe(pending), hint, cause)
}

// RevisionConfigMaps lists the DaemonSet's ControllerRevisions, the
// templates `kubectl rollout undo` can restore, and returns every
// ConfigMap their pod templates mount: a ConfigMap one of them mounts is
// in use, since an undo to that revision starts pods that mount it. The
// DaemonSet controller keeps revisionHistoryLimit revisions (10 by
// default), so the set is bounded by the DaemonSet's own history.
func (c Client) RevisionConfigMaps(ctx context.Context, ds *appsv1.DaemonSet) (map[string]bool, error) {
	revs, err := c.revisions(ctx, ds)
	if err != nil {
		return nil, err
	}
	out := map[string]bool{}
	for _, r := range revs {
		for _, name := range templateConfigMaps(r.template) {
			out[name] = true
		}
	}
	return out, nil
}

// ownRevision is a ControllerRevision of a DaemonSet: its number and template.
type ownRevision struct {
	number   int64
	created  metav1.Time
	template *corev1.PodTemplateSpec
}

// revisions lists the ControllerRevisions ds controls (by its selector,
// then by owner), with their templates.
func (c Client) revisions(ctx context.Context, ds *appsv1.DaemonSet) ([]ownRevision, error) {
	if c.Revisions == nil {
		return nil, fmt.Errorf("list the revisions of daemonset %s/%s: no client for controllerrevisions", c.Namespace, c.Name)
	}
	opts := metav1.ListOptions{}
	if ds.Spec.Selector != nil {
		sel, err := metav1.LabelSelectorAsSelector(ds.Spec.Selector)
		if err != nil {
			return nil, fmt.Errorf("the selector of daemonset %s/%s: %w", c.Namespace, c.Name, err)
		}
		opts.LabelSelector = sel.String()
	}
	list, err := c.Revisions.List(ctx, opts)
	if err != nil {
		return nil, kube.Request{What: fmt.Sprintf("list the controllerrevisions of daemonset %s/%s", c.Namespace, c.Name),
			Needs: "list on controllerrevisions.apps"}.Explain(err)
	}
	var out []ownRevision
	for i := range list.Items {
		cr := &list.Items[i]
		if !ownedBy(cr.OwnerReferences, ds) {
			continue
		}
		tmpl, err := revisionTemplate(cr)
		if err != nil {
			return nil, fmt.Errorf("controllerrevision %s/%s of daemonset %s: %w", cr.Namespace, cr.Name, c.Name, err)
		}
		out = append(out, ownRevision{number: cr.Revision, created: cr.CreationTimestamp, template: tmpl})
	}
	return out, nil
}

// ownedBy: the revision's controller is ds (by UID; by kind and name where
// ds carries no UID, as in a fake clientset).
func ownedBy(refs []metav1.OwnerReference, ds *appsv1.DaemonSet) bool {
	for _, r := range refs {
		if r.Controller == nil || !*r.Controller {
			continue
		}
		if ds.UID != "" {
			if r.UID == ds.UID {
				return true
			}
			continue
		}
		if r.Kind == "DaemonSet" && r.Name == ds.Name {
			return true
		}
	}
	return false
}

// revisionTemplate decodes a DaemonSet revision's data: the patch the
// DaemonSet controller stores, {"spec":{"template":{...}}}.
func revisionTemplate(cr *appsv1.ControllerRevision) (*corev1.PodTemplateSpec, error) {
	raw := cr.Data.Raw
	if len(raw) == 0 && cr.Data.Object != nil {
		var err error
		if raw, err = json.Marshal(cr.Data.Object); err != nil {
			return nil, fmt.Errorf("encode its data: %w", err)
		}
	}
	var data struct {
		Spec struct {
			Template corev1.PodTemplateSpec `json:"template"`
		} `json:"spec"`
	}
	if len(raw) > 0 {
		if err := json.Unmarshal(raw, &data); err != nil {
			return nil, fmt.Errorf("decode its data as a daemonset template: %w", err)
		}
	}
	return &data.Spec.Template, nil
}

// templateConfigMaps are the ConfigMaps a pod template mounts, as volumes
// or projected sources.
func templateConfigMaps(t *corev1.PodTemplateSpec) []string {
	var out []string
	for _, v := range t.Spec.Volumes {
		if v.ConfigMap != nil {
			out = append(out, v.ConfigMap.Name)
		}
		if v.Projected != nil {
			for _, src := range v.Projected.Sources {
				if src.ConfigMap != nil {
					out = append(out, src.ConfigMap.Name)
				}
			}
		}
	}
	return out
}

// Sharing is another DaemonSet of the namespace whose pods use the same
// ConfigMaps (a Windows kube-proxy, a DaemonSet per pool): the ConfigMaps
// its template, its pods and its revisions mount.
type Sharing struct {
	DaemonSet string
	// Template: its pod template mounts these; Pods: its pods mount these,
	// by pod ("NODE/POD", as MountedBy names them); Revisions: its
	// revisions' templates
	Template  []string
	Pods      map[string][]string
	Revisions map[string]bool
}

// Sharing lists the other DaemonSets of the namespace (not ours) whose
// pod template or pods mount a ConfigMap that uses accepts, with what
// their revisions mount: their config is ours to keep too. Each one's pods
// are read whatever its template mounts: pods of an older template (an
// OnDelete DaemonSet, a rollout not finished) still mount what the
// template has moved off.
func (c Client) Sharing(ctx context.Context, ours *appsv1.DaemonSet, uses func(name string) bool) ([]Sharing, error) {
	list, err := c.DaemonSets.List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, kube.Request{What: fmt.Sprintf("list the daemonsets of namespace %s, to find the others that mount the config of daemonset %s", c.Namespace, c.Name),
			Needs: "list on daemonsets.apps"}.Explain(err)
	}
	var out []Sharing
	for i := range list.Items {
		ds := &list.Items[i]
		if ds.Name == ours.Name || (ours.UID != "" && ds.UID == ours.UID) {
			continue
		}
		var mounted []string
		for _, name := range templateConfigMaps(&ds.Spec.Template) {
			if uses(name) {
				mounted = append(mounted, name)
			}
		}
		s := Sharing{DaemonSet: ds.Name, Template: mounted, Pods: map[string][]string{}}
		pods, err := c.Mounts(ctx, ds)
		if err != nil {
			return nil, fmt.Errorf("daemonset %s/%s, whose pods may mount the config of daemonset %s/%s: %w", c.Namespace, ds.Name, c.Namespace, c.Name, err)
		}
		for name := range pods.ConfigMaps() {
			if uses(name) {
				by, _ := pods.MountedBy(name)
				s.Pods[name] = by
			}
		}
		if len(mounted) == 0 && len(s.Pods) == 0 {
			continue
		}
		if s.Revisions, err = c.RevisionConfigMaps(ctx, ds); err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, nil
}

// Uses is what mounts a DaemonSet's config and its copies (the ConfigMaps
// that of accepts): the DaemonSet's pods and the other DaemonSets of the
// namespace whose template or pods mount one of them (with their
// revisions), each read when first asked for, and once; and, read by
// InUse, the DaemonSet's own revisions. Whether a config may be written or
// deleted is decided from what the cluster holds, whoever put it there.
type Uses struct {
	c          Client
	ds         *appsv1.DaemonSet
	of         func(name string) bool
	pods       *Fleet
	others     []Sharing
	othersRead bool
}

// Uses starts from pods, the DaemonSet's pods as a rollout followed them
// to its end (nil: listed when first asked for).
func (c Client) Uses(ds *appsv1.DaemonSet, pods *Fleet, of func(name string) bool) *Uses {
	return &Uses{c: c, ds: ds, of: of, pods: pods}
}

// Pods are the DaemonSet's pods with the ConfigMaps they mount.
func (u *Uses) Pods(ctx context.Context) (*Fleet, error) {
	if u.pods == nil {
		pods, err := u.c.Mounts(ctx, u.ds)
		if err != nil {
			return nil, err
		}
		u.pods = pods
	}
	return u.pods, nil
}

// Others are the other DaemonSets that mount one of the ConfigMaps.
func (u *Uses) Others(ctx context.Context) ([]Sharing, error) {
	if !u.othersRead {
		others, err := u.c.Sharing(ctx, u.ds, u.of)
		if err != nil {
			return nil, err
		}
		u.others, u.othersRead = others, true
	}
	return u.others, nil
}

// OthersMounting names the other DaemonSets whose template mounts
// configmap name ("daemonset NAME") and their pods that do ("pod
// NODE/POD").
func (u *Uses) OthersMounting(ctx context.Context, name string) ([]string, error) {
	others, err := u.Others(ctx)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, sh := range others {
		if slices.Contains(sh.Template, name) {
			out = append(out, "daemonset "+sh.DaemonSet)
		}
		for _, pod := range sh.Pods[name] {
			out = append(out, "pod "+pod)
		}
	}
	return out, nil
}

// InUse is every ConfigMap something mounts or can mount again: what the
// DaemonSet's pods mount; of the ConfigMaps accepted, what the other
// DaemonSets' templates, pods and revisions mount; and what the
// DaemonSet's own revisions mount (`kubectl rollout undo --to-revision`
// starts pods that mount it). An error reading the DaemonSet's pods comes
// from Pods, read first.
func (u *Uses) InUse(ctx context.Context) (map[string]bool, error) {
	pods, err := u.Pods(ctx)
	if err != nil {
		return nil, err
	}
	inUse := pods.ConfigMaps()
	others, err := u.Others(ctx)
	if err != nil {
		return nil, err
	}
	for _, sh := range others {
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
	revs, err := u.c.RevisionConfigMaps(ctx, u.ds)
	if err != nil {
		return nil, err
	}
	for name := range revs {
		inUse[name] = true
	}
	return inUse, nil
}

// Revision is a template of a DaemonSet's history: its revision number
// and a container's image.
type Revision struct {
	Number int64
	Image  string
}

// FirstMounting is the oldest revision of the DaemonSet's history (by
// creation: the DaemonSet controller renumbers a revision a rollback
// goes back to) whose template mounts configmap cm in volume: the
// template the change onto cm made, with the image it ran then. nil when
// the history holds none (revisionHistoryLimit 0, a history pruned).
func (c Client) FirstMounting(ctx context.Context, ds *appsv1.DaemonSet, container, volume, cm string) (*Revision, error) {
	revs, err := c.revisions(ctx, ds)
	if err != nil {
		return nil, err
	}
	var first *ownRevision
	for i := range revs {
		r := &revs[i]
		old := &appsv1.DaemonSet{Spec: appsv1.DaemonSetSpec{Template: *r.template}}
		if ConfigVolumeOf(old, volume) != cm {
			continue
		}
		if first == nil || r.created.Before(&first.created) || (r.created.Equal(&first.created) && r.number < first.number) {
			first = r
		}
	}
	if first == nil {
		return nil, nil
	}
	old := &appsv1.DaemonSet{Spec: appsv1.DaemonSetSpec{Template: *first.template}}
	return &Revision{Number: first.number, Image: ContainerImage(old, container)}, nil
}

// Mounting names the other DaemonSets of the namespace (not ours) whose
// pod template mounts configmap name: one LIST.
func (c Client) Mounting(ctx context.Context, ours *appsv1.DaemonSet, name string) ([]string, error) {
	list, err := c.DaemonSets.List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list the daemonsets of namespace %s, to find the others that mount configmap %s: %w", c.Namespace, name, err)
	}
	var out []string
	for i := range list.Items {
		ds := &list.Items[i]
		if ds.Name == ours.Name || (ours.UID != "" && ds.UID == ours.UID) {
			continue
		}
		for _, cm := range templateConfigMaps(&ds.Spec.Template) {
			if cm == name {
				out = append(out, ds.Name)
				break
			}
		}
	}
	return out, nil
}

// ConfigVolumeOf is the ConfigMap the template's volume name mounts ("" if
// it mounts none).
func ConfigVolumeOf(ds *appsv1.DaemonSet, name string) string {
	for _, v := range ds.Spec.Template.Spec.Volumes {
		if v.Name == name && v.ConfigMap != nil {
			return v.ConfigMap.Name
		}
	}
	return ""
}

// ContainerImage is the image of the template's container name ("" if
// there is no such container).
func ContainerImage(ds *appsv1.DaemonSet, name string) string {
	for _, c := range ds.Spec.Template.Spec.Containers {
		if c.Name == name {
			return c.Image
		}
	}
	return ""
}
