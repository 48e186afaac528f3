package rollout

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

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
	assert.JSONEq(t, `{"metadata":{"resourceVersion":"5","annotations":{"kube-proxy-sync.io/config-hash":"h","kube-proxy-sync.io/no-effect-hash":null,"kube-proxy-sync.io/template-generation":null,"kube-proxy-sync.io/original-update-strategy":"{\"type\":\"RollingUpdate\"}"}},
		"spec":{"updateStrategy":{"type":"OnDelete","rollingUpdate":null}}}`, string(b))
	b, err = Change{ClearStrategy: true, RemoveProbe: true, Container: "kube-proxy"}.Patch()
	assert.NoError(t, err)
	assert.JSONEq(t, `{"metadata":{"annotations":{"kube-proxy-sync.io/original-update-strategy":null}},
		"spec":{"template":{"spec":{"containers":[{"name":"kube-proxy","readinessProbe":null}]}}}}`, string(b))
}

func TestNextRestartAt(t *testing.T) {
	now := time.Date(2026, 11, 22, 12, 0, 0, 400_000_000, time.UTC)
	cases := []struct {
		name, prev, want string
	}{
		{"none yet: kubectl's whole seconds", "", "2026-11-22T12:00:00Z"},
		{"an earlier second", "2026-11-22T11:59:59Z", "2026-11-22T12:00:00Z"},
		{"the same second: one past it", "2026-11-22T12:00:00Z", "2026-11-22T12:00:01Z"},
		{"a third in that second", "2026-11-22T12:00:01Z", "2026-11-22T12:00:02Z"},
		{"another clock ahead", "2026-11-22T13:00:00+01:00", "2026-11-22T12:00:01Z"},
		{"not a time", "yesterday", "2026-11-22T12:00:00Z"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ds := &appsv1.DaemonSet{}
			if tc.prev != "" {
				ds.Spec.Template.Annotations = map[string]string{RestartedAtAnnotation: tc.prev}
			}
			at := NextRestartAt(ds, now)
			assert.Equal(t, tc.want, Change{RestartAt: &at}.RestartedAt())
		})
	}
}

// A stamp holds only once the template generation its restart moved to is reached.
func TestRunsNeedsTheRestartsTemplate(t *testing.T) {
	ds := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Generation: 4, Annotations: map[string]string{
		HashAnnotation: "h", templateGenerationAnnotation: "2", RestartGenerationAnnotation: "3"}}}
	assert.False(t, Runs(ds, "h"), "the restart did not move the template")
	ds.Annotations[templateGenerationAnnotation] = "3"
	assert.True(t, Runs(ds, "h"))
	ds.Annotations[templateGenerationAnnotation] = "5"
	assert.True(t, Runs(ds, "h"), "later template changes keep it")
	delete(ds.Annotations, RestartGenerationAnnotation)
	ds.Annotations[templateGenerationAnnotation] = "1"
	assert.True(t, Runs(ds, "h"), "a stamp of an adoption or an earlier version holds alone")
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

func TestChangePatchRestoresRestartedAt(t *testing.T) {
	prev := "2026-01-02T03:04:05Z"
	b, err := Change{RestoreRestartedAt: &prev}.Patch()
	assert.NoError(t, err)
	assert.JSONEq(t, `{"metadata":{},"spec":{"template":{"metadata":{"annotations":{"kubectl.kubernetes.io/restartedAt":"2026-01-02T03:04:05Z"}}}}}`, string(b))
	none := ""
	b, err = Change{RestoreRestartedAt: &none}.Patch()
	assert.NoError(t, err)
	assert.JSONEq(t, `{"metadata":{},"spec":{"template":{"metadata":{"annotations":{"kubectl.kubernetes.io/restartedAt":null}}}}}`, string(b))
	assert.True(t, Change{RestoreRestartedAt: &none}.Restarts())
}

// An image change is a template change (a restart), merged into the
// container by name, and applied only once the template has the image.
func TestChangePatchSetsTheImage(t *testing.T) {
	ch := Change{Container: "kube-proxy", Image: "registry.k8s.io/kube-proxy:v1.34.4"}
	b, err := ch.Patch()
	require.NoError(t, err)
	assert.JSONEq(t, `{"metadata":{},"spec":{"template":{"spec":{"containers":[{"name":"kube-proxy","image":"registry.k8s.io/kube-proxy:v1.34.4"}]}}}}`, string(b))
	assert.True(t, ch.Restarts())
	ds := &appsv1.DaemonSet{Spec: appsv1.DaemonSetSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{
		{Name: "sidecar", Image: "registry.k8s.io/kube-proxy:v1.34.4"}, {Name: "kube-proxy", Image: "registry.k8s.io/kube-proxy:v1.33.6"},
	}}}}}
	assert.False(t, ch.AppliedTo(ds), "another container's image is not this one's")
	ds.Spec.Template.Spec.Containers[1].Image = ch.Image
	assert.True(t, ch.AppliedTo(ds))
}

// A rollback to an exec (or tcpSocket) probe must not leave the HTTP GET
// next to it: the API server refuses a probe with two handlers.
func TestChangePatchReplacesProbeHandler(t *testing.T) {
	exec := &corev1.Probe{ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"true"}}}}
	b, err := Change{Container: "kube-proxy", Probe: exec, LivenessProbe: exec}.Patch()
	assert.NoError(t, err)
	assert.JSONEq(t, `{"metadata":{},"spec":{"template":{"spec":{"containers":[{"name":"kube-proxy",
		"readinessProbe":{"exec":{"command":["true"]},"httpGet":null,"tcpSocket":null,"grpc":null},
		"livenessProbe":{"exec":{"command":["true"]},"httpGet":null,"tcpSocket":null,"grpc":null}}]}}}}`, string(b))
}

// mounting is p mounting the ConfigMaps names.
func mounting(p *corev1.Pod, names ...string) *corev1.Pod {
	for _, n := range names {
		p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: n, VolumeSource: corev1.VolumeSource{
			ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: n}}}})
	}
	return p
}

// The fleet knows which ConfigMaps its pods mount, as it last saw them:
// what the record write after a rollout needs, without listing the pods.
func TestFleetMounts(t *testing.T) {
	old := mounting(pod("c1", "c", "1", false), "kube-proxy")
	f := newFleet(map[string]string{"c": nodes.ToBeDeleted},
		mounting(pod("a2", "a", "2", true), "kube-proxy-0123456789"), mounting(pod("b2", "b", "2", true), "kube-proxy-0123456789", "extra"), old)
	by, current := f.MountedBy("kube-proxy")
	assert.Equal(t, []string{"c/kube-proxy-c1"}, by)
	assert.True(t, current)
	assert.Equal(t, map[string]bool{"kube-proxy": true, "kube-proxy-0123456789": true, "extra": true}, f.ConfigMaps())
	assert.Equal(t, int64(2), f.Newest())

	old.DeletionTimestamp = &metav1.Time{Time: time.Unix(0, 0)}
	f.upsert(old)
	by, current = f.MountedBy("kube-proxy")
	assert.Equal(t, []string{"c/kube-proxy-c1"}, by)
	assert.False(t, current, "a terminating pod may be gone by now")

	f.remove(old.UID)
	by, current = f.MountedBy("kube-proxy")
	assert.Empty(t, by)
	assert.True(t, current)
	assert.Equal(t, map[string]bool{"kube-proxy-0123456789": true, "extra": true}, f.ConfigMaps())
}
