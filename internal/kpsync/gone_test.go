package kpsync

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kube-proxy-sync/kube-proxy-sync/internal/configmap"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/nodes"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/rollout"
)

// A node whose kubelet stops in the middle of a rolling update keeps an
// old pod that is not Ready. The wait's recheck stops waiting for it, but
// the DaemonSet controller still counts it against maxUnavailable: with
// kubeadm's budget of 1 it would replace no other pod, and the progress
// deadline would roll the whole fleet back. So the raise grows by one for
// it, and goes back after the rollout.
func TestNodeGoneDuringTheWaitRaisesMaxUnavailable(t *testing.T) {
	f := newRollingFixture(t, 3)
	var during *appsv1.DaemonSet
	go func() {
		w := <-f.watches
		f.replace(t, kubeProxyPod("node-0", "2", true))
		// the status stalls: the pods are followed from here
		w.Modify(f.status("301", 1, 2))
		w.Modify(f.status("302", 1, 2))
		w.Modify(f.status("303", 1, 2))
		f.clock.Step(statusStall)
		<-f.podWatches
		// node-2's kubelet stops: the node controller marks it Unknown and
		// its pod unready
		n, err := f.client.CoreV1().Nodes().Get(context.Background(), "node-2", metav1.GetOptions{})
		if !assert.NoError(t, err) {
			return
		}
		n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionUnknown}}
		_, err = f.client.CoreV1().Nodes().UpdateStatus(context.Background(), n, metav1.UpdateOptions{})
		assert.NoError(t, err)
		stuck := kubeProxyPod("node-2", "1", false)
		stuck.ResourceVersion = "5"
		assert.NoError(t, f.client.Tracker().Update(corev1.SchemeGroupVersion.WithResource("pods"), stuck, "kube-system"))
		// no progress for a recheck period: the recheck skips node-2
		raisedTo := func() string {
			ds := f.daemonSet(t)
			if ru := ds.Spec.UpdateStrategy.RollingUpdate; ru != nil && ru.MaxUnavailable != nil {
				during = ds
				return ru.MaxUnavailable.String()
			}
			return ""
		}
		assert.Eventually(t, func() bool {
			if raisedTo() == "2" {
				return true
			}
			f.clock.Step(recheckEvery)
			return false
		}, 10*time.Second, 10*time.Millisecond, "maxUnavailable raised for the node gone away")
		f.replace(t, kubeProxyPod("node-1", "2", true))
	}()
	res, err := f.run(t, Options{Spec: configmap.Spec{Server: "https://10.0.0.1:6443"}, RollbackOnFailure: true, Timeout: 20 * time.Second})
	require.NoError(t, err)
	require.NotNil(t, during, "the raise was seen")
	assert.JSONEq(t, `{"type":"RollingUpdate"}`, during.Annotations[rollout.StrategyAnnotation], "the DaemonSet's own strategy saved")
	assert.Equal(t, []nodes.Skipped{{Name: "node-2", Reason: nodes.Unknown}}, res.Facts.Rollout.SkippedNodes)
	after := f.daemonSet(t)
	assert.Equal(t, appsv1.DaemonSetUpdateStrategy{Type: appsv1.RollingUpdateDaemonSetStrategyType}, after.Spec.UpdateStrategy, "put back after the rollout")
	assert.NotContains(t, after.Annotations, rollout.StrategyAnnotation)
}
