// Package nodes tells which nodes are live and which are going away, so a
// rollout neither waits for nor fails on pods of nodes that are leaving.
package nodes

import (
	"context"
	"fmt"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/pager"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"

	"github.com/kube-proxy-sync/kube-proxy-sync/internal/kube"
)

// Reasons a node is skipped. Live nodes have none.
const (
	Live          = ""
	ToBeDeleted   = "to-be-deleted" // cluster-autoscaler is about to delete it
	Deleting      = "deleting"      // has a deletionTimestamp
	Unknown       = "unknown"       // Ready=Unknown: the kubelet stopped posting status
	NotReady      = "not-ready"     // Ready=False for longer than the tolerance
	Unschedulable = "unschedulable" // cordoned, when the policy skips those
	Gone          = "deleted"       // the node object disappeared during the run
	// OffTemplate: the new pod template does not run there (its node
	// affinity, node selector or tolerations; a pool's split), so the
	// DaemonSet controller deletes the node's pod and makes none.
	OffTemplate = "off-new-template"
)

// ToBeDeletedTaint is cluster-autoscaler's taint on nodes it will delete.
const ToBeDeletedTaint = "ToBeDeletedByClusterAutoscaler"

// Policy tunes the classification.
type Policy struct {
	// NotReadyTolerance is how long Ready=False may last before a node is
	// treated as going away (a kubelet restart is brief).
	NotReadyTolerance time.Duration
	// SkipUnschedulable skips cordoned nodes too.
	SkipUnschedulable bool
}

// DefaultPolicy: 15 minutes of NotReady, cordoned nodes stay live.
var DefaultPolicy = Policy{NotReadyTolerance: 15 * time.Minute}

// Classify returns why a node is skipped, or Live.
func Classify(n *corev1.Node, now time.Time, p Policy) string {
	if n.DeletionTimestamp != nil {
		return Deleting
	}
	for _, t := range n.Spec.Taints {
		if t.Key == ToBeDeletedTaint {
			return ToBeDeleted
		}
	}
	for _, c := range n.Status.Conditions {
		if c.Type != corev1.NodeReady {
			continue
		}
		switch c.Status {
		case corev1.ConditionUnknown:
			return Unknown
		case corev1.ConditionFalse:
			if now.Sub(c.LastTransitionTime.Time) >= p.NotReadyTolerance {
				return NotReady
			}
		}
	}
	if p.SkipUnschedulable && n.Spec.Unschedulable {
		return Unschedulable
	}
	return Live
}

// Skipped is a node left out of the rollout, as reported in the facts.
type Skipped struct {
	Name   string `json:"name"`
	Reason string `json:"reason"`
}

// Survey lists all nodes page by page and returns the skipped ones (name ->
// reason) and, sorted, the live nodes a pod of spec belongs on as the
// DaemonSet controller decides it (see Runs); a nil spec returns no live
// node. With next, the template a restart moves to, a live node of spec
// that next does not run on is skipped as OffTemplate: the restart has no
// pod to wait for there. A 5000-node cluster costs a few list pages, and
// no Node object outlives its page.
func Survey(ctx context.Context, api kube.NodeReader, now time.Time, p Policy, spec, next *corev1.PodSpec) (skipped map[string]string, live []string, err error) {
	skipped = map[string]string{}
	var runs func(*corev1.Node) bool
	if spec != nil {
		runs = Runs(spec)
	}
	if next != nil && runs != nil {
		runsNow, runsNext := runs, Runs(next)
		runs = func(n *corev1.Node) bool {
			if runsNow(n) && !runsNext(n) {
				skipped[n.Name] = OffTemplate
				return false
			}
			return runsNow(n)
		}
	}
	err = pages(api).EachListItem(ctx, metav1.ListOptions{}, func(obj runtime.Object) error {
		n, ok := obj.(*corev1.Node)
		if !ok {
			return nil
		}
		if r := Classify(n, now, p); r != Live {
			skipped[n.Name] = r
		} else if runs != nil && runs(n) {
			live = append(live, n.Name)
		}
		return nil
	})
	if err != nil {
		return nil, nil, fmt.Errorf("list nodes: %w (the kubeconfig user needs list on nodes, see roles/kpsync/files/rbac.yaml)", err)
	}
	sort.Strings(live)
	return skipped, live, nil
}

// daemonTolerations are the tolerations the DaemonSet controller adds to
// every pod it creates, whatever the template says.
var daemonTolerations = []corev1.Toleration{
	{Key: corev1.TaintNodeNotReady, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute},
	{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute},
	{Key: corev1.TaintNodeDiskPressure, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
	{Key: corev1.TaintNodeMemoryPressure, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
	{Key: corev1.TaintNodePIDPressure, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
	{Key: corev1.TaintNodeUnschedulable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
}

// Runs says whether the DaemonSet controller puts a pod of spec on a node:
// the pod's required node affinity and node selector match it, and every
// NoSchedule or NoExecute taint is tolerated, with the tolerations the
// controller adds (and, for a host-network pod, network-unavailable).
// These are the controller's own rules, from the scheduling helpers it
// uses.
func Runs(spec *corev1.PodSpec) func(*corev1.Node) bool {
	pod := &corev1.Pod{Spec: *spec.DeepCopy()}
	pod.Spec.Tolerations = append(pod.Spec.Tolerations, daemonTolerations...)
	if pod.Spec.HostNetwork {
		pod.Spec.Tolerations = append(pod.Spec.Tolerations, corev1.Toleration{Key: corev1.TaintNodeNetworkUnavailable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule})
	}
	affinity := nodeaffinity.GetRequiredNodeAffinity(pod)
	scheduling := func(t *corev1.Taint) bool {
		return t.Effect == corev1.TaintEffectNoSchedule || t.Effect == corev1.TaintEffectNoExecute
	}
	return func(n *corev1.Node) bool {
		if ok, err := affinity.Match(n); !ok || err != nil {
			return false
		}
		_, untolerated := corev1helpers.FindMatchingUntoleratedTaint(n.Spec.Taints, pod.Spec.Tolerations, scheduling)
		return !untolerated
	}
}

// Labels lists all nodes page by page and returns each node's value of the
// label key (nodes without it are left out): what the zonal strategy
// groups nodes by. It costs one LIST per 500 nodes.
func Labels(ctx context.Context, api kube.NodeReader, key string) (map[string]string, error) {
	out := map[string]string{}
	err := pages(api).EachListItem(ctx, metav1.ListOptions{}, func(obj runtime.Object) error {
		if n, ok := obj.(*corev1.Node); ok {
			if v, ok := n.Labels[key]; ok {
				out[n.Name] = v
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list nodes for their %s label: %w (the kubeconfig user needs list on nodes, see roles/kpsync/files/rbac.yaml)", key, err)
	}
	return out, nil
}

// Kernels lists all nodes page by page and returns the kernel version
// (status.nodeInfo.kernelVersion, what uname -r says there) of every node
// a pod of spec belongs on (see Runs), live or not: a node that comes back
// starts the same kube-proxy.
func Kernels(ctx context.Context, api kube.NodeReader, spec *corev1.PodSpec) (map[string]string, error) {
	runs := Runs(spec)
	out := map[string]string{}
	err := pages(api).EachListItem(ctx, metav1.ListOptions{}, func(obj runtime.Object) error {
		if n, ok := obj.(*corev1.Node); ok && runs(n) {
			out[n.Name] = n.Status.NodeInfo.KernelVersion
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list nodes for their kernel versions: %w (the kubeconfig user needs list on nodes, see roles/kpsync/files/rbac.yaml)", err)
	}
	return out, nil
}

// pages lists the nodes a page at a time (kube.Pager).
func pages(api kube.NodeReader) *pager.ListPager {
	return kube.Pager(func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
		return api.List(ctx, o)
	})
}
