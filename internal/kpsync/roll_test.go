package kpsync

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"

	"github.com/kube-proxy-sync/kube-proxy-sync/internal/kube"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/rollout"
)

// The endpoint check goes through the API server's node proxy; an httptest
// server stands in for the API server.
func TestVerifyEndpoints(t *testing.T) {
	var asked []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		asked = append(asked, r.URL.Path)
		if r.URL.Path == "/api/v1/nodes/a:10256/proxy/livez" {
			_, _ = w.Write([]byte("ok"))
			return
		}
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer srv.Close()
	api, err := kube.NewForConfig(&rest.Config{Host: srv.URL}, kube.Options{})
	require.NoError(t, err)
	log := logrus.New()
	log.SetOutput(io.Discard)
	fleet := newDoneFleet(t, "a", "b", "c")

	e := &env{o: Options{}, d: Deps{Kube: api, Log: logrus.NewEntry(log)}}
	assert.Equal(t, []string{"a"}, fleet.DoneLive(1))
	require.NoError(t, verifyEndpoints(context.Background(), e, fleet.DoneLive(1), "/livez", 10256))
	assert.Equal(t, []string{"/api/v1/nodes/a:10256/proxy/livez"}, asked)

	err = verifyEndpoints(context.Background(), e, fleet.DoneLive(2), "/livez", 10256)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "b (")
	assert.NotContains(t, err.Error(), "a (")
}

// newDoneFleet is a fleet whose nodes all run a Ready pod of the current template.
func newDoneFleet(t *testing.T, nodeNames ...string) *rollout.Fleet {
	t.Helper()
	var objs []runtime.Object
	for _, n := range nodeNames {
		objs = append(objs, kubeProxyPod(n, "1", true))
	}
	ds := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: "kube-proxy", Namespace: "kube-system", Generation: 1, UID: dsUID},
		Spec: appsv1.DaemonSetSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"k8s-app": "kube-proxy"}}}}
	pods := fake.NewClientset(objs...).CoreV1().Pods("kube-system")
	c := rollout.Client{Pods: pods, Namespace: "kube-system", Name: "kube-proxy"}
	f, err := c.Observe(context.Background(), ds, map[string]string{})
	require.NoError(t, err)
	require.Empty(t, f.Pending())
	return f
}

func TestProgressDeadline(t *testing.T) {
	ds := func(probe *corev1.Probe, minReady int32, grace *int64) *appsv1.DaemonSet {
		d := &appsv1.DaemonSet{}
		d.Spec.MinReadySeconds = minReady
		d.Spec.Template.Spec.TerminationGracePeriodSeconds = grace
		d.Spec.Template.Spec.Containers = []corev1.Container{{Name: "kube-proxy", ReadinessProbe: probe}}
		return d
	}
	g := func(v int64) *int64 { return &v }
	cases := []struct {
		name string
		ds   *appsv1.DaemonSet
		want time.Duration
	}{
		{"kubeadm's: no probe, default grace, at least 2m", ds(nil, 0, nil), 2 * time.Minute},
		{"probe defaults: 2*(30+10*(1+3)+1)+60", ds(&corev1.Probe{}, 0, nil), 202 * time.Second},
		{"slow probe and minReadySeconds", ds(&corev1.Probe{InitialDelaySeconds: 15, PeriodSeconds: 30, FailureThreshold: 5, SuccessThreshold: 1, TimeoutSeconds: 5}, 10, g(60)),
			time.Duration(2*(60+10+15+30*6+5)+60) * time.Second},
		{"short grace still at least 2m", ds(nil, 0, g(1)), 2 * time.Minute},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, ProgressDeadline(tc.ds, "kube-proxy"))
		})
	}
}
