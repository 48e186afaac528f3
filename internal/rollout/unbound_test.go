package rollout

import (
	"testing"

	"github.com/stretchr/testify/assert"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kube-proxy-sync/kube-proxy-sync/internal/nodes"
)

// unbound is the DaemonSet's pod made for node, not bound to it yet: the
// DaemonSet controller names the node only in the pod's node affinity.
func unbound(uid, node, gen string) *corev1.Pod {
	p := pod(uid, "", gen, false)
	p.Status.Phase = corev1.PodPending
	p.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
		RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
			MatchFields: []corev1.NodeSelectorRequirement{{Key: metav1.ObjectNameField, Operator: corev1.NodeSelectorOpIn, Values: []string{node}}},
		}}},
	}}
	return p
}

// A DaemonSet pod not bound to its node yet belongs to the node its
// affinity names, as the DaemonSet controller counts it: on a node going
// away it is stuck (the maxUnavailable raise covers it), on a live node it
// is waited for like any pod not Ready.
func TestFleetAttributesUnboundPodsByNodeAffinity(t *testing.T) {
	f := observe(t, map[string]string{"leaving": nodes.ToBeDeleted},
		pod("a1", "a", "1", true), unbound("l1", "leaving", "1"), unbound("n1", "new", "1"))
	assert.Equal(t, 1, f.Stuck(), "the pod on the leaving node holds one of the controller's maxUnavailable")
	assert.Equal(t, []string{"a", "new"}, f.Live())
	assert.Equal(t, []string{"new"}, f.UnreadyLive())
	assert.Equal(t, int32(3), f.Status().Desired)

	// the pod for the new node is scheduled: bound, then Ready
	bound := unbound("n1", "new", "1")
	bound.Spec.NodeName = "new"
	f.upsert(bound)
	bound = pod("n1", "new", "1", true)
	bound.Spec.Affinity = unbound("n1", "new", "1").Spec.Affinity
	f.upsert(bound)
	assert.Empty(t, f.UnreadyLive())
	assert.Empty(t, f.Pending())
}
func TestNodeOf(t *testing.T) {
	terms := func(ts ...corev1.NodeSelectorTerm) *corev1.Pod {
		p := pod("x", "", "1", false)
		p.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
			RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: ts}}}
		return p
	}
	field := func(key string, op corev1.NodeSelectorOperator, values ...string) corev1.NodeSelectorTerm {
		return corev1.NodeSelectorTerm{MatchFields: []corev1.NodeSelectorRequirement{{Key: key, Operator: op, Values: values}}}
	}
	label := corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "kubernetes.io/hostname", Operator: corev1.NodeSelectorOpIn, Values: []string{"h"}}}}
	cases := []struct {
		name string
		pod  *corev1.Pod
		want string
	}{
		{"bound", pod("x", "a", "1", true), "a"},
		{"bound wins over the affinity", func() *corev1.Pod { p := unbound("x", "b", "1"); p.Spec.NodeName = "a"; return p }(), "a"},
		{"unbound, the DaemonSet controller's affinity", unbound("x", "b", "1"), "b"},
		{"the first term naming a node", terms(label, field("metadata.name", corev1.NodeSelectorOpIn, "c")), "c"},
		{"no affinity", pod("x", "", "1", false), ""},
		{"no terms", terms(), ""},
		{"a label, not the name", terms(label), ""},
		{"not In", terms(field("metadata.name", corev1.NodeSelectorOpNotIn, "c")), ""},
		{"two names: no one node", terms(field("metadata.name", corev1.NodeSelectorOpIn, "c", "d")), ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, nodeOf(tc.pod))
		})
	}
}
