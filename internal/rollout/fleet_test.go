package rollout

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
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

// revisionOf is the ControllerRevision the DaemonSet controller records
// for ds's template when it mounts configMap, as its snapshot does: named
// <DaemonSet>-<hash>, labelled with the template's labels and
// controller-revision-hash, the template stored as a replacing patch, and
// controlled by owner (ds itself, for its own revisions).
func revisionOf(t *testing.T, ds, owner *appsv1.DaemonSet, revision int64, configMap string) *appsv1.ControllerRevision {
	t.Helper()
	tmpl := ds.Spec.Template.DeepCopy()
	tmpl.Spec.Volumes = []corev1.Volume{{Name: "kube-proxy", VolumeSource: corev1.VolumeSource{
		ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: configMap}}}}}
	raw, err := runtime.DefaultUnstructuredConverter.ToUnstructured(tmpl)
	require.NoError(t, err)
	raw["$patch"] = "replace"
	data, err := json.Marshal(map[string]any{"spec": map[string]any{"template": raw}})
	require.NoError(t, err)
	hash := fmt.Sprintf("%x", 0x5c4f8d7b0+revision)
	lbls := map[string]string{appsv1.DefaultDaemonSetUniqueLabelKey: hash}
	for k, v := range tmpl.Labels {
		lbls[k] = v
	}
	return &appsv1.ControllerRevision{
		ObjectMeta: metav1.ObjectMeta{Name: owner.Name + "-" + hash, Namespace: owner.Namespace, Labels: lbls,
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(owner, appsv1.SchemeGroupVersion.WithKind("DaemonSet"))}},
		Data:     runtime.RawExtension{Raw: data},
		Revision: revision,
	}
}

// RevisionConfigMaps keeps what `kubectl rollout undo --to-revision` can
// restore, which it finds as kubectl does (controlledHistories): the
// revisions the DaemonSet's selector matches that the DaemonSet controls.
// Each layout has revisions as the DaemonSet controller labels them; those
// of another DaemonSet carrying the same labels (an overlapping selector),
// and those of an earlier DaemonSet of the same name (deleted, its
// revisions not yet collected), are not its own. The DaemonSet's own
// labels differ from its selector in the second layout, and neither is
// kubeadm's k8s-app=kube-proxy: a list by anything but the selector finds
// none of its revisions.
func TestRevisionConfigMapsAreTheDaemonSetsOwn(t *testing.T) {
	daemonSet := func(name string, uid types.UID, labels, selector, template map[string]string) *appsv1.DaemonSet {
		return &appsv1.DaemonSet{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "kube-system", UID: uid, Labels: labels},
			Spec: appsv1.DaemonSetSpec{
				Selector: &metav1.LabelSelector{MatchLabels: selector},
				Template: corev1.PodTemplateSpec{
					ObjectMeta: metav1.ObjectMeta{Labels: template},
					Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "kube-proxy"}}},
				},
			},
		}
	}
	kubeadm := map[string]string{"k8s-app": "kube-proxy"}
	pool := map[string]string{"app": "kubernetes", "role": "proxy", "pool": "pool-a"}
	poolTemplate := map[string]string{"app": "kubernetes", "role": "proxy", "pool": "pool-a", "networking.gardener.cloud/to-apiserver": "allowed"}
	for _, tc := range []struct {
		name string
		ds   *appsv1.DaemonSet
	}{
		{"kubeadm's", daemonSet("kube-proxy", dsUID, kubeadm, kubeadm, kubeadm)},
		{"a DaemonSet per node pool", daemonSet("kube-proxy-pool-a", dsUID,
			map[string]string{"app": "kubernetes", "role": "proxy", "origin": "gardener"}, pool, poolTemplate)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ds := tc.ds
			// the same selector and template labels, another DaemonSet
			other := ds.DeepCopy()
			other.Name, other.UID = ds.Name+"-windows", "7a3e-other"
			// the same name, an earlier incarnation
			earlier := ds.DeepCopy()
			earlier.UID = "2b9f-deleted"
			objs := []runtime.Object{
				revisionOf(t, ds, ds, 1, "kube-proxy"),
				revisionOf(t, ds, ds, 2, "kube-proxy-1111111111"),
				revisionOf(t, ds, ds, 3, "kube-proxy-2222222222"),
				revisionOf(t, other, other, 1, "kube-proxy-3333333333"),
				revisionOf(t, earlier, earlier, 4, "kube-proxy-4444444444"),
			}
			// the precondition: a list by the selector finds them all, so
			// only the controller reference tells them apart
			sel, err := metav1.LabelSelectorAsSelector(ds.Spec.Selector)
			require.NoError(t, err)
			for _, o := range objs {
				cr := o.(*appsv1.ControllerRevision)
				require.True(t, sel.Matches(labels.Set(cr.Labels)), "revision %s carries the labels the DaemonSet controller gives it", cr.Name)
			}
			_, kc := kubefake.New(objs...)
			c := Client{Revisions: kc.ControllerRevisions("kube-system"), Namespace: "kube-system", Name: ds.Name}

			got, err := c.RevisionConfigMaps(context.Background(), ds)
			require.NoError(t, err)
			assert.Equal(t, map[string]bool{"kube-proxy": true, "kube-proxy-1111111111": true, "kube-proxy-2222222222": true}, got,
				"the configmaps its own revisions mount, and no other's")
		})
	}
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

// What mounts the config and its copies is read from the cluster, whoever
// wrote it, and each source once: the DaemonSet's pods, another DaemonSet
// on the same config (its template, pods and revisions) and the
// DaemonSet's own revisions.
func TestUsesReadsWhatMountsTheConfigOnce(t *testing.T) {
	ours := ownedDS()
	ours.Spec.Template.Labels = map[string]string{"k8s-app": "kube-proxy"}
	windows := &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: "kube-proxy-windows", Namespace: "kube-system", UID: "7a3e-windows"},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"k8s-app": "kube-proxy-windows"}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"k8s-app": "kube-proxy-windows"}},
				Spec: corev1.PodSpec{Volumes: []corev1.Volume{{Name: "kube-proxy", VolumeSource: corev1.VolumeSource{
					ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "kube-proxy"}}}}}},
			},
		},
	}
	windowsPod := mounting(pod("w1", "w", "1", true), "kube-proxy", "kube-proxy-bbbbbbbbbb", "unrelated")
	windowsPod.Namespace, windowsPod.Labels["k8s-app"] = "kube-system", "kube-proxy-windows"
	windowsPod.OwnerReferences = []metav1.OwnerReference{*metav1.NewControllerRef(windows, appsv1.SchemeGroupVersion.WithKind("DaemonSet"))}
	cs, kc := kubefake.New(ours, windows, windowsPod,
		listed(mounting(pod("a1", "a", "1", true), "kube-proxy-aaaaaaaaaa")),
		revisionOf(t, ours, ours, 1, "kube-proxy-cccccccccc"),
		revisionOf(t, windows, windows, 1, "kube-proxy-dddddddddd"))
	c := Client{DaemonSets: kc.DaemonSets("kube-system"), Revisions: kc.ControllerRevisions("kube-system"), Pods: kc.Pods("kube-system"),
		Namespace: "kube-system", Name: "kube-proxy", Log: logrus.NewEntry(logrus.New())}
	ofConfig := func(name string) bool { return name == "kube-proxy" || strings.HasPrefix(name, "kube-proxy-") }
	u := c.Uses(ours, nil, ofConfig)

	others, err := u.OthersMounting(context.Background(), "kube-proxy")
	require.NoError(t, err)
	assert.Equal(t, []string{"daemonset kube-proxy-windows", "pod w/kube-proxy-w1"}, others)
	inUse, err := u.InUse(context.Background())
	require.NoError(t, err)
	assert.Equal(t, map[string]bool{
		"kube-proxy-aaaaaaaaaa": true, // our pod
		"kube-proxy":            true, // the other's template and pod
		"kube-proxy-bbbbbbbbbb": true, // the other's pod
		"kube-proxy-dddddddddd": true, // the other's revision
		"kube-proxy-cccccccccc": true, // our revision
	}, inUse, "not what the other's pod mounts besides the config")

	lists := map[string]int{}
	for _, a := range cs.Actions() {
		if a.GetVerb() == "list" {
			lists[a.GetResource().Resource]++
		}
	}
	assert.Equal(t, map[string]int{"daemonsets": 1, "pods": 2, "controllerrevisions": 2}, lists,
		"the daemonsets once; the pods and revisions of each DaemonSet once")
}

// Another DaemonSet whose template has moved off the config (an OnDelete
// DaemonSet keeps its old pods until they are deleted) shares it while
// any of its pods still mounts it: those pods run it, and read a write at
// their next restart. One whose template and pods mount none of it does
// not.
func TestSharingCountsPodsOfATemplateMovedOff(t *testing.T) {
	other := func(name string, volumes ...string) *appsv1.DaemonSet {
		ds := &appsv1.DaemonSet{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "kube-system", UID: types.UID("7a3e-" + name)},
			Spec: appsv1.DaemonSetSpec{
				Selector:       &metav1.LabelSelector{MatchLabels: map[string]string{"k8s-app": name}},
				UpdateStrategy: appsv1.DaemonSetUpdateStrategy{Type: appsv1.OnDeleteDaemonSetStrategyType},
				Template:       corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"k8s-app": name}}},
			},
		}
		ds.Spec.Template.Spec.Volumes = mounting(&corev1.Pod{}, volumes...).Spec.Volumes
		return ds
	}
	podOf := func(ds *appsv1.DaemonSet, uid, node string, volumes ...string) *corev1.Pod {
		p := mounting(pod(uid, node, "1", true), volumes...)
		p.Namespace, p.Labels["k8s-app"] = "kube-system", ds.Name
		p.OwnerReferences = []metav1.OwnerReference{*metav1.NewControllerRef(ds, appsv1.SchemeGroupVersion.WithKind("DaemonSet"))}
		return p
	}
	ours := ownedDS()
	pool := other("kube-proxy-pool", "kube-proxy-pool-config") // its template moved off the record
	cni := other("cni", "cni-config")
	_, kc := kubefake.New(ours, pool, cni,
		podOf(pool, "p1", "p", "kube-proxy"),             // an old pod: still the record
		podOf(pool, "p2", "q", "kube-proxy-pool-config"), // a new one
		podOf(cni, "c1", "p", "cni-config"))
	c := Client{DaemonSets: kc.DaemonSets("kube-system"), Revisions: kc.ControllerRevisions("kube-system"), Pods: kc.Pods("kube-system"),
		Namespace: "kube-system", Name: "kube-proxy", Log: logrus.NewEntry(logrus.New())}
	ofConfig := func(name string) bool {
		return name == "kube-proxy" || strings.HasPrefix(name, "kube-proxy-") && name != "kube-proxy-pool-config"
	}

	sharing, err := c.Sharing(context.Background(), ours, ofConfig)
	require.NoError(t, err)
	require.Len(t, sharing, 1, "the pool's old pod mounts the record; the cni DaemonSet mounts none of it")
	assert.Equal(t, "kube-proxy-pool", sharing[0].DaemonSet)
	assert.Empty(t, sharing[0].Template)
	assert.Equal(t, map[string][]string{"kube-proxy": {"p/kube-proxy-p1"}}, sharing[0].Pods)

	others, err := c.Uses(ours, nil, ofConfig).OthersMounting(context.Background(), "kube-proxy")
	require.NoError(t, err)
	assert.Equal(t, []string{"pod p/kube-proxy-p1"}, others, "the record is not written while the pool's old pod mounts it")
}
