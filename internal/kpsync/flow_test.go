package kpsync

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	k8stesting "k8s.io/client-go/testing"

	"github.com/kube-proxy-sync/kube-proxy-sync/internal/configmap"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/verify"
)

// Behaviours pinned in their own packages (verify's checks, rollout's
// sharing), driven here through a whole run, so that a change of the flow
// that stops calling them fails too.

// A resumed canary node was restarted by the earlier run, before this
// run's own Service existed: its kube-proxy's sync proves nothing about
// that Service. Its check waits for the Service in its rules (a sync since
// it was made, then the NodePort) before anything connects to the
// ClusterIP; a kube-proxy that never shows such a sync fails the node, and
// the run goes no further.
func TestFlowResumedCanaryWaitsForItsRules(t *testing.T) {
	f := newRollingFixture(t, 3)
	// the earlier run: a migration stopped after its canary
	mounting := f.stoppedAfterCanary(t)
	require.Equal(t, types.UID("node-0-2"), f.podUID(t, "kube-proxy-node-0-2"), "node-0 runs the canary's pod")

	// this run: node-0's kube-proxy last synced before the run began (and
	// so before the run's own Service); the others sync as they are asked
	require.NoError(t, f.client.Tracker().Create(podsGVR, mounting(kubeProxyPod("node-1", "2", true)), "kube-system"))
	f.podController(t, func(node, gen string) *corev1.Pod { return mounting(kubeProxyPod(node, gen, true)) })
	start := f.clock.Now()
	f.prober = proberFunc(func(node string) (verify.Health, error) {
		now := f.clock.Now()
		synced := now.Add(time.Millisecond)
		if node == "node-0" {
			synced = start.Add(-time.Minute)
		}
		return verify.Health{Code: 200, PerFamily: true, LastSync: synced, NewestSync: synced, CurrentTime: now}, nil
	})
	f.stepWhileWaiting(t, time.Second)
	// the pod path left out: its try before any restart waits for the
	// rules of node-0 itself (TestModeChangePodPathWaitsForTheNodePortBeforeTheClusterIP)
	res, err := f.run(t, Options{Timeout: time.Minute, ProgressDeadline: 24 * time.Hour,
		Connectivity: ConnectivityOptions{TrafficPaths: []string{verify.PathNode, verify.PathNodePort}, HealthTimeout: 5 * time.Second}})
	require.Error(t, err)
	assert.True(t, verify.IsFailure(err), "node-0's check failed: %v", err)
	assert.Contains(t, err.Error(), "node node-0")
	assert.Contains(t, err.Error(), "is in no rules of its kube-proxy yet")
	require.NotNil(t, res.Facts.Connectivity)
	assert.Equal(t, []verify.NodeResult{{Node: "node-0", Detail: res.Facts.Connectivity.Failed[0].Detail}}, res.Facts.Connectivity.Failed)
	assert.Equal(t, 0, res.Facts.Connectivity.Passed)
	assert.Equal(t, types.UID("node-2-1"), f.podUID(t, "kube-proxy-node-2-1"), "node-2 not restarted after the canary failed")
}

// The first node checked paces the nodes after it: its kube-proxy's first
// sync took 8s, so each node after it gets three times that to show its
// own rather than --verify-health-timeout's 10s (nftables' first sync at
// scale takes minutes), and a fleet whose first syncs take 20s passes.
func TestFlowFirstSyncPacesTheNodesAfterTheCanary(t *testing.T) {
	f := newRollingFixture(t, 3)
	f.podController(t, func(node, gen string) *corev1.Pod { return kubeProxyPod(node, gen, true) })
	start := f.clock.Now()
	// a node's new kube-proxy syncs delay after it is first asked (its pod
	// just Ready): 8s on the canary node-0, 20s on the others
	delay := map[string]time.Duration{"node-0": 8 * time.Second, "node-1": 20 * time.Second, "node-2": 20 * time.Second}
	var mu sync.Mutex
	seen := map[string]time.Time{}
	f.prober = proberFunc(func(node string) (verify.Health, error) {
		mu.Lock()
		defer mu.Unlock()
		now := f.clock.Now()
		synced := start.Add(-time.Minute) // the old kube-proxy's last sync
		if _, err := f.client.Tracker().Get(podsGVR, "kube-system", "kube-proxy-"+node+"-2"); err == nil {
			if _, ok := seen[node]; !ok {
				seen[node] = now
			}
			if at := seen[node].Add(delay[node]); !now.Before(at) {
				synced = at
			}
		}
		return verify.Health{Code: 200, PerFamily: true, LastSync: synced, NewestSync: synced, CurrentTime: now}, nil
	})
	f.stepWhileWaiting(t, time.Second)
	res, err := f.run(t, Options{Spec: configmap.Spec{Server: "https://10.0.0.1:6443"}, Strategy: StrategyCanary, CanaryNodes: 1,
		ProgressDeadline: 24 * time.Hour, Timeout: time.Minute,
		Connectivity: ConnectivityOptions{Health: verify.Required, HealthTimeout: 10 * time.Second}})
	require.NoError(t, err, "each node after the canary had three times its first sync, not 10s")
	c := res.Facts.Connectivity
	require.NotNil(t, c)
	assert.Equal(t, 3, c.Passed)
	require.NotNil(t, c.FirstSync, "the canary's first sync is reported")
	assert.Equal(t, "node-0", c.FirstSync.Node)
	assert.GreaterOrEqual(t, c.FirstSync.Seconds, 8.0)
	assert.GreaterOrEqual(t, c.FirstSync.TimeoutSeconds, 24.0, "three times the canary's sync")
	for i := range 3 {
		n := fmt.Sprintf("node-%d", i)
		assert.Equal(t, types.UID(n+"-2"), f.podUID(t, "kube-proxy-"+n+"-2"), "node %s restarted", n)
	}
}

// kubeadm's record is written after a change only once nothing else
// mounts it: here another DaemonSet (a pool's kube-proxy, updated
// OnDelete) whose template has moved off the record but whose old pod
// still mounts it. The run restarts its own fleet onto the copy and leaves
// the record as that pod runs it, saying so.
func TestFlowRecordNotWrittenUnderAnotherDaemonSetsPods(t *testing.T) {
	pool := &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: "kube-proxy-pool", Namespace: "kube-system", UID: "7a3e-pool"},
		Spec: appsv1.DaemonSetSpec{
			Selector:       &metav1.LabelSelector{MatchLabels: map[string]string{"k8s-app": "kube-proxy-pool"}},
			UpdateStrategy: appsv1.DaemonSetUpdateStrategy{Type: appsv1.OnDeleteDaemonSetStrategyType},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"k8s-app": "kube-proxy-pool"}},
				Spec: corev1.PodSpec{Volumes: []corev1.Volume{{Name: "kube-proxy", VolumeSource: corev1.VolumeSource{
					ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "kube-proxy-pool-config"}}}}}},
			},
		},
	}
	old := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "kube-proxy-pool-x1", Namespace: "kube-system", UID: "pool-x1",
			Labels:          map[string]string{"k8s-app": "kube-proxy-pool"},
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(pool, appsv1.SchemeGroupVersion.WithKind("DaemonSet"))}},
		Spec: corev1.PodSpec{NodeName: "node-p", Volumes: []corev1.Volume{{Name: "kube-proxy", VolumeSource: corev1.VolumeSource{
			ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "kube-proxy"}}}}}},
	}
	f := newFixture(t, seedConfigMap(), seedDaemonSet("registry.k8s.io/kube-proxy:v1.33.6"), pool, old)
	res, err := f.run(t, set("mode", "ipvs"))
	require.NoError(t, err, "%s", res.Msg)
	require.True(t, res.Facts.Restarted)
	require.True(t, configmap.IsCopyName("kube-proxy", res.Facts.ConfigMapName), "the fleet runs a copy: %s", res.Facts.ConfigMapName)
	assert.Contains(t, f.getConfigMap(t, res.Facts.ConfigMapName).Data["config.conf"], "mode: ipvs")

	assert.Equal(t, seedConfigMap().Data, f.configMap(t).Data, "the record stays as the pool's old pod runs it")
	assert.False(t, res.Facts.RecordChanged)
	assert.Contains(t, strings.Join(res.Warnings, "\n"), "pod node-p/kube-proxy-pool-x1")
	for _, a := range f.client.Actions() {
		if u, ok := a.(k8stesting.UpdateAction); ok && u.GetResource().Resource == "configmaps" {
			assert.NotEqual(t, "kube-proxy", u.GetObject().(metav1.Object).GetName(), "no write of the record")
		}
	}
	_, err = f.client.CoreV1().Pods("kube-system").Get(context.Background(), old.Name, metav1.GetOptions{})
	assert.NoError(t, err, "the pool's pod is not the run's to touch")
}
