package rollout

import (
	"slices"

	corev1 "k8s.io/api/core/v1"
)

// Pools (see internal/pools): a node labelled PoolLabel=NAME runs pool
// NAME's kube-proxy, not kubeadm's. kubeadm's DaemonSet keeps off every
// pool's nodes by a required node affinity on that label (DoesNotExist),
// and a pool's DaemonSet runs on its own nodes only (In [NAME]): moving a
// node is labelling it, and never puts two kube-proxies on one node.

// PoolLabel on a node names the pool whose kube-proxy runs there.
const PoolLabel = "kube-proxy-sync.io/pool"

// MovingLabel on a pool's node keeps the pool's kube-proxy off it too: the
// node is between two DaemonSets, with neither's pod (see internal/pools).
const MovingLabel = "kube-proxy-sync.io/pool-moving"

// offPools is the requirement that keeps a DaemonSet off every pool's nodes.
var offPools = corev1.NodeSelectorRequirement{Key: PoolLabel, Operator: corev1.NodeSelectorOpDoesNotExist}

// KeepsOffPools reports whether spec's pods run on no pool's node: every
// term of its required node affinity (they are ORed) requires PoolLabel
// absent.
func KeepsOffPools(spec *corev1.PodSpec) bool {
	terms := requiredTerms(spec)
	if len(terms) == 0 {
		return false
	}
	for _, term := range terms {
		if !slices.ContainsFunc(term.MatchExpressions, isOffPools) {
			return false
		}
	}
	return true
}

func isOffPools(r corev1.NodeSelectorRequirement) bool {
	return r.Key == PoolLabel && r.Operator == corev1.NodeSelectorOpDoesNotExist
}

// KeepOffPools makes spec's pods keep off every pool's node (KeepsOffPools).
func KeepOffPools(spec *corev1.PodSpec) {
	if KeepsOffPools(spec) {
		return
	}
	ns := required(spec)
	if len(ns.NodeSelectorTerms) == 0 {
		ns.NodeSelectorTerms = []corev1.NodeSelectorTerm{{}}
	}
	for i := range ns.NodeSelectorTerms {
		if t := &ns.NodeSelectorTerms[i]; !slices.ContainsFunc(t.MatchExpressions, isOffPools) {
			t.MatchExpressions = append(t.MatchExpressions, offPools)
		}
	}
}

// OnPool makes spec's pods run on pool name's nodes only, and not while a
// node is moving (MovingLabel): where a term keeps off every pool, it
// requires this one instead.
func OnPool(spec *corev1.PodSpec, name string) {
	KeepOffPools(spec)
	ns := required(spec)
	for i := range ns.NodeSelectorTerms {
		t := &ns.NodeSelectorTerms[i]
		for j, r := range t.MatchExpressions {
			if isOffPools(r) {
				t.MatchExpressions[j] = corev1.NodeSelectorRequirement{Key: PoolLabel, Operator: corev1.NodeSelectorOpIn, Values: []string{name}}
				t.MatchExpressions = append(t.MatchExpressions, corev1.NodeSelectorRequirement{Key: MovingLabel, Operator: corev1.NodeSelectorOpDoesNotExist})
				break
			}
		}
	}
}

func requiredTerms(spec *corev1.PodSpec) []corev1.NodeSelectorTerm {
	a := spec.Affinity
	if a == nil || a.NodeAffinity == nil || a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		return nil
	}
	return a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
}

// required is spec's required node affinity, made when missing.
func required(spec *corev1.PodSpec) *corev1.NodeSelector {
	if spec.Affinity == nil {
		spec.Affinity = &corev1.Affinity{}
	}
	if spec.Affinity.NodeAffinity == nil {
		spec.Affinity.NodeAffinity = &corev1.NodeAffinity{}
	}
	if spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution = &corev1.NodeSelector{}
	}
	return spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution
}
