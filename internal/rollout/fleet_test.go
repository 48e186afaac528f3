package rollout

import (
	"context"
	"fmt"
	"testing"

	"github.com/sirupsen/logrus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kube-proxy-sync/kube-proxy-sync/internal/kube/kubefake"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/nodes"
)

// dsUID is the UID of the DaemonSet the fixtures' pods belong to.
const dsUID = types.UID("0d5e7c1a-kube-proxy")

// controllerRef is the controller ownerReference of the DaemonSet
// kube-system/kube-proxy with this UID.
func controllerRef(uid types.UID) metav1.OwnerReference {
	return *metav1.NewControllerRef(&appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: "kube-proxy", UID: uid}}, appsv1.SchemeGroupVersion.WithKind("DaemonSet"))
}

// pod is a pod of the DaemonSet dsUID on node, of template generation gen.
func pod(uid, node, gen string, ready bool) *corev1.Pod {
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{UID: types.UID(uid), Name: "kube-proxy-" + uid, Labels: map[string]string{templateGenerationLabel: gen},
			OwnerReferences: []metav1.OwnerReference{controllerRef(dsUID)}},
		Spec:   corev1.PodSpec{NodeName: node},
		Status: corev1.PodStatus{Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: status}}},
	}
}

func newFleet(skipped map[string]string, pods ...*corev1.Pod) *Fleet {
	f := emptyFleet("", dsUID, skipped)
	f.expected = map[string]bool{}
	for _, p := range pods {
		if n := f.upsert(p); n != "" {
			f.expected[n] = true
		}
	}
	return f
}

func TestFleetBookkeeping(t *testing.T) {
	f := newFleet(map[string]string{"c": nodes.ToBeDeleted},
		pod("a1", "a", "1", true), pod("b1", "b", "1", false), pod("c1", "c", "1", false))
	f.SetGeneration(1)
	assert.Equal(t, []string{"a", "b"}, f.Live())
	assert.Equal(t, []string{"b"}, f.Pending(), "b's pod is not Ready; c is skipped")
	assert.Equal(t, []string{"b"}, f.UnreadyLive())

	f.SetGeneration(2) // the restart
	assert.Equal(t, []string{"a", "b"}, f.Pending())
	assert.Equal(t, 1, f.Unavailable())
	uid, name, ok := f.OldPod("a")
	assert.True(t, ok)
	assert.Equal(t, types.UID("a1"), uid)
	assert.Equal(t, "kube-proxy-a1", name)

	// a's pod replaced: old one terminating, new one starting, then Ready
	old := pod("a1", "a", "1", true)
	old.DeletionTimestamp = &metav1.Time{}
	f.upsert(old)
	f.upsert(pod("a2", "a", "2", false))
	assert.False(t, f.Done("a"))
	assert.Equal(t, 2, f.Unavailable())
	f.remove("a1")
	f.upsert(pod("a2", "a", "2", true))
	assert.True(t, f.Done("a"))
	assert.Equal(t, []string{"b"}, f.Pending())

	// b starts going away mid-rollout
	f.Skip("b", nodes.Unknown)
	assert.Empty(t, f.Pending())
	assert.Zero(t, f.Unavailable())
	st := f.Status()
	assert.Equal(t, int32(3), st.Desired)
	assert.Equal(t, int32(1), st.Updated)
	assert.Equal(t, int32(1), st.Available)
	assert.Equal(t, []nodes.Skipped{{Name: "b", Reason: nodes.Unknown}, {Name: "c", Reason: nodes.ToBeDeleted}}, st.SkippedNodes)
	assert.Contains(t, f.describe([]string{"c"}), "kube-proxy-c1 old template")
}

func TestBrokenPods(t *testing.T) {
	waiting := func(p *corev1.Pod, reason string, restarts int32) *corev1.Pod {
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{
			Name: "kube-proxy", RestartCount: restarts,
			State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: "back-off 10s"}},
			LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
				ExitCode: 1, Reason: "Error", Message: "permission denied\n"}},
		}}
		return p
	}
	cases := []struct {
		name  string
		pod   *corev1.Pod
		want  string // "" : not broken
		nodes []string
	}{
		{"crash loop", waiting(pod("a2", "a", "2", false), "CrashLoopBackOff", 1),
			"container kube-proxy is waiting in CrashLoopBackOff (restarted 1 times): back-off 10s; last error: exit code 1, Error: permission denied", []string{"a"}},
		{"image pull", waiting(pod("a2", "a", "2", false), "ImagePullBackOff", 0), "ImagePullBackOff", []string{"a"}},
		{"err image pull", waiting(pod("a2", "a", "2", false), "ErrImagePull", 0), "ErrImagePull", []string{"a"}},
		{"config error", waiting(pod("a2", "a", "2", false), "CreateContainerConfigError", 0), "CreateContainerConfigError", []string{"a"}},
		{"run error", waiting(pod("a2", "a", "2", false), "RunContainerError", 0), "RunContainerError", []string{"a"}},
		{"restarted twice, running again", waiting(pod("a2", "a", "2", true), "", 2), "restarted 2 times", []string{"a"}},
		{"starting", waiting(pod("a2", "a", "2", false), "ContainerCreating", 0), "", nil},
		{"restarted once", waiting(pod("a2", "a", "2", false), "", 1), "", nil},
		{"old template crash-looping: not the restart's doing", waiting(pod("a0", "a", "1", false), "CrashLoopBackOff", 9), "", nil},
		{"on a node going away", waiting(pod("c2", "c", "2", false), "CrashLoopBackOff", 3), "", nil},
		{"on a node exempted (unready before)", waiting(pod("b2", "b", "2", false), "CrashLoopBackOff", 3), "", nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFleet(map[string]string{"c": nodes.ToBeDeleted}, pod("a1", "a", "1", true), pod("b1", "b", "1", false), pod("c1", "c", "1", false))
			f.Exempt([]string{"b"})
			f.SetGeneration(2)
			f.upsert(tc.pod)
			got := f.Broken()
			var names []string
			for _, b := range got {
				names = append(names, b.Node)
				assert.Contains(t, b.Problem, tc.want)
				assert.Equal(t, tc.pod.Name, b.Pod)
			}
			assert.Equal(t, tc.nodes, names)
		})
	}
}

// Broken keeps up with the watch: a pod that recovers or goes away is no
// longer listed, one that breaks later is.
func TestBrokenFollowsEvents(t *testing.T) {
	crash := func(p *corev1.Pod) *corev1.Pod {
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "kube-proxy", RestartCount: 3,
			State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}}}}
		return p
	}
	f := newFleet(nil, pod("a1", "a", "1", true), pod("b1", "b", "1", true))
	f.SetGeneration(2)
	f.upsert(crash(pod("a2", "a", "2", false)))
	f.upsert(crash(pod("b2", "b", "2", false)))
	assert.Len(t, f.Broken(), 2)
	f.upsert(pod("a2", "a", "2", true)) // restarted by hand, fine now
	f.remove("b2")
	assert.Empty(t, f.Broken())
	f.upsert(crash(pod("b3", "b", "2", false)))
	assert.Equal(t, []Broken{{Node: "b", Pod: "kube-proxy-b3", Problem: "container kube-proxy is waiting in CrashLoopBackOff (restarted 3 times)"}}, f.Broken())
}

// BenchmarkEventAt5000Nodes is the fleet's cost of one pod watch event in
// the middle of a 5000-node rollout: the bookkeeping and the checks the
// rollout makes after every event.
func BenchmarkEventAt5000Nodes(b *testing.B) {
	var pods []*corev1.Pod
	for i := range 5000 {
		n := fmt.Sprintf("node-%d", i)
		pods = append(pods, pod(n+"-old", n, "1", true), pod(n+"-new", n, "2", i%2 == 0))
	}
	f := newFleet(nil, pods...)
	f.SetGeneration(2)
	b.ResetTimer()
	for i := range b.N {
		p := pods[i%len(pods)]
		f.upsert(p)
		if len(f.Broken()) > 0 || f.PendingCount() < 0 || f.Unavailable() < 0 {
			b.Fatal("no pod is broken")
		}
	}
}

func TestExemptAndStuck(t *testing.T) {
	f := newFleet(map[string]string{"c": nodes.ToBeDeleted},
		pod("a1", "a", "1", true), pod("b1", "b", "1", false), pod("c1", "c", "1", false), pod("d1", "d", "1", true))
	f.Exempt([]string{"b"})
	f.SetGeneration(2)
	assert.Equal(t, []string{"a", "d"}, f.Pending(), "b (unready before) and c (going away) hold no wait")
	assert.Equal(t, 2, f.Stuck(), "b's and c's pods count against the controller's maxUnavailable")
	assert.True(t, f.Exempted("b"))
}

// ownedDS is the DaemonSet dsUID, at template generation 1.
func ownedDS() *appsv1.DaemonSet {
	return &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: "kube-proxy", Namespace: "kube-system", UID: dsUID,
			Annotations: map[string]string{templateGenerationAnnotation: "1"}},
		Spec: appsv1.DaemonSetSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"k8s-app": "kube-proxy"}}},
	}
}

// listed is pod p as the API server lists it: in kube-system, with the
// DaemonSet's labels.
func listed(p *corev1.Pod) *corev1.Pod {
	p.Namespace = "kube-system"
	p.Labels["k8s-app"] = "kube-proxy"
	return p
}

// observe lists pods through Client.Observe, as a run does before the restart.
func observe(t *testing.T, skipped map[string]string, pods ...*corev1.Pod) *Fleet {
	t.Helper()
	var objs []runtime.Object
	for _, p := range pods {
		objs = append(objs, listed(p))
	}
	_, kc := kubefake.New(objs...)
	c := Client{Pods: kc.Pods("kube-system"), Namespace: "kube-system", Name: "kube-proxy", Log: logrus.NewEntry(logrus.New())}
	f, err := c.Observe(context.Background(), ownedDS(), skipped)
	require.NoError(t, err)
	return f
}

// Only the pods the DaemonSet controls are its fleet. A pod with its
// labels but no controller reference to it (a debug copy of a kube-proxy
// pod, a sidecar that borrowed the labels, another DaemonSet's pod with an
// overlapping selector) holds no node, is never an old pod to replace nor
// a new one to delete, and never counts as broken: not when listed, not
// when a watch event brings it.
func TestFleetOnlyCountsPodsTheDaemonSetControls(t *testing.T) {
	crashing := func(p *corev1.Pod) *corev1.Pod {
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "kube-proxy", RestartCount: 5,
			State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}}}}
		return p
	}
	owned := func(p *corev1.Pod, refs ...metav1.OwnerReference) *corev1.Pod {
		p.OwnerReferences = refs
		return p
	}
	notController := controllerRef(dsUID)
	notController.Controller = nil
	other := controllerRef("9f1b-other")
	other.Name = "kube-proxy-windows"
	cases := []struct {
		name string
		// foreign makes the foreign pod on node, of template generation gen
		foreign func(uid, node, gen string) *corev1.Pod
	}{
		{"no owner (a debug copy)", func(uid, node, gen string) *corev1.Pod { return owned(pod(uid, node, gen, true)) }},
		{"no owner, crash-looping on the new generation", func(uid, node, gen string) *corev1.Pod {
			return crashing(owned(pod(uid, node, gen, false)))
		}},
		{"an owner reference that is not the controller", func(uid, node, gen string) *corev1.Pod {
			return owned(pod(uid, node, gen, true), notController)
		}},
		{"another DaemonSet's pod", func(uid, node, gen string) *corev1.Pod {
			return crashing(owned(pod(uid, node, gen, false), other))
		}},
		{"a DaemonSet of the same name, deleted and made again", func(uid, node, gen string) *corev1.Pod {
			return owned(pod(uid, node, gen, true), controllerRef("5e3a-earlier-kube-proxy"))
		}},
	}
	for _, tc := range cases {
		for _, gen := range []string{"", "1", "2"} {
			t.Run(tc.name+", generation "+gen, func(t *testing.T) {
				f := observe(t, map[string]string{},
					pod("a1", "a", "1", true), pod("b1", "b", "1", true),
					tc.foreign("xa", "a", gen), tc.foreign("xc", "c", gen))
				f.SetGeneration(2) // the restart
				assert.Equal(t, []string{"a", "b"}, f.Live(), "c has only a foreign pod: not one of the DaemonSet's nodes")
				uid, _, ok := f.OldPod("a")
				assert.True(t, ok)
				assert.Equal(t, types.UID("a1"), uid, "the DaemonSet's own old pod, never the foreign one")

				// the controller replaces a's and b's pods; foreign pods
				// come and go in the watch meanwhile
				f.remove("a1")
				f.upsert(pod("a2", "a", "2", true))
				f.upsert(listed(tc.foreign("xb", "b", gen)))
				f.upsert(listed(tc.foreign("xa", "a", gen)))
				f.remove("b1")
				f.upsert(pod("b2", "b", "2", true))
				assert.Empty(t, f.Pending(), "every node runs the DaemonSet's new pod, whatever else it runs")
				assert.Empty(t, f.Broken())
				assert.Equal(t, map[types.UID]string{"a2": "kube-proxy-a2", "b2": "kube-proxy-b2"}, f.NewPods(), "the pods a rollback may delete")
				st := f.Status()
				assert.Equal(t, [3]int32{2, 2, 2}, [3]int32{st.Desired, st.Updated, st.Available})
			})
		}
	}
}

// A pod released by the DaemonSet (its labels changed, its controller
// reference dropped) leaves the fleet when the watch brings the change.
func TestFleetDropsAPodTheDaemonSetReleases(t *testing.T) {
	f := observe(t, map[string]string{}, pod("a1", "a", "1", true), pod("a0", "a", "0", false))
	f.SetGeneration(1)
	require.Equal(t, []string{"a"}, f.Pending(), "a0, of an older template, is still the DaemonSet's")
	released := listed(pod("a0", "a", "0", false))
	released.OwnerReferences = nil
	f.upsert(released)
	assert.Empty(t, f.Pending())
	_, _, old := f.OldPod("a")
	assert.False(t, old)
}

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
