package rollout

import (
	"testing"

	"github.com/stretchr/testify/assert"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kube-proxy-sync/kube-proxy-sync/internal/nodes"
)

func pod(uid, node, gen string, ready bool) *corev1.Pod {
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{UID: types.UID(uid), Name: "kube-proxy-" + uid, Labels: map[string]string{templateGenerationLabel: gen}},
		Spec:       corev1.PodSpec{NodeName: node},
		Status:     corev1.PodStatus{Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: status}}},
	}
}

func newFleet(skipped map[string]string, pods ...*corev1.Pod) *Fleet {
	f := &Fleet{Skipped: skipped, pods: map[types.UID]podState{}, byNode: map[string]map[types.UID]bool{},
		expected: map[string]bool{}, notDone: map[string]bool{}, unready: map[string]bool{}}
	for _, p := range pods {
		f.upsert(p)
		f.expected[p.Spec.NodeName] = true
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

func TestTemplateGeneration(t *testing.T) {
	ds := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Generation: 7, Annotations: map[string]string{templateGenerationAnnotation: "3"}}}
	assert.Equal(t, int64(3), TemplateGeneration(ds), "the annotation, which moves only with the template")
	delete(ds.Annotations, templateGenerationAnnotation)
	assert.Equal(t, int64(7), TemplateGeneration(ds))
}

func TestChangePatch(t *testing.T) {
	onDelete := &appsv1.DaemonSetUpdateStrategy{Type: appsv1.OnDeleteDaemonSetStrategyType}
	b, err := Change{ResourceVersion: "5", Hash: "h", Strategy: onDelete, SaveStrategy: `{"type":"RollingUpdate"}`}.Patch()
	assert.NoError(t, err)
	assert.JSONEq(t, `{"metadata":{"resourceVersion":"5","annotations":{"kube-proxy-sync.io/config-hash":"h","kube-proxy-sync.io/original-update-strategy":"{\"type\":\"RollingUpdate\"}"}},
		"spec":{"updateStrategy":{"type":"OnDelete","rollingUpdate":null}}}`, string(b))
	b, err = Change{ClearStrategy: true, RemoveProbe: true, Container: "kube-proxy"}.Patch()
	assert.NoError(t, err)
	assert.JSONEq(t, `{"metadata":{"annotations":{"kube-proxy-sync.io/original-update-strategy":null}},
		"spec":{"template":{"spec":{"containers":[{"name":"kube-proxy","readinessProbe":null}]}}}}`, string(b))
}
