package kpsync

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/kube-proxy-sync/kube-proxy-sync/internal/configmap"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/nodes"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/rollout"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
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

// A node that registered and went away before it could run anything holds
// a DaemonSet pod that is Pending and bound to no node: the controller
// names the node only in the pod's node affinity, and counts the pod
// against maxUnavailable. The restart raises maxUnavailable by one for it,
// and the run does not wait for it.
func TestUnboundPodOnLeavingNodeRaisesMaxUnavailable(t *testing.T) {
	f := newRollingFixture(t, 2)
	f.updateDaemonSet(t, func(ds *appsv1.DaemonSet) {
		ds.Spec.UpdateStrategy.RollingUpdate = &appsv1.RollingUpdateDaemonSet{MaxUnavailable: ptr.To(intstr.FromInt32(1))}
		ds.Status.DesiredNumberScheduled, ds.Status.NumberAvailable, ds.Status.NumberReady = 3, 2, 2
	})
	leaving := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "leaving"},
		Spec:   corev1.NodeSpec{Taints: []corev1.Taint{{Key: nodes.ToBeDeletedTaint, Value: "1700000000", Effect: corev1.TaintEffectNoSchedule}}},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionFalse}}}}
	require.NoError(t, f.client.Tracker().Add(leaving))
	pending := kubeProxyPod("", "1", false)
	pending.Name, pending.UID = "kube-proxy-leaving", "leaving-1"
	pending.Status.Phase = corev1.PodPending
	pending.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
		RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
			MatchFields: []corev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{"leaving"}}},
		}}},
	}}
	require.NoError(t, f.client.Tracker().Add(pending))
	var during *appsv1.DaemonSet
	f.step = func(_ context.Context, step string) {
		if step == StepDaemonSetPatched {
			during = f.daemonSet(t)
		}
	}
	go func() {
		<-f.podWatches
		for i := range f.n {
			f.replace(t, kubeProxyPod(fmt.Sprintf("node-%d", i), "2", true))
		}
	}()
	res, err := f.run(t, Options{Spec: configmap.Spec{Server: "https://10.0.0.1:6443"}, RollbackOnFailure: true, Timeout: 10 * time.Second})
	require.NoError(t, err)
	require.NotNil(t, during)
	require.NotNil(t, during.Spec.UpdateStrategy.RollingUpdate)
	assert.Equal(t, "2", during.Spec.UpdateStrategy.RollingUpdate.MaxUnavailable.String(), "raised by one for the pod on the leaving node")
	assert.JSONEq(t, `{"type":"RollingUpdate","rollingUpdate":{"maxUnavailable":1}}`, during.Annotations[rollout.StrategyAnnotation])
	after := f.daemonSet(t)
	assert.Equal(t, "1", after.Spec.UpdateStrategy.RollingUpdate.MaxUnavailable.String(), "put back after the rollout")
	assert.NotContains(t, after.Annotations, rollout.StrategyAnnotation)
	r := res.Facts.Rollout
	assert.Equal(t, []nodes.Skipped{{Name: "leaving", Reason: nodes.ToBeDeleted}}, r.SkippedNodes)
	assert.Equal(t, [3]int32{3, 2, 2}, [3]int32{r.Desired, r.Updated, r.Available}, "the leaving node counted, as the controller does, and not waited for")
	assert.Equal(t, types.UID("leaving-1"), f.podUID(t, "kube-proxy-leaving"))
}
