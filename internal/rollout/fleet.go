package rollout

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/pager"

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

// Newest is the newest template generation of a pod of the fleet, as
// last seen (0 with no pod).
func (f *Fleet) Newest() int64 {
	var n int64
	for _, p := range f.pods {
		n = max(n, p.gen)
	}
	return n
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
