package rollout

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

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
