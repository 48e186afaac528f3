package nodes

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	clocktesting "k8s.io/utils/clock/testing"
)

func node(name string, mod func(n *corev1.Node)) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{
		{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionFalse},
		{Type: corev1.NodeReady, Status: corev1.ConditionTrue},
	}}}
	if mod != nil {
		mod(n)
	}
	return n
}

func ready(status corev1.ConditionStatus, since time.Time) func(*corev1.Node) {
	return func(n *corev1.Node) {
		n.Status.Conditions[1].Status = status
		n.Status.Conditions[1].LastTransitionTime = metav1.NewTime(since)
	}
}

func TestClassify(t *testing.T) {
	clock := clocktesting.NewFakeClock(time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC))
	now := clock.Now()
	deleted := metav1.NewTime(now.Add(-time.Minute))
	cases := []struct {
		name   string
		node   *corev1.Node
		policy Policy
		want   string
	}{
		{"ready", node("a", nil), DefaultPolicy, Live},
		{"autoscaler taint", node("a", func(n *corev1.Node) {
			n.Spec.Taints = []corev1.Taint{{Key: ToBeDeletedTaint, Value: "1700000000", Effect: corev1.TaintEffectNoSchedule}}
		}), DefaultPolicy, ToBeDeleted},
		{"other taint stays live", node("a", func(n *corev1.Node) {
			n.Spec.Taints = []corev1.Taint{{Key: "dedicated", Effect: corev1.TaintEffectNoSchedule}}
		}), DefaultPolicy, Live},
		{"deletion timestamp wins", node("a", func(n *corev1.Node) {
			n.DeletionTimestamp = &deleted
			n.Spec.Taints = []corev1.Taint{{Key: ToBeDeletedTaint}}
		}), DefaultPolicy, Deleting},
		{"ready unknown", node("a", ready(corev1.ConditionUnknown, now)), DefaultPolicy, Unknown},
		{"not ready briefly stays live", node("a", ready(corev1.ConditionFalse, now.Add(-14*time.Minute))), DefaultPolicy, Live},
		{"not ready past tolerance", node("a", ready(corev1.ConditionFalse, now.Add(-15*time.Minute))), DefaultPolicy, NotReady},
		{"tolerance is configurable", node("a", ready(corev1.ConditionFalse, now.Add(-2*time.Minute))), Policy{NotReadyTolerance: time.Minute}, NotReady},
		{"cordoned stays live by default", node("a", func(n *corev1.Node) { n.Spec.Unschedulable = true }), DefaultPolicy, Live},
		{"cordoned skipped when asked", node("a", func(n *corev1.Node) { n.Spec.Unschedulable = true }), Policy{NotReadyTolerance: time.Hour, SkipUnschedulable: true}, Unschedulable},
		{"no ready condition yet is live", &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "a"}}, DefaultPolicy, Live},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, Classify(tc.node, now, tc.policy))
		})
	}
	// time passing turns a NotReady node into a skipped one
	n := node("a", ready(corev1.ConditionFalse, now))
	assert.Equal(t, Live, Classify(n, clock.Now(), DefaultPolicy))
	clock.Step(16 * time.Minute)
	assert.Equal(t, NotReady, Classify(n, clock.Now(), DefaultPolicy))
}

func TestSurveyPagesAndKeepsOnlySkipped(t *testing.T) {
	var objs []runtime.Object
	for i := 0; i < 1200; i++ {
		var mod func(*corev1.Node)
		if i%400 == 7 {
			mod = func(n *corev1.Node) { n.Spec.Taints = []corev1.Taint{{Key: ToBeDeletedTaint}} }
		}
		objs = append(objs, node(fmt.Sprintf("node-%04d", i), mod))
	}
	client := fake.NewClientset(objs...)
	skipped, _, err := Survey(context.Background(), client.CoreV1().Nodes(), time.Now(), DefaultPolicy, nil, nil)
	require.NoError(t, err)
	assert.Equal(t, map[string]string{"node-0007": ToBeDeleted, "node-0407": ToBeDeleted, "node-0807": ToBeDeleted}, skipped)
}

// Runs decides as the DaemonSet controller does: node selector and
// required affinity, then taints, with the tolerations the controller adds
// to every daemon pod (network-unavailable only for a host-network pod).
func TestRuns(t *testing.T) {
	linux := func(n *corev1.Node) { n.Labels = map[string]string{"kubernetes.io/os": "linux"} }
	taint := func(key string, effect corev1.TaintEffect) func(*corev1.Node) {
		return func(n *corev1.Node) {
			linux(n)
			n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: key, Effect: effect})
		}
	}
	spec := corev1.PodSpec{NodeSelector: map[string]string{"kubernetes.io/os": "linux"}}
	hostNet := spec
	hostNet.HostNetwork = true
	tolerant := spec
	tolerant.Tolerations = []corev1.Toleration{{Operator: corev1.TolerationOpExists}}
	cases := []struct {
		name string
		spec corev1.PodSpec
		node *corev1.Node
		runs bool
	}{
		{"selected", spec, node("a", linux), true},
		{"not selected", spec, node("a", nil), false},
		{"affinity excludes it", corev1.PodSpec{Affinity: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
			RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
				MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "pool", Operator: corev1.NodeSelectorOpNotIn, Values: []string{"gpu"}}}}}}}}},
			node("a", func(n *corev1.Node) { n.Labels = map[string]string{"pool": "gpu"} }), false},
		{"untolerated NoSchedule taint", spec, node("a", taint("dedicated", corev1.TaintEffectNoSchedule)), false},
		{"PreferNoSchedule does not count", spec, node("a", taint("dedicated", corev1.TaintEffectPreferNoSchedule)), true},
		{"cordoned: the controller tolerates it", spec, node("a", taint(corev1.TaintNodeUnschedulable, corev1.TaintEffectNoSchedule)), true},
		{"not ready: the controller tolerates it", spec, node("a", taint(corev1.TaintNodeNotReady, corev1.TaintEffectNoExecute)), true},
		{"network unavailable, pod network", spec, node("a", taint(corev1.TaintNodeNetworkUnavailable, corev1.TaintEffectNoSchedule)), false},
		{"network unavailable, host network", hostNet, node("a", taint(corev1.TaintNodeNetworkUnavailable, corev1.TaintEffectNoSchedule)), true},
		{"kube-proxy tolerates every taint", tolerant, node("a", taint("dedicated", corev1.TaintEffectNoExecute)), true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			assert.Equal(t, c.runs, Runs(&c.spec)(c.node))
		})
	}
}

// Survey returns the live nodes the pod belongs on, in the same pages
// as the skipped ones: neither a node going away nor one the pod does not
// select is among them.
func TestSurveyListsLiveNodesThePodBelongsOn(t *testing.T) {
	linux := func(n *corev1.Node) { n.Labels = map[string]string{"kubernetes.io/os": "linux"} }
	client := fake.NewClientset(
		node("b", func(n *corev1.Node) { linux(n); n.Labels["pool"] = "x" }),
		node("a", linux),
		node("windows", nil),
		node("leaving", func(n *corev1.Node) {
			linux(n)
			n.Spec.Taints = []corev1.Taint{{Key: ToBeDeletedTaint, Effect: corev1.TaintEffectNoSchedule}}
		}),
	)
	spec := &corev1.PodSpec{NodeSelector: map[string]string{"kubernetes.io/os": "linux"}, Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}}}
	skipped, live, err := Survey(context.Background(), client.CoreV1().Nodes(), time.Now(), DefaultPolicy, spec, nil)
	require.NoError(t, err)
	assert.Equal(t, map[string]string{"leaving": ToBeDeleted}, skipped)
	assert.Equal(t, []string{"a", "b"}, live)
	_, live, err = Survey(context.Background(), client.CoreV1().Nodes(), time.Now(), DefaultPolicy, nil, nil)
	require.NoError(t, err)
	assert.Empty(t, live, "no pod spec, no live node named")

	// the template a restart moves to keeps off node b (a split's
	// affinity): b has no pod to wait for; a node going away stays so
	next := spec.DeepCopy()
	next.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
		NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "pool", Operator: corev1.NodeSelectorOpDoesNotExist}}}},
	}}}
	skipped, live, err = Survey(context.Background(), client.CoreV1().Nodes(), time.Now(), DefaultPolicy, spec, next)
	require.NoError(t, err)
	assert.Equal(t, map[string]string{"leaving": ToBeDeleted, "b": OffTemplate}, skipped)
	assert.Equal(t, []string{"a"}, live)
}

// Kernels names the kernel of every node the pod belongs on, a node going
// away included, and of no other.
func TestKernelsOfTheNodesThePodBelongsOn(t *testing.T) {
	linux := func(kernel string) func(*corev1.Node) {
		return func(n *corev1.Node) {
			n.Labels = map[string]string{"kubernetes.io/os": "linux"}
			n.Status.NodeInfo.KernelVersion = kernel
		}
	}
	client := fake.NewClientset(
		node("a", linux("6.8.0-49-generic")),
		node("old", linux("4.18.0-553.el8_10.x86_64")),
		node("windows", func(n *corev1.Node) { n.Status.NodeInfo.KernelVersion = "10.0.20348.2762" }),
		node("leaving", func(n *corev1.Node) {
			linux("5.10.0")(n)
			n.Spec.Taints = []corev1.Taint{{Key: ToBeDeletedTaint, Effect: corev1.TaintEffectNoSchedule}}
		}),
	)
	spec := &corev1.PodSpec{NodeSelector: map[string]string{"kubernetes.io/os": "linux"}, Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}}}
	kernels, err := Kernels(context.Background(), client.CoreV1().Nodes(), spec)
	require.NoError(t, err)
	assert.Equal(t, map[string]string{"a": "6.8.0-49-generic", "old": "4.18.0-553.el8_10.x86_64", "leaving": "5.10.0"}, kernels)
}
