package kpsync

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	"github.com/kube-proxy-sync/kube-proxy-sync/internal/verify"
)

// The run's own Service is deleted only once its probe pods are gone: a
// probe pod is deleted with a grace period, and its kubelet goes on
// probing the Service's ClusterIP until it has stopped the pod; were the
// Service gone by then, that probe would leave the node unrouted. Here
// the API server keeps each deleted probe pod terminating until the
// kubelet (the test) removes it, which it does once the run waits.
func TestModeChangeOwnServiceOutlivesItsProbePods(t *testing.T) {
	f := trafficPassesFixture(t)
	isProbe := func(name string) bool { return strings.HasPrefix(name, "kube-proxy-sync-verify-") }
	var mu sync.Mutex
	var graces []int64
	// a graceful delete marks the probe pod terminating
	f.client.PrependReactor("delete", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		d := a.(k8stesting.DeleteActionImpl)
		if !isProbe(d.Name) {
			return false, nil, nil
		}
		mu.Lock()
		if g := d.DeleteOptions.GracePeriodSeconds; g != nil {
			graces = append(graces, *g)
		}
		mu.Unlock()
		obj, err := f.client.Tracker().Get(podsGVR, "kube-system", d.Name)
		if err != nil {
			return true, nil, err
		}
		p := obj.(*corev1.Pod).DeepCopy()
		p.DeletionTimestamp = &metav1.Time{Time: f.clock.Now()}
		return true, nil, f.client.Tracker().Update(podsGVR, p, "kube-system")
	})
	// the kubelets stop them once the run follows them by their label
	f.client.PrependWatchReactor("pods", func(a k8stesting.Action) (bool, watch.Interface, error) {
		if !strings.Contains(a.(k8stesting.WatchAction).GetWatchRestrictions().Labels.String(), verify.ProbeLabel) {
			return false, nil, nil
		}
		w, err := f.client.Tracker().Watch(podsGVR, "kube-system")
		if err != nil {
			return true, nil, err
		}
		list, err := f.client.Tracker().List(podsGVR, corev1.SchemeGroupVersion.WithKind("Pod"), "kube-system")
		if err != nil {
			return true, nil, err
		}
		for _, p := range list.(*corev1.PodList).Items {
			if isProbe(p.Name) && p.DeletionTimestamp != nil {
				assert.NoError(t, f.client.Tracker().Delete(podsGVR, "kube-system", p.Name))
			}
		}
		return true, w, nil
	})
	// what probe pods there are when the Service goes
	left := -1
	f.client.PrependReactor("delete", "services", func(k8stesting.Action) (bool, runtime.Object, error) {
		list, err := f.client.Tracker().List(podsGVR, corev1.SchemeGroupVersion.WithKind("Pod"), "kube-system")
		require.NoError(t, err)
		left = 0
		for _, p := range list.(*corev1.PodList).Items {
			if isProbe(p.Name) {
				left++
			}
		}
		return false, nil, nil
	})
	res, err := f.run(t, Options{Spec: setMode("nftables"), RollbackOnFailure: true, Timeout: time.Minute})
	require.NoError(t, err)
	require.NotNil(t, res.Facts.Connectivity)
	assert.Equal(t, 3, res.Facts.Connectivity.Passed)
	assert.Equal(t, 0, left, "no probe pod left, terminating or not, when the Service was deleted")
	mu.Lock()
	defer mu.Unlock()
	require.NotEmpty(t, graces)
	for _, g := range graces {
		assert.Positive(t, g, "a probe pod is deleted with a grace period: its kubelet stops it before it goes")
	}
	_, err = f.client.CoreV1().Services("kube-system").Get(context.Background(), ProbeServiceName, metav1.GetOptions{})
	assert.Error(t, err, "the Service is gone")
}

// A probe pod a killed run left on a node that went NotReady since stays
// terminating: its kubelet never confirms. It is forced and named, and
// the run checks traffic as usual: a node gone must not block every later
// run that checks traffic.
func TestLeftoverProbePodOnAGoneNodeDoesNotBlockTheRun(t *testing.T) {
	f := trafficPassesFixture(t)
	stuck := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "kube-proxy-sync-verify-node-9-node", Namespace: "kube-system", UID: "stuck", ResourceVersion: "1",
		Labels:            map[string]string{verify.ProbeLabel: verify.ProbeLabelValue},
		DeletionTimestamp: &metav1.Time{Time: f.clock.Now().Add(-time.Hour)}, DeletionGracePeriodSeconds: ptr.To(int64(1))},
		Spec: corev1.PodSpec{NodeName: "node-9"}}
	require.NoError(t, f.client.Tracker().Create(podsGVR, stuck, "kube-system"))
	var forced []int64
	// the API server keeps a terminating pod until its kubelet confirms,
	// unless the delete has no grace period
	f.client.PrependReactor("delete", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		d := a.(k8stesting.DeleteActionImpl)
		if d.Name != stuck.Name {
			return false, nil, nil
		}
		forced = append(forced, ptr.Deref(d.DeleteOptions.GracePeriodSeconds, -1))
		return *d.DeleteOptions.GracePeriodSeconds != 0, nil, nil
	})
	res, err := f.run(t, Options{Spec: setMode("nftables"), RollbackOnFailure: true, Timeout: time.Minute})
	require.NoError(t, err)
	require.NotNil(t, res.Facts.Connectivity)
	assert.Equal(t, 3, res.Facts.Connectivity.Passed)
	assert.Equal(t, []int64{0}, forced, "forced once, at once: its grace period ended an hour ago")
	_, err = f.client.Tracker().Get(podsGVR, "kube-system", stuck.Name)
	assert.True(t, apierrors.IsNotFound(err), "the stuck probe pod is gone: %v", err)
	assert.True(t, slices.ContainsFunc(res.Warnings, func(w string) bool {
		return strings.Contains(w, stuck.Name+" in kube-system force-deleted")
	}), "the forced pod is named: %q", res.Warnings)
}

// trafficPassesFixture is 3 nodes whose new kube-proxy pods come Ready and
// answer healthy, and whose probe pods connect along every path.
func trafficPassesFixture(t *testing.T) *rollingFixture {
	t.Helper()
	f := newRollingFixture(t, 3)
	f.prober = proberFunc(func(string) (verify.Health, error) { return verify.Health{Code: 200}, nil })
	f.podController(t, func(node, gen string) *corev1.Pod { return kubeProxyPod(node, gen, true) })
	ready, connected, _ := probeStatuses()
	f.probeKubelet(t, func(path string) corev1.PodStatus {
		if path == verify.PathPod {
			return connected
		}
		return ready
	})
	return f
}
