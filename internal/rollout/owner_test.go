package rollout

import (
	"context"
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
)

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
